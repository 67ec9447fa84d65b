"""The change an agent made to a repository task's workspace, as a git diff.

At the end of an episode of a repository task (after the workspace snapshot, before the
sandbox goes back) `collect_diff` runs git in the episode's sandbox, as the agent, the way the
agent's own commands run, and returns `git diff --binary BASE` of the working tree against the
base commit placed at reset, new files included (ignored ones and build outputs excepted:
`.pyc`, `__pycache__/`, `*.egg-info`, `.pytest_cache/`): commits, branches or resets the agent
made do not hide a change. The result is exact or refused: `text` is the
diff ("" when the workspace equals the base commit) or None with the `reason` it is unknown
(the sandbox stopped, `.git` or the base commit is gone, a path cannot be read, git failed).
`DIFF_CAP` bounds it; a longer diff is cut at a line end and marked `truncated`.

Nothing the agent wrote steers the git that makes the diff: it runs under `env -i` (none of
the agent's exported variables, a fresh empty HOME, no system or global config) with a fresh
`GIT_DIR` of its own in /tmp, so the workspace's `.git/config` (pager, external diff,
textconv, filters, fsmonitor, hooks), `.git/info` and the agent's ~/.gitconfig are never
read; the workspace's objects are read through `GIT_ALTERNATE_OBJECT_DIRECTORIES`, and no
object is written (`git add -N` only records the new paths). `--no-ext-diff`,
`--no-textconv`, `--no-pager`, `core.pager=cat`, `core.fsmonitor=false` and
`--ignore-submodules=dirty` (a nested repository's status would run its own git, under its
own config) hold even if something slipped through. What remains: `sandbox.run` starts the
command in the agent's shell, which restores the agent's saved shell state first; whatever
runs there runs as the agent, with no more rights than the agent's own commands, and could at
most make the record wrong, never the grade (grading reads the snapshot).
"""

from __future__ import annotations

import secrets
import shlex
from dataclasses import dataclass
from typing import Any

from opd_gym.records.task import Task
from opd_gym.sandboxes import Sandbox, SandboxError
from opd_gym.tasks.repo import BRANCH, GitError, workspace_files

DIFF_CAP = 200_000  # bytes of diff kept per episode
DIFF_TIMEOUT = 60.0  # seconds git may take in the sandbox
STATUS = "opd-diff: "  # the script's status line: "ok BYTES" or "error REASON"
# The only environment the diff's shell and git see (`env -i` drops everything else).
CLEAN_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "LC_ALL": "C",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_ATTR_NOSYSTEM": "1",
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_OPTIONAL_LOCKS": "0",
}
# sh -c SCRIPT opd-diff WORKSPACE BASE OUT CAP: the diff (at most CAP + 1 bytes) into
# WORKSPACE/OUT, then one status line. The temporary repository, index and HOME live in a
# fresh /tmp directory removed on exit.
SCRIPT = r"""
set -u
ws=$1 base=$2 out=$3 cap=$4
# the paths diffed: everything but build outputs (EXCLUDED), as git pathspecs in "$@"
set -- . @EXCLUDED@
say() { printf 'opd-diff: %s\n' "$*"; }
t=$(mktemp -d /tmp/opd-diff.XXXXXX 2>/dev/null) ||
  { say "error no temporary directory in /tmp"; exit 0; }
trap 'rm -rf "$t"' EXIT
fail() { say "error $1: $(tail -c 600 "$t/err" 2>/dev/null | tr '\n' ' ')"; exit 0; }
mkdir "$t/home" 2>"$t/err" || fail "no temporary directory in /tmp"
export HOME="$t/home"
g() {
  git -c core.pager=cat -c core.fsmonitor=false -c core.hooksPath=/dev/null \
    -c core.fileMode=false -c core.attributesFile=/dev/null -c core.excludesFile=/dev/null \
    -c gc.auto=0 --no-pager "$@"
}
cd "$ws" 2>"$t/err" || fail "the workspace cannot be entered"
[ -d "$ws/.git/objects" ] || { : >"$t/err"; fail "the workspace has no .git/objects"; }
git init -q --bare "$t/repo" 2>"$t/err" || fail "git init failed"
export GIT_DIR="$t/repo" GIT_WORK_TREE="$ws" GIT_INDEX_FILE="$t/index" \
  GIT_ALTERNATE_OBJECT_DIRECTORIES="$ws/.git/objects"
g read-tree "$base" 2>"$t/err" || fail "the base commit cannot be read"
g add --intent-to-add -- "$@" 2>"$t/err" || fail "git add failed"
if grep -q -e 'could not open directory' -e 'Permission denied' -e 'unable to access' "$t/err"
then fail "a path cannot be read"
fi
{ g diff --binary --no-ext-diff --no-textconv --no-color --ignore-submodules=dirty "$base" \
    -- "$@" 2>"$t/err"; echo $? >"$t/rc"; } | head -c $((cap + 1)) >"$t/diff"
n=$(($(wc -c <"$t/diff")))
rc=$(cat "$t/rc" 2>/dev/null || echo none)
# a diff over the cap stops git early (SIGPIPE): its status then says nothing
if [ "$n" -le "$cap" ] && [ "$rc" != 0 ]; then fail "git diff failed (exit $rc)"; fi
(set -C; cat "$t/diff" >"$ws/$out") 2>"$t/err" || fail "the diff cannot be written"
say "ok $n"
"""
# Build outputs never enter the diff (running the tests writes them, the agent did not):
# git's own pathspec exclusions, so tracked and new files alike are left out.
EXCLUDED = ("*.pyc", "*.pyo", "__pycache__/**", "*.egg-info/**", "*.egg-info",
            ".pytest_cache/**")
SCRIPT = SCRIPT.replace("@EXCLUDED@", " ".join(
    shlex.quote(f":(exclude,glob)**/{pattern}") for pattern in EXCLUDED))


@dataclass(frozen=True)
class WorkspaceDiff:
    """The agent's change: `text` is the diff ("" for none), None when unknown (`reason`).

    `truncated`: the diff was longer than the cap and `text` is its head, cut at a line end;
    `lossy`: bytes that are not UTF-8 (in changed files) are shown as U+FFFD.
    """

    text: str | None
    reason: str | None = None
    truncated: bool = False
    lossy: bool = False

    @classmethod
    def unknown(cls, reason: str) -> WorkspaceDiff:
        return cls(None, reason=reason or "unknown")

    @classmethod
    def from_bytes(cls, data: bytes, cap: int = DIFF_CAP) -> WorkspaceDiff:
        """The diff from the bytes git wrote (at most `cap` + 1: more means truncated)."""
        truncated = len(data) > cap
        if truncated:
            data = data[:cap]
            cut = data.rfind(b"\n")
            data = data[:cut + 1] if cut >= 0 else data
        try:
            return cls(data.decode("utf-8"), truncated=truncated)
        except UnicodeDecodeError:
            return cls(data.decode("utf-8", "replace"), truncated=truncated, lossy=True)

    def to_dict(self) -> dict[str, Any]:
        return {"text": self.text, "reason": self.reason, "truncated": self.truncated,
                "lossy": self.lossy}


def base_commit(task: Task) -> str:
    """The commit id the workspace of repository task `task` starts at (its branch head)."""
    files = workspace_files(task)
    ref = f"refs/heads/{BRANCH}"
    loose = files.get(f".git/{ref}")
    if loose is not None:
        sha = loose.decode("ascii", "replace").strip()
    else:
        packed = files.get(".git/packed-refs", b"").decode("ascii", "replace").splitlines()
        found = [line.split()[0] for line in packed if line.endswith(f" {ref}")]
        sha = found[0] if found else ""
    if len(sha) not in (40, 64) or any(c not in "0123456789abcdef" for c in sha):
        raise GitError(f"task {task.id!r}: its workspace names no base commit ({ref})")
    return sha


def diff_command(workspace: str, base: str, out: str, cap: int = DIFF_CAP) -> str:
    """The shell command that writes the diff into `workspace/out` (see the module doc)."""
    env = " ".join(shlex.quote(f"{key}={value}") for key, value in CLEAN_ENV.items())
    args = " ".join(shlex.quote(arg) for arg in (workspace, base, out, str(cap)))
    return f"exec /usr/bin/env -i {env} /bin/sh -c {shlex.quote(SCRIPT)} opd-diff {args}"


def collect_diff(sandbox: Sandbox, base: str, *, cap: int = DIFF_CAP,
                 timeout: float = DIFF_TIMEOUT) -> WorkspaceDiff:
    """The diff of the sandbox's workspace against commit `base`; never raises.

    Run it after the snapshot (the agent's processes are gone then): the diff crosses in a
    file of the workspace (a random dot-file name, removed once read).
    """
    out = f".opd-diff-{secrets.token_hex(8)}"
    try:
        result = sandbox.run(diff_command(sandbox.workspace, base, out, cap), timeout=timeout)
        if result.timed_out:
            return WorkspaceDiff.unknown(f"git diff did not finish within {timeout:g} s")
        lines = [line for line in result.output.splitlines() if line.startswith(STATUS)]
        if not lines:
            tail = " ".join(result.output.split())[-300:]
            return WorkspaceDiff.unknown(f"the diff command failed (exit {result.exit_code})"
                                         + (f": {tail}" if tail else ""))
        status = lines[-1][len(STATUS):].strip()
        if not status.startswith("ok "):
            return WorkspaceDiff.unknown(status.removeprefix("error ").strip()[:800])
        size = int(status[3:])
        data = sandbox.read_file(out, max_bytes=cap + 1) if size else b""
        sandbox.run(f"rm -f -- {shlex.quote(out)}", timeout=10.0)
    except (SandboxError, ValueError) as exc:
        return WorkspaceDiff.unknown(f"the diff could not be taken: {exc}"[:800])
    if len(data) != size:
        return WorkspaceDiff.unknown(f"the diff file holds {len(data)} bytes, not {size}")
    return WorkspaceDiff.from_bytes(data, cap)


__all__ = [
    "DIFF_CAP",
    "DIFF_TIMEOUT",
    "EXCLUDED",
    "WorkspaceDiff",
    "base_commit",
    "collect_diff",
    "diff_command",
]
