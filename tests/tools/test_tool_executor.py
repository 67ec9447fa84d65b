"""Tool execution against a real (local) sandbox: outputs, limits and clear error results."""

from __future__ import annotations

import pytest

from opd_gym.sandboxes import RunResult
from opd_gym.tools import ToolCall, ToolExecutor, describe_run

pytestmark = pytest.mark.filterwarnings("ignore:opd_gym local sandbox")


@pytest.fixture
def run(local_sandbox):
    executor = ToolExecutor(local_sandbox, default_timeout=10, max_timeout=20)

    def run(name, **arguments):
        return executor.run(ToolCall("c1", name, arguments))

    return run


def test_terminal_output_exit_code_and_persistent_state(run):
    result = run("terminal", command="mkdir -p d && cd d && export X=7 && echo hi; exit 3")
    assert result.ok and result.exit_code == 3
    assert result.content == "hi\n[exit code: 3]"
    again = run("terminal", command="pwd | xargs basename; echo $X")
    assert again.content == "d\n7\n[exit code: 0]"
    assert run("terminal", command="true").content == "(no output)\n[exit code: 0]"


def test_terminal_timeout_is_reported_and_capped(run):
    result = run("terminal", command="sleep 30", timeout=0.5)
    assert result.timed_out and not result.ok and result.error == "timeout"
    assert "timed out after" in result.content and "killed" in result.content
    bad = run("terminal", command="ls", timeout=-1)
    assert bad.error == "invalid_call" and "positive" in bad.content


def test_sigkill_is_explained_as_the_memory_limit():
    text = describe_run(RunResult(exit_code=137, output="partial\n"))
    assert text.startswith("partial\n[exit code: 137: killed by SIGKILL")
    assert "memory limit" in text


def test_write_read_ranges(run):
    body = "".join(f"line {i}\n" for i in range(1, 11))
    wrote = run("write_file", path="pkg/notes.txt", content=body)
    assert wrote.content == "Wrote 71 bytes to pkg/notes.txt."
    assert run("read_file", path="pkg/notes.txt").content == body
    part = run("read_file", path="pkg/notes.txt", offset=3, limit=2)
    assert part.truncated
    more = "[lines 3-4 of 10; call read_file with offset=5 to continue]"
    assert part.content == f"line 3\nline 4\n{more}"
    tail = run("read_file", path="pkg/notes.txt", offset=9)
    assert tail.content == "line 9\nline 10\n[lines 9-10 of 10]"
    assert "past the end" in run("read_file", path="pkg/notes.txt", offset=11).content
    assert "at least 1" in run("read_file", path="pkg/notes.txt", offset=0).content
    run("write_file", path="empty.txt", content="")
    assert run("read_file", path="empty.txt").content == "(empty.txt is empty)"


def test_read_file_errors(run, local_sandbox):
    missing = run("read_file", path="nope.py")
    assert not missing.ok and missing.error == "not_found" and missing.content.startswith("Error: ")
    outside = run("read_file", path="../../etc/passwd")
    assert outside.error == "path" and "outside the workspace" in outside.content
    local_sandbox.write_file("blob.bin", b"\x00\x01\x02")
    assert run("read_file", path="blob.bin").error == "binary"
    local_sandbox.run("mkdir -p adir")
    assert not run("read_file", path="adir").ok


def test_edit_file_requires_exactly_one_match(run):
    run("write_file", path="m.py", content="a = 1\nb = 1\nc = 2\n")
    none = run("edit_file", path="m.py", old_text="z = 9", new_text="")
    assert none.error == "no_match" and "(0 matches)" in none.content
    many = run("edit_file", path="m.py", old_text="= 1", new_text="= 5")
    assert many.error == "multiple_matches" and "matches 2 times" in many.content
    ok = run("edit_file", path="m.py", old_text="c = 2", new_text="c = 3")
    assert ok.ok and "line 3" in ok.content
    assert run("read_file", path="m.py").content == "a = 1\nb = 1\nc = 3\n"
    assert "empty" in run("edit_file", path="m.py", old_text="", new_text="x").content
    assert run("edit_file", path="gone.py", old_text="a", new_text="b").error == "not_found"


def test_invalid_call_is_answered_not_run(run, local_sandbox):
    executor = ToolExecutor(local_sandbox)
    error = "Missing required argument 'command'"
    result = executor.run(ToolCall("c9", "terminal", {}, error=error))
    assert (result.ok, result.error, result.call_id) == (False, "invalid_call", "c9")
    assert result.content == "Error: Missing required argument 'command'"
