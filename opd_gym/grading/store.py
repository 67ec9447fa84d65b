"""A folder of calibrations made ahead of time, with the secret that seeds their canaries.

A Grader given `calibrations=DIR` keeps each task's calibration there (`Grader._stored`),
named by a hash of its secret, the task's key, `hold` and CALIBRATION_FORMAT: an entry is
only found again by a Grader with the same secret. So the secret lives in the folder itself
(DIR/secret: 32 random bytes, made 0600 on first use and read after): `opd-gym tasks
calibrate --calibrations DIR` and a later `opd-gym rollout --calibrations DIR` draw the same
canaries and the rollout's first grades read what was calibrated. Whoever reads the secret
knows where every canary sits, and the entries are pickles the Grader loads: the folder must
never be readable or writable by a sandbox (never mount it into one) or by another user, so a
folder or secret file that is not ours or that others may open is refused.
"""

from __future__ import annotations

import os
import pickle
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opd_gym.errors import ConfigError
from opd_gym.grading.grader import Grader, SandboxSource, stored_name, task_key, with_own_bodies

SECRET_NAME = "secret"  # the file in the store holding the Graders' secret
SECRET_BYTES = 32


@dataclass(frozen=True)
class CalibrationStore:
    """An opened store: its folder and the secret read (or made) there."""

    path: Path
    secret: bytes

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> CalibrationStore:
        """The store at `path`, the folder (0700) and its secret made where missing; raises
        ConfigError for a folder or secret file not ours or that others may open (the message
        says how to fix it)."""
        folder = Path(path)
        try:
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            info = folder.stat()
        except OSError as exc:
            raise ConfigError(f"calibrations {str(folder)!r}: cannot make or open the folder "
                              f"({exc.strerror or exc})") from None
        if not stat.S_ISDIR(info.st_mode):
            raise ConfigError(f"calibrations {str(folder)!r} is not a folder")
        if info.st_uid != os.getuid():
            raise ConfigError(f"calibrations {str(folder)!r}: the folder is not ours (its "
                              "pickles are loaded as code): use a folder of your own")
        if info.st_mode & 0o077:
            raise ConfigError(
                f"calibrations {str(folder)!r}: others may open the folder (mode "
                f"{stat.S_IMODE(info.st_mode):o}); its entries say where canaries sit and are "
                f"loaded as code: `chmod 700 {folder}` (or let the command make the folder)")
        return cls(folder, _secret(folder / SECRET_NAME))

    def grader(self, sandboxes: SandboxSource, **settings: Any) -> Grader:
        """A Grader on `sandboxes` that reads and fills this store, with its secret."""
        return Grader(sandboxes, secret=self.secret, calibrations=self.path, **settings)

    def entry(self, task: Any, hold: bool = True) -> Path:
        """Where `task`'s calibration lies (or will) for a Grader with `hold`."""
        key = task_key(with_own_bodies(task))
        return self.path / f"{stored_name(self.secret, key, hold)}.pickle"

    def calibrated(self, task: Any, hold: bool = True) -> bool:
        """`task` is calibrated here for this format and `hold`: a Grader's first grade of it
        reads the entry instead of calibrating (an unreadable entry counts as missing, as the
        Grader calibrates again then)."""
        try:
            pickle.loads(self.entry(task, hold).read_bytes())
        except (OSError, EOFError, pickle.UnpicklingError, AttributeError, TypeError):
            return False
        return True

    def count(self, tasks: Iterable[Any], hold: bool = True) -> int:
        """How many of `tasks` are calibrated here."""
        return sum(self.calibrated(t, hold) for t in tasks)


def make_grader(sandboxes: SandboxSource, calibrations: str | os.PathLike[str] | None = None
                ) -> Grader:
    """The Grader a run builds on `sandboxes`: on the store at `calibrations` (its secret)
    when given, else a fresh secret held in memory only (rollout, serve, TRL, Ray workers)."""
    if calibrations is None:
        return Grader(sandboxes)
    return CalibrationStore.open(calibrations).grader(sandboxes)


def _secret(path: Path) -> bytes:
    """The secret in `path`, made (0600, os.urandom) when there is none; refused when the
    file is not a plain file of ours that only we may read, or not SECRET_BYTES long."""
    if not path.exists() and not path.is_symlink():
        partial = path.with_name(f".{path.name}.{os.getpid()}.part")
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(os.urandom(SECRET_BYTES))
                out.flush()
                os.fsync(out.fileno())
            try:
                os.link(partial, path)  # atomic: another process's secret, if first, wins
            except FileExistsError:
                pass
        finally:
            partial.unlink(missing_ok=True)
    info = path.lstat()
    where = f"calibrations secret {str(path)!r}"
    if not stat.S_ISREG(info.st_mode):
        raise ConfigError(f"{where} is not a plain file: remove it (a new one is made)")
    if info.st_uid != os.getuid():
        raise ConfigError(f"{where} is not ours: use a calibrations folder of your own")
    if info.st_mode & 0o077:
        raise ConfigError(f"{where} may be read by others (mode {stat.S_IMODE(info.st_mode):o}),"
                          " so its canaries are no secret: remove the folder's calibrations "
                          f"and the secret and calibrate again (or `chmod 600 {path}` if "
                          "nobody else could have read it)")
    secret = path.read_bytes()
    if len(secret) != SECRET_BYTES:
        raise ConfigError(f"{where} holds {len(secret)} bytes, not {SECRET_BYTES}: remove it "
                          "and the folder's calibrations, then calibrate again")
    return secret


__all__ = ["SECRET_BYTES", "SECRET_NAME", "CalibrationStore", "make_grader"]
