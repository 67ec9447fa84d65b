"""Environment images: a base image plus setup steps, built once offline, named by content.

A task that needs more than the sandbox image (a dependency, a compiled extension) names setup
steps. They run as root, in order, in a container of the base image with no network and the
host's setup cache (the pinned downloads `scripts/setup.sh` keeps) mounted read-only at
`SETUP_CACHE_MOUNT`; the result is committed as `opd-gym-env:<hash>`, where the hash covers
the base image's id, the steps and the listing of the cache files the steps name. The same
steps on the same base are therefore built once per machine, by whichever process gets there
first (a file lock).

Images are kept under a disk budget: `ImageCache.collect` removes the least recently used
environment images (never the sandbox image, never one a container is using) until the rest
fit. Last use is recorded in a small JSON index next to the lock files.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from opd_gym.errors import ConfigError
from opd_gym.sandboxes.base import SandboxError, SandboxUnavailable
from opd_gym.sandboxes.image import DEFAULT_IMAGE

REPOSITORY = "opd-gym-env"
IMAGE_LABEL = "opd_gym.env_image"  # every environment image carries it (the collector's filter)
BASE_LABEL = "opd_gym.env_base"
SETUP_CACHE_MOUNT = "/opd-cache"
# A setup step installs into the image's own Python, which Debian marks externally managed
# (PEP 668): `pip install ...` in a step works as written, with no extra flag.
SETUP_ENVIRONMENT = {"PIP_BREAK_SYSTEM_PACKAGES": "1", "PIP_ROOT_USER_ACTION": "ignore"}
DEFAULT_BUDGET = 20 << 30
STEP_TIMEOUT = 1800.0
# a path below the setup cache in a setup step: `/opd-cache`, `/opd-cache/sdists/x.tar.gz`
_CACHE_PATH = re.compile(re.escape(SETUP_CACHE_MOUNT) + r"(?![\w.-])(?:/([^\s'\";|&<>()]*))?")
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*$", re.IGNORECASE)


def parse_size(text: str | int) -> int:
    """Bytes from `20g`, `512M`, `1.5GiB` or a plain integer; ConfigError otherwise."""
    if isinstance(text, int) and not isinstance(text, bool):
        if text < 0:
            raise ConfigError(f"a size cannot be negative: {text}")
        return text
    match = _SIZE.match(str(text))
    if not match:
        raise ConfigError(f"not a size: {text!r} (write e.g. 20g, 512m or a byte count)")
    scale = 1 << (10 * " kmgt".index(match.group(2).lower() or " "))
    return int(float(match.group(1)) * scale)


def state_dir() -> Path:
    """Where the index and lock files live: `$XDG_CACHE_HOME/opd_gym/images`."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "opd_gym" / "images"


@dataclass(frozen=True)
class EnvironmentSpec:
    """What an environment image is made of: a base image, setup steps, the setup cache."""

    setup: tuple[str, ...]
    base: str = DEFAULT_IMAGE
    cache_dir: Path | None = None  # mounted read-only at SETUP_CACHE_MOUNT while steps run

    def __post_init__(self) -> None:
        if not self.setup:
            raise ConfigError("an environment image needs at least one setup step")
        if not all(isinstance(s, str) and s.strip() for s in self.setup):
            raise ConfigError("setup steps must be non-empty shell commands")

    def cache_listing(self) -> list[tuple[str, int]]:
        """(relative path, size) of the setup cache's files the steps use: part of the
        image's name. A step uses the files under each path it names below
        SETUP_CACHE_MOUNT (`/opd-cache/sdists/x-1.0.tar.gz`; `/opd-cache/wheels` or
        `/opd-cache/wheels/*.whl`: that folder), or all of them when it names the mount
        itself; so a new file in the cache rebuilds only the images whose steps use it."""
        if self.cache_dir is None or not self.cache_dir.is_dir():
            return []
        used = self.cache_paths()
        return sorted((rel, p.stat().st_size) for p in self.cache_dir.rglob("*") if p.is_file()
                      for rel in [str(p.relative_to(self.cache_dir))]
                      if "" in used or any(rel == u or rel.startswith(u + "/") for u in used))

    def cache_paths(self) -> set[str]:
        """The paths below SETUP_CACHE_MOUNT the steps name ("" for the whole cache)."""
        found: set[str] = set()
        for step in self.setup:
            for match in _CACHE_PATH.finditer(step):
                path = match.group(1) or ""
                glob = min((i for i in (path.find(c) for c in "*?[") if i >= 0), default=-1)
                if glob >= 0:
                    path = path[:glob].rpartition("/")[0]
                found.add(path.strip("/"))
        return found

    def tag(self, base_id: str) -> str:
        """`opd-gym-env:<hash>` of this spec on the base image whose id is `base_id`."""
        payload = json.dumps({"base": base_id, "setup": list(self.setup),
                              "cache": self.cache_listing()}, sort_keys=True)
        return f"{REPOSITORY}:{hashlib.sha256(payload.encode()).hexdigest()[:20]}"


_FROM = re.compile(r"^\s*FROM\s+(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?\s*$",
                   re.IGNORECASE | re.MULTILINE)


@dataclass(frozen=True)
class DockerfileSpec:
    """An environment image built from a Dockerfile (a Harbor task's `environment/`).

    Built offline like setup steps: no network for its RUN steps and no pull, so every base
    image it names must already be on this machine. Its tag hashes the base images' ids and
    every file of the build context, so a changed file or base rebuilds it, an unchanged one
    is built once per machine.
    """

    context: Path  # the build context: holds `Dockerfile`
    build_timeout: float = 600.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "context", Path(self.context))
        if not (self.context / "Dockerfile").is_file():
            raise ConfigError(f"{self.context}: no Dockerfile in the environment folder")

    @property
    def bases(self) -> tuple[str, ...]:
        """The images the Dockerfile builds FROM (its own stage names left out)."""
        text = (self.context / "Dockerfile").read_text(encoding="utf-8", errors="replace")
        stages: set[str] = set()
        found: list[str] = []
        for match in _FROM.finditer(text):
            image, stage = match.group(1), match.group(2)
            if "$" in image:
                raise ConfigError(f"{self.context / 'Dockerfile'}: FROM {image} names a build "
                                  "argument; opd_gym builds without build arguments: write "
                                  "the image's name")
            if image.lower() not in stages and image != "scratch":
                found.append(image)
            if stage:
                stages.add(stage.lower())
        if not found:
            raise ConfigError(f"{self.context / 'Dockerfile'}: no FROM line names a base image")
        return tuple(dict.fromkeys(found))

    @property
    def base(self) -> str:
        return self.bases[0]

    def tag(self, base_id: str, more_ids: Sequence[str] = ()) -> str:
        """`opd-gym-env:<hash>` of this context on base images with these ids."""
        digest = hashlib.sha256()
        digest.update(json.dumps([base_id, *more_ids]).encode())
        for path in sorted(p for p in self.context.rglob("*") if p.is_file()):
            digest.update(str(path.relative_to(self.context)).encode() + b"\0")
            digest.update(hashlib.sha256(path.read_bytes()).digest())
        return f"{REPOSITORY}:{digest.hexdigest()[:20]}"


@dataclass(frozen=True)
class BuildReport:
    """One `ImageCache.ensure`: the tag, whether it was built now, how long, how big."""

    tag: str
    built: bool
    seconds: float
    size: int


@dataclass
class ImageCache:
    """Builds environment images on demand and keeps them under `budget` bytes."""

    engine: Any  # opd_gym.sandboxes.docker.DockerEngine (given, so tests can share one)
    budget: int = DEFAULT_BUDGET
    directory: Path = field(default_factory=state_dir)
    log: Callable[[str], None] | None = None
    _locks: dict[str, threading.Lock] = field(default_factory=dict, repr=False)
    _guard: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def ensure(self, spec: EnvironmentSpec | DockerfileSpec) -> BuildReport:
        """The image for `spec`, built now unless this machine already has it."""
        started = time.perf_counter()
        if isinstance(spec, DockerfileSpec):
            ids = []
            for base in spec.bases:
                found = self._image_id(base)
                if found is None:
                    how = ("run `opd-gym sandbox build`" if base == DEFAULT_IMAGE else
                           f"environment images build offline: pull it first (`docker pull "
                           f"{base}`)")
                    where = spec.context / "Dockerfile"
                    raise SandboxUnavailable(f"the base image {base!r} of {where} is not on "
                                             f"this machine: {how}")
                ids.append(found)
            tag = spec.tag(ids[0], ids[1:])
        else:
            base_id = self._image_id(spec.base)
            if base_id is None:
                raise SandboxUnavailable(f"the base image {spec.base!r} of an environment is "
                                         "missing: run `opd-gym sandbox build`")
            tag = spec.tag(base_id)
        with self._guard:
            lock = self._locks.setdefault(tag, threading.Lock())
        with lock, self._file_lock(tag):
            built = self._image_id(tag) is None
            if built:
                self._build(spec, tag)
            self._touch(tag)
        if built:
            self.collect(keep=(tag,))
        return BuildReport(tag, built, time.perf_counter() - started, self._size(tag))

    # -- building ---------------------------------------------------------------------------
    def _build_dockerfile(self, spec: DockerfileSpec, tag: str) -> None:
        """`docker build` of the context, offline (no network for RUN, no pull)."""
        import docker
        from docker.errors import BuildError, DockerException

        self._say(f"building {tag} from {spec.context / 'Dockerfile'}")
        try:
            client = docker.from_env(timeout=int(spec.build_timeout) + 30)
            client.images.build(path=str(spec.context), tag=tag, network_mode="none",
                                pull=False, rm=True, forcerm=True,
                                labels={IMAGE_LABEL: "1", BASE_LABEL: spec.base})
        except BuildError as exc:
            log = "".join(str(part.get("stream") or part.get("error") or "")
                          for part in exc.build_log)[-1500:]
            raise ConfigError(f"building {tag} from {spec.context / 'Dockerfile'} failed "
                              f"(offline: no network, no pull): {exc.msg}\n{log}") from None
        except DockerException as exc:
            raise SandboxError(f"could not build the environment image {tag}: {exc}") from None
        self._say(f"built {tag}")

    def _build(self, spec: EnvironmentSpec | DockerfileSpec, tag: str) -> None:
        from docker.errors import DockerException

        if isinstance(spec, DockerfileSpec):
            return self._build_dockerfile(spec, tag)
        volumes = {}
        if spec.cache_dir is not None:
            volumes[str(Path(spec.cache_dir).resolve())] = {"bind": SETUP_CACHE_MOUNT,
                                                            "mode": "ro"}
        self._say(f"building {tag} from {spec.base} ({len(spec.setup)} setup step(s))")
        container = None
        try:
            with self.engine.call() as client:
                # No labels (a commit would keep them) and auto-removed: if this process dies
                # mid-build, the container's sleep ends and Docker removes it.
                container = client.containers.create(
                    spec.base, ["sleep", str(int(STEP_TIMEOUT * len(spec.setup) + 600))],
                    user="0:0", network_mode="none", volumes=volumes, working_dir="/",
                    auto_remove=True)
                container.start()
            for number, step in enumerate(spec.setup, 1):
                self._say(f"  step {number}/{len(spec.setup)}: {step}")
                with self.engine.call():
                    code, output = container.exec_run(["sh", "-c", step], user="0:0",
                                                      workdir="/", demux=False,
                                                      environment=SETUP_ENVIRONMENT)
                if code != 0:
                    tail = (output or b"").decode("utf-8", "replace")[-1500:]
                    raise ConfigError(f"setup step {number} of {len(spec.setup)} failed "
                                      f"(exit {code}) building {tag}: {step}\n{tail}")
            with self.engine.call() as client:
                base = client.images.get(spec.base).attrs.get("Config") or {}
                # The committed image keeps the base's own config (user, command, env) and
                # our labels; mounts are never part of an image.
                conf = {"User": base.get("User") or "", "Cmd": base.get("Cmd"),
                        "Entrypoint": base.get("Entrypoint"), "Env": base.get("Env"),
                        "WorkingDir": base.get("WorkingDir") or "",
                        "Labels": {IMAGE_LABEL: "1", BASE_LABEL: spec.base}}
                repository, _, name = tag.partition(":")
                container.commit(repository=repository, tag=name, conf=conf,
                                 message="opd-gym environment: " + " && ".join(spec.setup))
        except DockerException as exc:
            raise SandboxError(f"could not build the environment image {tag}: {exc}") from None
        finally:
            if container is not None:
                try:
                    with self.engine.call():
                        container.remove(force=True)
                except DockerException:
                    pass  # auto-removed when its sleep ends
        self._say(f"built {tag}")

    # -- the budget ---------------------------------------------------------------------------
    def images(self) -> list[dict[str, Any]]:
        """Every environment image here, least recently used first: tag, id, the disk it
        adds beyond the layers it shares (its base), containers using it, last use (the
        index, else its creation time)."""
        index = self._index()
        out = []
        with self.engine.call() as client:
            found = client.df().get("Images") or []
        for image in found:
            if IMAGE_LABEL not in (image.get("Labels") or {}):
                continue
            tags = [t for t in image.get("RepoTags") or [] if t.startswith(REPOSITORY + ":")]
            if not tags:
                continue
            shared = max(int(image.get("SharedSize") or 0), 0)
            out.append({"tag": tags[0], "id": image["Id"],
                        "size": max(int(image.get("Size") or 0) - shared, 0),
                        "containers": int(image.get("Containers") or 0),
                        "last_used": index.get(tags[0], float(image.get("Created") or 0))})
        return sorted(out, key=lambda i: (i["last_used"], i["tag"]))

    def collect(self, keep: Sequence[str] = ()) -> list[str]:
        """Remove least recently used environment images until the rest fit the budget.

        Images in `keep` and images a container still uses stay (Docker refuses those).
        Returns the removed tags."""
        from docker.errors import APIError

        images = self.images()
        total = sum(i["size"] for i in images)
        removed: list[str] = []
        for image in images:
            if total <= self.budget:
                break
            if image["tag"] in keep or image["containers"] > 0:
                continue
            try:
                with self.engine.call() as client:
                    client.images.remove(image["tag"], noprune=False)
            except APIError:  # in use by a container: it stays
                continue
            total -= image["size"]
            removed.append(image["tag"])
            self._say(f"removed {image['tag']} ({image['size'] >> 20} MiB; budget "
                      f"{self.budget >> 20} MiB)")
        if removed:
            with self._file_lock("index"):
                index = self._index()
                for tag in removed:
                    index.pop(tag, None)
                self._write_index(index)
        return removed

    # -- small helpers ------------------------------------------------------------------------
    def _image_id(self, name: str) -> str | None:
        from docker.errors import DockerException, ImageNotFound

        try:
            with self.engine.call() as client:
                return str(client.images.get(name).id)
        except ImageNotFound:
            return None
        except DockerException as exc:
            raise SandboxError(f"could not inspect the image {name!r}: {exc}") from None

    def _size(self, tag: str) -> int:
        """The disk `tag` adds to its base (the layers the base does not have)."""
        with self.engine.call() as client:
            image = client.images.get(tag)
            base = client.images.get(image.labels.get(BASE_LABEL) or DEFAULT_IMAGE)
            return max(int(image.attrs.get("Size", 0)) - int(base.attrs.get("Size", 0)), 0)

    @contextmanager
    def _file_lock(self, name: str) -> Iterator[None]:
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / (name.replace(":", "_").replace("/", "_") + ".lock")
        with path.open("a") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def _index(self) -> dict[str, float]:
        try:
            data = json.loads((self.directory / "index.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return {k: float(v) for k, v in data.items() if isinstance(v, int | float)}

    def _write_index(self, index: dict[str, float]) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        tmp = self.directory / f"index.json.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(index, sort_keys=True), encoding="utf-8")
        tmp.replace(self.directory / "index.json")

    def _touch(self, tag: str) -> None:
        with self._file_lock("index"):
            index = self._index()
            index[tag] = time.time()
            self._write_index(index)

    def _say(self, line: str) -> None:
        if self.log is not None:
            self.log(line)


__all__ = ["BuildReport", "DockerfileSpec", "EnvironmentSpec", "ImageCache", "parse_size"]
