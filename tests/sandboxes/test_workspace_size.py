"""Workspace size never costs a correct solution its grade (issue 22 point 5).

Real Docker end to end: thousands of files, a 20 MB data file the hidden tests read and a
70-level deep tree all reach the grading sandbox (bulk `write_files`, paged snapshots), and
what cannot be carried is named in `info["grade"]`. The snapshot pages' checks run on
crafted replies: a lying helper cannot be produced for real, so those tests say so.
"""

from __future__ import annotations

import base64
import hashlib
import time

import pytest

from opd_gym.env import CodingEnv
from opd_gym.sandboxes import make_pool
from opd_gym.sandboxes.helper import BadReply, SnapshotAssembly
from opd_gym.tasks import Task
from opd_gym.tools.parsing import format_tool_call

DEEP = "/".join(["lvl"] * 70) + "/deep.txt"
BIG = 20 << 20
BIG_TEXT = "0123456789abcdef" * (BIG // 16)

SIZE_TESTS = f"""\
import hashlib
from pathlib import Path

from calc import add


def test_add():
    assert add(2, 3) == 5


def test_big_data_file():
    data = Path("data/big.txt").read_bytes()
    assert len(data) == {BIG}
    assert hashlib.sha256(data).hexdigest() == {hashlib.sha256(BIG_TEXT.encode()).hexdigest()!r}
"""

DEEP_TESTS = f"""\
from pathlib import Path

from calc import add


def test_add():
    assert add(2, 3) == 5


def test_deep_file():
    assert Path({DEEP!r}).read_text() == "bottom\\n"
"""

MAKE = f"""\
import os
for i in range(2500):
    d = f"junk/d{{i % 50:02d}}"
    os.makedirs(d, exist_ok=True)
    with open(f"{{d}}/f{{i:04d}}.txt", "w") as f:
        f.write("x" * (i % 97))
os.makedirs("data", exist_ok=True)
with open("data/big.txt", "w") as f:
    f.write("0123456789abcdef" * {BIG // 16})
"""

SOLUTION = "def add(a, b):\n    return a + b\n"


def call(name: str, **arguments) -> str:
    return format_tool_call(name, arguments)


def size_task() -> Task:
    return Task(
        id="workspace_size", prompt="Implement add(a, b) in calc.py; keep the data files.",
        files={"calc.py": "def add(a, b):\n    raise NotImplementedError\n"},
        tests={"test_size.py": SIZE_TESTS},
        solution={"calc.py": SOLUTION, "data/big.txt": BIG_TEXT}, timeout=120.0,
    )


def deep_task() -> Task:
    return Task(
        id="deep_tree", prompt="Implement add(a, b) in calc.py; keep the deep file.",
        files={"calc.py": "def add(a, b):\n    raise NotImplementedError\n"},
        tests={"test_deep.py": DEEP_TESTS},
        solution={"calc.py": SOLUTION, DEEP: "bottom\n"},
    )


@pytest.fixture(scope="module")
def docker_pool():
    pool = make_pool("docker", size=2)
    yield pool
    pool.close()


@pytest.mark.docker
def test_bulk_write_files_puts_thousands_of_files_and_a_large_one(docker_pool):
    box = docker_pool.acquire()
    try:
        files = {f"junk/d{i % 50}/f{i}.txt": f"{i}\n" for i in range(2500)}
        files["data/big.bin"] = b"\x07" * BIG
        files[DEEP] = "bottom\n"
        started = time.monotonic()
        box.write_files(files)
        elapsed = time.monotonic() - started
        assert box.run("find junk -type f | wc -l").output.strip() == "2500"
        assert box.run("stat -c '%s %u' data/big.bin").output.split() == [str(BIG), "1000"]
        assert box.read_file(DEEP) == b"bottom\n"
        snap = box.snapshot()
        assert len(snap) == 2502 and snap.skipped_count == 0
        assert snap["data/big.bin"] == b"\x07" * BIG and snap["junk/d7/f7.txt"] == b"7\n"
        print(f"write_files: 2502 files, 20 MiB in {elapsed:.2f} s")
    finally:
        docker_pool.release(box)


@pytest.mark.docker
def test_a_correct_solution_beside_2500_files_a_large_file_and_a_deep_tree_scores_1(
        docker_pool):
    env = CodingEnv(tasks=[size_task()], sandbox=docker_pool, max_turns=5)
    try:
        env.reset(seed=0)
        env.step(call("write_file", path="calc.py", content=SOLUTION))
        env.step(call("write_file", path="make_data.py", content=MAKE))
        made = env.step(call("terminal", command="python3 make_data.py && find . -type f | "
                             "wc -l", timeout=120))
        assert made[0].strip().splitlines()[0] == "2503", made[0]
        *_, terminated, _, info = env.step(call("submit"))
        assert terminated
        grade = info["grade"]
        assert grade["score"] == 1.0 and grade["passed"] == grade["total"] == 2, grade
        assert "not_carried" not in grade and not grade["dropped"]
        assert info["reward_breakdown"]["correctness"] == 1.0
    finally:
        env.close()


@pytest.mark.docker
def test_a_70_level_deep_tree_is_carried_to_the_tests(docker_pool):
    env = CodingEnv(tasks=[deep_task()], sandbox=docker_pool, max_turns=5)
    try:
        env.reset(seed=0)
        env.step(call("write_file", path="calc.py", content=SOLUTION))
        env.step(call("write_file", path=DEEP, content="bottom\n"))
        *_, info = env.step(call("submit"))
        grade = info["grade"]
        assert grade["score"] == 1.0 and grade["passed"] == grade["total"] == 2, grade
        assert "not_carried" not in grade
    finally:
        env.close()


@pytest.mark.docker
def test_what_cannot_be_carried_is_named_in_the_grade(docker_pool):
    """A FIFO, an unreadable file and a tree deeper than the snapshot descends: the solution
    is still graded, and info["grade"] names each path left out and why."""
    env = CodingEnv(tasks=[size_task()], sandbox=docker_pool, max_turns=5)
    try:
        env.reset(seed=0)
        env.step(call("write_file", path="calc.py", content=SOLUTION))
        env.step(call("terminal", command="mkfifo pipe && echo s > locked && chmod 000 locked "
                      "&& mkdir -p $(printf 'z/%.0s' $(seq 300))"))
        obs, _, terminated, _, info = env.step(call("submit"))
        grade = info["grade"]
        notes = grade["not_carried"]
        assert grade["not_carried_count"] == 3
        assert any(n.startswith("pipe: not a regular file") for n in notes)
        assert any(n.startswith("locked: not readable") for n in notes)
        assert any(n.endswith("deeper than 256 levels") for n in notes)
        assert "not carried to grading" in obs
        assert grade["passed"] >= 1 and grade["score"] < 1.0  # the data tests fail, visibly
    finally:
        env.close()


# -- the host's checks on snapshot pages (crafted replies: an honest helper never lies) ---
def page(chunks, following=None, skipped=(), count=0):
    return {"chunks": [[p, o, s, base64.b64encode(d).decode()] for p, o, s, d in chunks],
            "next": following, "skipped": list(skipped), "skipped_count": count}


def test_pages_join_a_file_split_across_them():
    asm = SnapshotAssembly(100, 10, 100, 1 << 16)
    assert asm.add(page([("a", 0, 3, b"abc"), ("b", 0, 6, b"12")], [1, "b", 2])) == (1, "b", 2)
    assert asm.add(page([("b", 2, 6, b"3456"), ("c", 0, 0, b"")])) is None
    snap = asm.snapshot()
    assert dict(snap) == {"a": b"abc", "b": b"123456", "c": b""} and snap.skipped_count == 0


def test_a_file_sent_short_is_dropped_with_a_note():
    asm = SnapshotAssembly(100, 10, 100, 1 << 16)
    asm.add(page([("a", 0, 5, b""), ("b", 0, 1, b"x")], skipped=["s: symlink"], count=1))
    snap = asm.snapshot()
    assert dict(snap) == {"b": b"x"} and snap.skipped_count == 2
    assert snap.skipped == ["s: symlink", "a: not readable or changed while the snapshot "
                            "was taken"]


@pytest.mark.parametrize("pages,why", [
    ([page([("../x", 0, 1, b"x")])], "plain relative path"),
    ([page([("/etc/x", 0, 1, b"x")])], "plain relative path"),
    ([page([("a", 0, 2, b"x")], [1, "a", 1]), page([("a", 0, 2, b"y")])], "continue"),
    ([page([("b", 0, 1, b"x"), ("a", 0, 1, b"x")])], "out of order"),
    ([page([("a", 0, 1, b"xx")])], "longer than its size"),
    ([page([(f"f{i:02d}", 0, 1, b"x") for i in range(11)])], "more files"),
    ([page([("a", 0, 60, b"x" * 60), ("b", 0, 60, b"y" * 60)])], "more bytes"),
    ([page([("a", 0, 101, b"x")])], "out of range"),
    ([page([("a", 0, 5, b"x")], [0, "a", 1]), page([("a", 1, 5, b"")], [0, "a", 1])],
     "does not advance"),
    ([page([], [0, "a"])], "malformed"),
    ([page([], skipped=["x"] * 101, count=101)], "too many skipped"),
])
def test_lying_pages_are_refused(pages, why):
    asm = SnapshotAssembly(100, 10, 100, 1 << 16)
    with pytest.raises(BadReply, match=why):
        for reply in pages:
            asm.add(reply)


def test_a_page_over_its_budget_is_refused():
    asm = SnapshotAssembly(1 << 20, 10, 1 << 20, 1 << 16)
    with pytest.raises(BadReply, match="limit|not data"):
        asm.add(page([("a", 0, 70000, b"x" * 70000)]))


# -- every backend ---------------------------------------------------------------------------
def test_write_files_on_every_backend(sandbox):
    big = b"\x00\x01" * (6 << 20)  # 12 MiB: over write_file's 10 MiB cap, within the workspace
    sandbox.write_files({"pkg/a.py": "A = 1\n", "pkg/sub/b.txt": b"b\n", "big.bin": big})
    assert sandbox.read_file("pkg/a.py") == b"A = 1\n"
    assert sandbox.read_file("pkg/sub/b.txt") == b"b\n"
    assert sandbox.run("stat -c %s big.bin").output.strip() == str(len(big))
    snap = sandbox.snapshot()
    assert snap["big.bin"] == big and snap.skipped_count == 0
    # the same workspace in 64 KiB pages: the big file crosses in ~200 pieces, identically
    assert dict(sandbox.snapshot(page_bytes=1 << 16)) == dict(snap)


@pytest.mark.parametrize("bad", ["../escape.txt", "/etc/x", "a//b", "a/./b", ""])
def test_write_files_refuses_a_bad_path_before_writing_anything(sandbox, bad):
    from opd_gym.sandboxes import PathRefused

    with pytest.raises(PathRefused):
        sandbox.write_files({"first.txt": "x", bad: "y"})
    assert "first.txt" not in sandbox.snapshot()


def test_a_snapshot_over_its_byte_budget_keeps_the_small_files_and_names_the_rest(sandbox):
    sandbox.write_files({"solution.py": "def f():\n    return 1\n", "data/huge.bin": b"x" * 3000,
                         **{f"many/{i}.txt": "y" for i in range(50)}})
    snap = sandbox.snapshot(max_bytes=3050, page_bytes=1 << 16)
    assert snap["solution.py"].startswith(b"def f") and len(snap) == 51
    assert snap.skipped_count == 1
    assert snap.skipped[0].startswith("data/huge.bin: over the snapshot limit")
