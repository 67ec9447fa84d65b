"""Behaviour every backend shares: persistent shell, timeouts, output caps, confinement."""

from __future__ import annotations

import resource
import threading
import time

import pytest

from opd_gym.sandboxes import (
    FileTooLarge,
    PathRefused,
    Sandbox,
    SandboxError,
    SandboxFileNotFound,
)


def test_implements_protocol(sandbox):
    assert isinstance(sandbox, Sandbox)
    assert sandbox.alive


def test_shell_state_persists_between_runs(sandbox):
    sandbox.run("mkdir -p sub/dir && cd sub/dir && export ANSWER=42 && LOCAL_ONLY=1")
    result = sandbox.run('echo "$ANSWER:$LOCAL_ONLY:$(pwd)"')
    assert result.output.strip() == f"42::{sandbox.workspace}/sub/dir"
    sandbox.run("echo data > file.txt")
    assert sandbox.read_file("sub/dir/file.txt") == b"data\n"


def test_exit_codes_and_stderr_are_reported(sandbox):
    result = sandbox.run("echo out; echo err >&2; exit 3")
    assert result.exit_code == 3
    assert "out" in result.output and "err" in result.output
    assert not result.ok
    assert sandbox.run("true").ok


def test_syntax_errors_and_exit_do_not_break_the_shell(sandbox):
    assert sandbox.run("echo 'unbalanced").exit_code != 0
    assert sandbox.run("exit 0").exit_code == 0
    assert sandbox.run("cd /nonexistent-dir").exit_code != 0
    assert sandbox.run("echo fine").output == "fine\n"


def test_timeout_kills_whole_process_group_and_shell_survives(sandbox):
    started = time.monotonic()
    result = sandbox.run("sleep 1001 & sleep 1001; echo never", timeout=1)
    assert result.timed_out
    assert not result.ok
    assert time.monotonic() - started < 10
    assert "never" not in result.output
    # Both sleeps were in the command's process group: none may survive.
    survivors = sandbox.run("ps -eo args= | grep -c '^sleep 1001$' || true").output
    assert survivors.strip() in {"0", ""}
    follow = sandbox.run("echo usable")
    assert follow.output == "usable\n" and not follow.timed_out


def test_output_is_capped_head_and_tail_with_marker(sandbox):
    result = sandbox.run("seq 1 200000")
    assert result.truncated
    assert result.output.startswith("1\n2\n3\n")
    assert result.output.rstrip().endswith("200000")
    assert "bytes elided" in result.output
    assert len(result.output) < 16384 + 200
    full_size = len("".join(f"{i}\n" for i in range(1, 200001)))
    assert result.output_bytes == full_size


def test_huge_output_keeps_host_memory_bounded(sandbox):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    result = sandbox.run("yes | head -c 1000000000", timeout=120)
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert result.output_bytes == 1_000_000_000
    assert result.truncated and len(result.output) < 20000
    assert after - before < 100_000  # KiB: the host never held the gigabyte


def test_binary_and_invalid_utf8_output_never_raise(sandbox):
    result = sandbox.run(r"printf 'ok\xff\xfe\x00\x80end'; head -c 3000 /dev/urandom")
    assert result.exit_code == 0
    assert result.output.startswith("ok")
    assert "\ufffd" in result.output


def test_file_roundtrip_and_listing(sandbox):
    sandbox.write_file("pkg/mod.py", "x = 'é'\n")
    sandbox.write_file("run.sh", "#!/bin/sh\necho ran\n", mode=0o755)
    assert sandbox.read_file("pkg/mod.py").decode() == "x = 'é'\n"
    assert sandbox.run("./run.sh").output == "ran\n"
    names = {(e.name, e.type) for e in sandbox.list_dir(".")}
    assert {("pkg", "dir"), ("run.sh", "file")} <= names
    absolute = f"{sandbox.workspace}/pkg/mod.py"
    assert sandbox.read_file(absolute) == sandbox.read_file("pkg/mod.py")
    assert set(sandbox.snapshot()) >= {"pkg/mod.py", "run.sh"}


def test_snapshot_of_names_whose_path_order_differs_from_their_parts_order(sandbox):
    """A folder `pkg` beside `pkg.egg-info` (any sibling starting `pkg` plus a character below
    '/'): sorted by path text, `pkg.egg-info/...` comes first; sorted by components, `pkg/...`
    does. The helper and the host must agree on one order (every sdist-made project has such
    a pair; the helper once sent components order and the host refused the snapshot)."""
    files = {"pkg/__init__.py": "a\n", "pkg.egg-info/PKG-INFO": "b\n", "pkg-1/x": "c\n",
             "pkg.txt": "d\n", "pkg/sub/z.py": "e\n", "pkg!/y": "f\n"}
    sandbox.write_files({p: t.encode() for p, t in files.items()})
    snap = sandbox.snapshot()
    assert {p: snap[p].decode() for p in files} == files
    paged = sandbox.snapshot(max_files=3)  # the smallest first, then still in one order
    assert len(paged) == 3 and set(paged) <= set(files)


def test_a_failing_file_in_a_batch_raises_and_the_channel_stays_in_step(sandbox):
    """write_files sends many writes before reading replies: one that fails (its parent is a
    file) raises its own error, and every later request still gets its own reply."""
    sandbox.write_file("blocker", "x")
    files = {f"ok{i}.txt": f"{i}\n".encode() for i in range(40)}
    files["blocker/inside.txt"] = b"no"
    files.update({f"late{i}.txt": b"late\n" for i in range(5)})
    with pytest.raises(SandboxError):
        sandbox.write_files(files)
    assert sandbox.run("echo still in step").output == "still in step\n"
    assert sandbox.read_file("ok39.txt") == b"39\n"
    sandbox.write_files({"after.txt": b"fine"})
    assert sandbox.read_file("after.txt") == b"fine"


@pytest.mark.parametrize("path", ["/etc/passwd", "../../etc/passwd", "a/../../outside.txt"])
def test_paths_outside_workspace_are_refused(sandbox, path):
    with pytest.raises(PathRefused, match="outside the workspace"):
        sandbox.write_file(path, "x")
    with pytest.raises(PathRefused):
        sandbox.read_file(path)


def test_symlink_escape_is_refused(sandbox):
    sandbox.run("ln -s /etc escape && ln -s /etc/hostname host")
    with pytest.raises(PathRefused):
        sandbox.read_file("escape/hostname")
    with pytest.raises(PathRefused):
        sandbox.write_file("host", "overwrite")
    assert "escape" not in sandbox.snapshot()


def test_file_size_caps_and_missing_files(make_sandbox):
    sb = make_sandbox(file_cap=1000)
    with pytest.raises(FileTooLarge, match="1000"):
        sb.write_file("big.txt", "x" * 1001)
    sb.run("head -c 5000 /dev/zero > big.bin")
    with pytest.raises(FileTooLarge, match="5000 bytes"):
        sb.read_file("big.bin")
    with pytest.raises(SandboxFileNotFound):
        sb.read_file("nope.txt")
    sb.write_file("small.txt", "ok")  # the sandbox is still fine
    assert sb.read_file("small.txt") == b"ok"


def test_close_is_idempotent_and_final(make_sandbox):
    sb = make_sandbox()
    with sb:
        sb.run("true")
    sb.close()
    sb.close()
    assert not sb.alive
    with pytest.raises(SandboxError):
        sb.run("true")


def test_background_processes_are_gone_after_close(make_sandbox, backend):
    sb = make_sandbox()
    sb.run("nohup sleep 1000 >/dev/null 2>&1 & echo $! > pid")
    marker = sb.run("cat pid").output.strip()
    assert marker.isdigit()
    assert sb.run(f"kill -0 {marker} && echo running").output.strip() == "running"
    sb.close()
    if backend == "local":
        import os

        time.sleep(0.2)
        with pytest.raises(ProcessLookupError):
            os.kill(int(marker), 0)
    # docker and bwrap: the pid namespace (container / bwrap init) is gone with the sandbox.


def test_close_from_another_thread_mid_command(make_sandbox):
    sb = make_sandbox()
    errors: list[BaseException] = []

    def long_command() -> None:
        try:
            sb.run("sleep 30", timeout=60)
        except SandboxError as exc:
            errors.append(exc)

    worker = threading.Thread(target=long_command)
    worker.start()
    time.sleep(0.5)
    started = time.monotonic()
    sb.close()
    worker.join(timeout=30)
    assert not worker.is_alive(), "a command blocked on a closed sandbox must end"
    assert time.monotonic() - started < 30
    assert errors and isinstance(errors[0], SandboxError)


def test_zombies_are_reaped(sandbox, backend):
    if backend == "local":
        pytest.skip("the local backend has no pid namespace: /proc shows the whole host")
    # The parent forks children that exit, then execs into a process that never waits.
    sandbox.run(
        'python3 -c "import os,time\n'
        "for _ in range(5):\n"
        "    os.fork() == 0 and os._exit(0)\n"
        "os.execvp('sleep', ['sleep', '0.5'])\" ; sleep 0.6"
    )
    states = sandbox.run("cat /proc/[0-9]*/stat 2>/dev/null | awk '{print $3}' | sort | uniq -c")
    assert " Z" not in states.output


def test_shell_survives_the_agent_killing_it(sandbox):
    sandbox.run("export KEEP=1; mkdir -p sub && cd sub")
    # The command's parent process is the sandbox's long-lived shell: kill it.
    sandbox.run("kill -9 $(cut -d' ' -f4 /proc/$BASHPID/stat); sleep 0.2")
    after = sandbox.run('echo "$KEEP $(basename "$(pwd)")"')
    assert after.output.strip() == "1 sub" and after.exit_code == 0


def test_every_helper_error_kind_has_a_class():
    """Each `Refused(kind, ...)` in agentd.py maps to an error class of ours on the host."""
    import re

    from opd_gym.resources import data_path
    from opd_gym.sandboxes.helper import ERRORS

    kinds = set(re.findall(r'Refused\("(\w+)"', data_path("sandbox", "agentd.py").read_text()))
    assert kinds and kinds <= set(ERRORS), kinds - set(ERRORS)


def test_reading_a_directory_is_a_typed_error(sandbox):
    from opd_gym.sandboxes import NotARegularFile

    sandbox.run("mkdir -p adir")
    with pytest.raises(NotARegularFile):
        sandbox.read_file("adir")
