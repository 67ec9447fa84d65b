"""Adversarial workloads against the sandbox and the env: each ends in a clean, bounded outcome.

Killing (setsid escapees, detached writers at submit), file tools on FIFOs and symlink
races, hostile actions (deep JSON, lone surrogates, huge integers), hostile workspaces at
submit (unreadable files, deep trees, tens of thousands of long paths, an 11 MB scratch
file beside a correct solution) and the per-step time budget. Everything runs for real.
"""

from __future__ import annotations

import json
import os
import resource
import shlex
import shutil
import time
import uuid
import warnings

import pytest

from opd_gym import CodingEnv
from opd_gym.sandboxes import SandboxError, make_pool, sandbox_factory
from opd_gym.tools import format_tool_call

BACKENDS = [pytest.param("docker", marks=pytest.mark.docker), "bwrap", "local"]
pytestmark = pytest.mark.filterwarnings("ignore:opd_gym local sandbox")


def open_sandbox(backend: str, **options):
    """A started sandbox of `backend` (the local backend's isolation warning silenced)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        sandbox = sandbox_factory({"backend": backend, **options})()
        sandbox.start()
    return sandbox


@pytest.fixture(params=BACKENDS)
def box(request):
    sb = open_sandbox(request.param)
    sb.backend = request.param
    yield sb
    sb.close()


def count(box, tag: str) -> int:
    """Live processes whose name (argv[0]) starts with "esc" and ends with `tag`."""
    out = box.run(f"ps -eo args= | grep -c '^esc[0-9]{tag} ' || true").output
    return int(out.split()[0])


def test_timeout_kills_setsid_escapees(box):
    tag = uuid.uuid4().hex[:8]
    box.write_file("sleeper.sh", '#!/bin/bash\nexec -a "$1" sleep 1000\n', mode=0o755)
    escape = (
        f"setsid ./sleeper.sh esc1{tag} & setsid -f ./sleeper.sh esc2{tag}; "
        f"(setsid bash -c './sleeper.sh esc3{tag} & ./sleeper.sh esc4{tag}' &); "
        "python3 -c 'import os\nif os.fork() == 0:\n    os.setsid()\n"
        "    if os.fork() == 0:\n"
        f"        os.execv(\"./sleeper.sh\", [\"./sleeper.sh\", \"esc5{tag}\"])\n"
        "    os._exit(0)'; "
        f"./sleeper.sh esc6{tag}"
    )
    started = time.monotonic()
    result = box.run(escape, timeout=3)
    assert result.timed_out and time.monotonic() - started < 15
    assert count(box, tag) == 0
    assert box.run("echo usable").output == "usable\n"


def test_escapees_are_really_started(box):
    """The control for the test above: without a timeout the escapees do run."""
    tag = uuid.uuid4().hex[:8]
    box.write_file("sleeper.sh", '#!/bin/bash\nexec -a "$1" sleep 1000\n', mode=0o755)
    box.run(f"setsid -f ./sleeper.sh esc1{tag} >/dev/null 2>&1 </dev/null; sleep 0.3")
    assert count(box, tag) == 1
    box.snapshot()  # the submit-time rule: every agent process is killed first
    assert count(box, tag) == 0


def test_detached_writer_is_stopped_before_the_snapshot(box):
    box.run(
        "setsid bash -c 'while :; do echo x >> log.txt; sleep 0.01; done' "
        ">/dev/null 2>&1 </dev/null & disown; sleep 0.3"
    )
    snap = box.snapshot()
    size = len(snap["log.txt"])
    assert size > 0
    time.sleep(0.5)
    first = box.run("wc -c < log.txt").output.strip()
    time.sleep(0.3)
    second = box.run("wc -c < log.txt").output.strip()
    assert first == second == str(size), "nothing may change the workspace after the snapshot"


# -- file tools --------------------------------------------------------------------------------
@pytest.mark.parametrize("writer", [False, True])
def test_fifo_never_hangs_file_tools(box, writer):
    box.run("mkfifo pipe")
    if writer:  # someone holds the other end open, as a careful attacker would
        box.run("setsid bash -c 'exec 3<>pipe; sleep 60' >/dev/null 2>&1 </dev/null &")
    started = time.monotonic()
    with pytest.raises(SandboxError, match="not a regular file"):
        box.read_file("pipe")
    with pytest.raises(SandboxError, match="not a regular file"):
        box.write_file("pipe", "data")
    names = {e.name: e.type for e in box.list_dir(".")}
    assert names["pipe"] == "other"
    snap = box.snapshot()
    assert "pipe" not in snap and any(n.startswith("pipe:") for n in snap.skipped)
    assert time.monotonic() - started < 5


def test_symlink_swap_race_never_escapes_the_workspace(box):
    out = f"/tmp/opd-outside-{uuid.uuid4().hex[:8]}"  # outside, yet writable by the agent
    box.run(f"mkdir -p {out} real && echo SECRET > {out}/secret && echo inside > real/secret"
            " && ln -s real sw")
    # `sw` flips atomically between a symlink inside the workspace and one leading out
    box.run(
        f"setsid bash -c 'while :; do ln -sfn {out} sw.t && mv -T sw.t sw; "
        "ln -sfn real sw.t && mv -T sw.t sw; done' >/dev/null 2>&1 </dev/null &"
    )
    wrote = refused = i = 0
    deadline = time.monotonic() + 120
    try:
        # 300 tries, and on until the swapper has won and lost at least once each (a loaded
        # machine may starve it through the first 300)
        while i < 300 or not (wrote and refused) and time.monotonic() < deadline:
            i += 1
            try:
                box.write_file(f"sw/pwned{i}.txt", "x")
                wrote += 1
            except SandboxError as exc:
                assert "outside the workspace" in str(exc)
                refused += 1
            try:
                assert box.read_file("sw/secret") == b"inside\n"
            except SandboxError:
                pass
    finally:
        box.snapshot()  # kills the swapper
    assert wrote > 0 and refused > 0, (wrote, refused)  # the race really happened
    leaked = box.run(f"ls {out}").output.split()
    assert leaked == ["secret"], leaked
    assert len(box.run("ls real").output.split()) == wrote + 1
    if box.backend == "local":
        shutil.rmtree(out, ignore_errors=True)


def test_symlinks_inside_the_workspace_still_work(box):
    box.run("mkdir -p real/d && echo hi > real/d/f && ln -s real alias && ln -s ../real/d "
            "real/up && ln -s /etc out")
    assert box.read_file("alias/d/f") == b"hi\n"
    assert box.read_file("real/up/f") == b"hi\n"
    box.write_file("alias/d/new.txt", "n")
    assert box.read_file("real/d/new.txt") == b"n"
    with pytest.raises(SandboxError, match="outside the workspace"):
        box.read_file("out/hostname")
    with pytest.raises(SandboxError, match="outside the workspace"):
        box.write_file("real/../../escape.txt", "x")


# -- snapshot bounds -----------------------------------------------------------------------
@pytest.mark.docker
def test_tens_of_thousands_of_long_paths_keep_the_host_bounded():
    box = open_sandbox("docker")
    try:
        make = (
            "import os\n"
            "for d in range(30):\n"
            "    base = f'dir{d:02d}_' + 'd' * 150\n"
            "    os.makedirs(base)\n"
            "    for i in range(1000):\n"
            "        open(os.path.join(base, f'{i:05d}_' + 'n' * 200), 'w').write('x')\n"
        )
        made = box.run(f"python3 -c {shlex.quote(make)} && ls | wc -l", timeout=120)
        assert made.output.strip() == "30", made.output
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        started = time.monotonic()
        snap = box.snapshot(max_files=2000)
        elapsed = time.monotonic() - started
        grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
        assert len(snap) == 2000 and len(snap.skipped) <= 100
        assert snap.skipped_count == 30000 - 2000
        assert grown < 50_000, f"the host grew by {grown} KiB"
        assert elapsed < 60
    finally:
        box.close()


def test_deep_and_unreadable_trees_are_skipped_with_notes(box):
    box.run("p=$(printf 'd/%.0s' $(seq 300)); mkdir -p $p && echo bottom > ${p}bottom.txt")
    box.run("echo top > ok.txt && echo s > locked.txt && chmod 000 locked.txt && mkdir -p "
            "closed && echo c > closed/c.txt && chmod 000 closed")
    snap = box.snapshot()
    assert snap["ok.txt"] == b"top\n"
    if box.backend != "local" or os.geteuid() != 0:  # root on the host reads anything
        assert "locked.txt" not in snap and "closed/c.txt" not in snap
        assert any(n.startswith("locked.txt: not readable") for n in snap.skipped)
    assert any("deeper than 256 levels" in n for n in snap.skipped)


def test_skip_notes_on_hostile_names_stay_within_the_reply_cap(box):
    # 300 symlinks whose names are 60 astral characters each: the worst case for escaping
    make = ("import os\nfor i in range(300):\n"
            "    os.symlink('x', '\\U0001F600' * 60 + str(i))\n"
            "open(b'bad\\xff\\xfename', 'w').write('x')\nopen('ok.py', 'w').write('x')\n")
    assert box.run(f"python3 -c {shlex.quote(make)}").exit_code == 0
    snap = box.snapshot()
    assert set(snap) == {"ok.py"}
    assert snap.skipped_count == 301 and len(snap.skipped) == 100
    assert all(len(note) <= 300 for note in snap.skipped)
    assert box.alive


def test_snapshot_files_are_all_writable_by_write_files(box):
    box.run("head -c 11000000 /dev/zero > scratch.bin && echo 'def f(): return 1' > sol.py")
    capped = box.snapshot(max_file_bytes=box.file_cap)
    assert "scratch.bin" not in capped and capped["sol.py"].startswith(b"def f")
    note = next(n for n in capped.skipped if n.startswith("scratch.bin"))
    assert "per-file limit" in note
    snap = box.snapshot()  # by default as much as a workspace holds, large files included
    assert len(snap["scratch.bin"]) == 11_000_000 and not snap.skipped
    other = open_sandbox(box.backend)
    try:
        other.write_files(snap)
        assert other.run("stat -c %s scratch.bin").output.strip() == "11000000"
        assert other.read_file("sol.py") == snap["sol.py"]
    finally:
        other.close()


# -- the env never raises ------------------------------------------------------------------
@pytest.fixture(scope="module")
def docker_pool():
    pool = make_pool("docker", size=3)
    yield pool
    pool.close()


def call(name: str, **arguments) -> str:
    return format_tool_call(name, arguments)


@pytest.mark.docker
def test_hostile_actions_get_clear_observations(docker_pool, make_task):
    env = CodingEnv(tasks=[make_task()], sandbox=docker_pool, max_format_errors=20)
    try:
        env.reset(seed=0)
        deep = "[" * 200000 + "]" * 200000
        actions = {
            "deep text": f'<tool_call>{{"name": "terminal", "arguments": {deep}}}</tool_call>',
            "deep arguments": {"tool_calls": [{"type": "function", "function": {
                "name": "terminal", "arguments": '{"command": ' + deep + "}"}}]},
            "deep object": {"tool_calls": [{"type": "function", "function": {
                "name": "terminal", "arguments": {"command": nested(5000)}}}]},
            "surrogate content": '<tool_call>{"name": "write_file", "arguments": {"path": '
                                 '"a.py", "content": "x\\ud800"}}</tool_call>',
            "surrogate path": '<tool_call>{"name": "read_file", "arguments": {"path": '
                              '"\\udcff"}}</tool_call>',
            "huge timeout": '<tool_call>{"name": "terminal", "arguments": {"command": '
                            '"echo hi", "timeout": 1' + "0" * 400 + "}}</tool_call>",
            "overlong integer": '<tool_call>{"name": "terminal", "arguments": {"command": '
                                '"echo hi", "timeout": 1' + "0" * 5000 + "}}</tool_call>",
            "infinite timeout": '<tool_call>{"name": "terminal", "arguments": {"command": '
                                '"echo hi", "timeout": 1e999}}</tool_call>',
            "huge offset": '<tool_call>{"name": "read_file", "arguments": {"path": "calc.py",'
                           ' "offset": 1' + "0" * 300 + "}}</tool_call>",
        }
        for name, action in actions.items():
            obs, reward, terminated, truncated, info = env.step(action)
            assert not terminated and not truncated, (name, obs[:300])
            assert obs.strip(), name
            json.dumps(info["messages"])  # the transcript always serialises
        outputs = [m["content"] for m in env.messages if m["role"] == "tool"]
        assert sum("hi\n[exit code: 0]" in o for o in outputs) == 2  # huge and inf timeouts
    finally:
        env.close()


def nested(depth: int) -> list:
    value: list = []
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.docker
def test_unreadable_file_and_deep_tree_at_submit_end_cleanly(docker_pool, make_task):
    task = make_task()
    env = CodingEnv(tasks=[task], sandbox=docker_pool)
    try:
        env.reset(seed=0)
        env.step(call("write_file", path="calc.py", content=task.solution["calc.py"]))
        env.step(call("terminal", command="echo s > secret && chmod 000 secret; "
                      "mkdir -p $(printf 'x/%.0s' $(seq 400))"))
        obs, reward, terminated, truncated, info = env.step(call("submit"))
        assert terminated and info["end_reason"] == "submitted"
        notes = info["snapshot_skipped"]
        assert any(n.startswith("secret: not readable") for n in notes)
        assert any("deeper than 256 levels" in n for n in notes)
        assert any("deeper than 256 levels" in n for n in info["grade"]["not_carried"])
        assert info["grade"]["score"] == 1.0, info["grade"]
    finally:
        env.close()


@pytest.mark.docker
def test_large_scratch_file_does_not_fail_a_correct_solution(docker_pool, make_task):
    """An 11 MiB file (over write_file's cap) is carried to grading like any other file."""
    task = make_task()
    env = CodingEnv(tasks=[task], sandbox=docker_pool)
    try:
        env.reset(seed=0)
        env.step(call("write_file", path="calc.py", content=task.solution["calc.py"]))
        env.step(call("terminal", command="head -c 11534336 /dev/urandom > scratch.bin"))
        obs, reward, terminated, truncated, info = env.step(call("submit"))
        assert terminated and info["grade"]["score"] == 1.0, info["grade"]
        assert "snapshot_skipped" not in info and "not_carried" not in info["grade"]
    finally:
        env.close()


@pytest.mark.docker
def test_chained_calls_are_bounded_by_the_step_time_budget(docker_pool, make_task):
    env = CodingEnv(tasks=[make_task()], sandbox=docker_pool, step_time_budget=10)
    try:
        env.reset(seed=0)
        chain = "\n".join(call("terminal", command="sleep 8; echo done", timeout=8)
                          for _ in range(16))
        started = time.monotonic()
        obs, reward, terminated, truncated, info = env.step(chain)
        elapsed = time.monotonic() - started
        assert elapsed < 16, f"16 x 8 s ran for {elapsed:.0f} s despite a 10 s budget"
        assert not terminated and not truncated
        kinds = [r["error"] for r in info["tool_results"]]
        assert kinds[0] == "timeout" or info["tool_results"][0]["ok"]
        assert "step_budget" in kinds and len(kinds) == 16
        assert "per-step time budget" in obs
        assert env.step(call("terminal", command="echo next"))[0].startswith("next")
    finally:
        env.close()


def test_step_time_budget_is_validated(make_task):
    with pytest.raises(ValueError, match="step_time_budget"):
        CodingEnv(tasks=[make_task()], sandbox="local", step_time_budget=0)
