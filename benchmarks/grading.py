"""Grading wall time against plain pytest, side by side in one run (issue 22, point 3; issue
30, point 2).

For every built-in task (envs/coding/tasks/*) with its reference solution: `Grader.grade`
(copy into a fresh pooled sandbox, the hidden tests run once where no test's second run would
be judged, else both canary variants, verdict checks) against plain
`python3 -m pytest` on the same files in a container of the same image (the whole process,
started with `docker exec`; the files are put there beforehand, as the pool's containers are
started beforehand; `opd_grading`, the helper module some hidden tests import, is put on
PYTHONPATH as the harness puts it on sys.path). Then a synthetic task whose one test makes
10^5 calls into the solution. With `--repo N`: N tasks per library of the repository suite,
each graded on its gold fix with every passing test as PASS_TO_PASS, against plain pytest on
the project's FULL suite (no ids: the project's own config, as a user runs it).

The column "runs" says how many runs a grade of the task takes (1: no test's second run is
judged, every canary being held, invalid or absent; "1+s": the second run holds only the share
s of the tests, those whose second run is judged and those sentinels are cloned from). Beside
each grade, the column "2 runs" grades the same files with `Grader(single_run=False)`: both
variants of every test always (what every grade cost before one-run grading; where the grade
takes 2 runs anyway the two columns do the same). Rounds are interleaved task by task so that
machine noise hits all sides alike; each task is calibrated once first (a Grader does that
once per task; its cost is shown apart, the partial second run's two checks included). The
column "host s" is the part of a grade spent outside the sandbox's harness run, from its
request to its verdict (the held rewrite of the tests, canaries, copying the files, reading
the verdict). A grade takes a grading sandbox whose harness already waits, pytest imported
(the pool's `with_prepared` sandboxes), where one is ready. The column "drawn s" grades as
an env's submit does: the grade's runs (canaries, sentinels, the held rewrite: the host's
work that reads no submission) were drawn at the episode's reset (`Grader.prepare`, its time
apart in "draw s"; an episode's turns hide it). The column "cold" grades the same
files with neither: the harness starts once its request is ready, after the host's work (as
every grade did before `launch.StartedHarness`).

    python benchmarks/grading.py [--rounds 3] [--tasks bank_account,cli_args] [--repo 1]
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any

from opd_gym.grading import Grader
from opd_gym.sandboxes import make_pool
from opd_gym.sandboxes.image import DEFAULT_IMAGE
from opd_gym.tasks import Task, load_suite
from opd_gym.tasks.repo_suite import load_repo_suite, sample

ROOT = Path(__file__).resolve().parent.parent
# The library-agreement test's reference runner: the same plain pytest, shared on purpose.
sys.path.insert(0, str(ROOT / "tests" / "grading"))
from plain_pytest import container, exec_pytest, put_files  # noqa: E402

CALLS = 100_000
SETTLE = 0.5  # seconds a warm harness gets to start (Python, pytest's import) before a side
HELPER_DIR = "/tmp/opd-plain-lib"  # where plain runs find `opd_grading` (PYTHONPATH)


def opd_grading_source() -> str:
    """The `opd_grading` module hidden tests import, as the harness ships it (its constant)."""
    tree = ast.parse((ROOT / "sandbox" / "grade_harness.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "OPD_GRADING_SOURCE" for t in node.targets):
            return ast.literal_eval(node.value)
    raise SystemExit("sandbox/grade_harness.py has no OPD_GRADING_SOURCE: update this script")

MANY_CALLS = Task(
    id="many_calls",
    prompt="Write inc(x) in inc.py returning x + 1.",
    files={"inc.py": "def inc(x):\n    raise NotImplementedError\n"},
    solution={"inc.py": "def inc(x):\n    return x + 1\n"},
    tests={"tests/test_many_calls.py": (
        "from inc import inc\n\n\n"
        "def test_many_calls():\n"
        "    total = 0\n"
        f"    for i in range({CALLS}):\n"
        "        total += inc(i)\n"
        f"    assert total == {sum(range(1, CALLS + 1))}\n"
    )},
)


def plain_files(task: Task) -> dict[str, bytes]:
    """Starter + reference + hidden tests (+ the task's ini as pytest.ini): a project root."""
    files = {p: t.encode() for p, t in {**task.files, **task.solution, **task.tests}.items()}
    if task.pytest_ini is not None:
        files["pytest.ini"] = task.pytest_ini.encode()
    return files


@contextlib.contextmanager
def two_runs(grader: Grader):
    """`Grader(single_run=False)` for the "2 runs" column (the same calibration): both
    variants always."""
    grader.single_run = False
    try:
        yield
    finally:
        grader.single_run = True


@contextlib.contextmanager
def harness_runs(spy):
    """Every harness run of the block goes through `spy(real_run, harness, request, timeout)`."""
    from opd_gym.grading import launch

    real = launch.StartedHarness.run
    launch.StartedHarness.run = lambda harness, request, timeout: spy(real, harness, request,
                                                                      timeout)
    try:
        yield
    finally:
        launch.StartedHarness.run = real


def _runs(grader: Grader, task: Task, files: dict[str, bytes]) -> str:
    """The runs a grade of `task` takes: "1", "2", or "1+s" where the second run holds only
    the share s of the tests (a partial second run: `Calibration.second`)."""
    requests: list[dict] = []

    def seen(real, harness, request, timeout):
        requests.append(request)
        return real(harness, request, timeout)

    with harness_runs(seen):
        grader.grade(task, files)
    variants = requests[-1]["variants"]
    if len(variants) == 1:
        return "1"
    skipped = len(variants[1].get("skip") or ())
    if not skipped:
        return "2"
    return f"1+{1 - skipped / len(grader.calibration(task).canaries.tests):.2f}"


@contextlib.contextmanager
def harness_time(into: list[float]):
    """Append the wall seconds each harness run of the block takes, from its request to its
    verdict (the sandbox's share of a grade; the rest is the host's: the held rewrite,
    canaries, copying the files, the verdict, overlapping the harness's start-up)."""
    def timed(real, harness, request, timeout):
        started = time.perf_counter()
        try:
            return real(harness, request, timeout)
        finally:
            into.append(time.perf_counter() - started)

    with harness_runs(timed):
        yield


@contextlib.contextmanager
def cold_start():
    """For the "cold" column: no warm harness is taken from the pool, and each harness starts
    when its request is ready, after the host's work (every grade before this column)."""
    from opd_gym.grading import launch
    from opd_gym.sandboxes import SandboxPool

    real, take = launch.StartedHarness, SandboxPool.take_prepared

    class Cold(real):  # type: ignore[misc,valid-type]
        def __init__(self, sandbox) -> None:  # the start is deferred to run
            self.sandbox = sandbox
            self._exec = None
            self._ran = False

        def run(self, request, timeout):
            real.__init__(self, self.sandbox)
            return real.run(self, request, timeout)

    launch.StartedHarness = Cold
    SandboxPool.take_prepared = lambda pool: None
    try:
        yield
    finally:
        launch.StartedHarness = real
        SandboxPool.take_prepared = take


def time_task(task: Task, grader: Grader, rounds: int) -> dict[str, Any]:
    """Median wall seconds of grade, of grade in two runs, and of plain pytest on
    `task` (a repository task: its project's whole suite), the host's share of a grade
    (outside the harness run), and the calibration cost."""
    solved = {p: t.encode() for p, t in {**task.files, **task.solution}.items()}
    if task.repo is not None:
        args = ["-q", "-p", "no:cacheprovider"]  # the project's own config picks the suite
    else:
        args = ["-q", "-p", "no:cacheprovider",
                *sorted(p for p in task.tests if p.endswith(".py"))]
    started = time.perf_counter()
    grader.calibration(task)
    calibrate = time.perf_counter() - started
    grades, twice, colds, plains, hosts, drawn, draws = [], [], [], [], [], [], []

    def grade(into: list[float], host: list[float] | None = None, draw: bool = False) -> None:
        runs: list[float] = []
        grader.sandboxes.wait_ready()  # every side starts from a full pool, as plain pytest's
        time.sleep(SETTLE)  # and its warm harness started (wait_ready sees only the sandbox)
        if draw:  # drawn at the episode's reset (an env does), done before its submit
            started = time.perf_counter()
            prepared = grader.prepare(task)
            if prepared is None:
                raise SystemExit(f"{task.id}: Grader.prepare drew nothing")
            prepared.result()
            draws.append(time.perf_counter() - started)
        started = time.perf_counter()  # container is started beforehand
        with harness_time(runs):
            report = grader.grade(task, solved)
        into.append(time.perf_counter() - started)
        if host is not None:
            host.append(into[-1] - sum(runs))
        if report.score != 1.0:
            raise SystemExit(f"{task.id}: the reference solution graded {report.score} "
                             f"({report.reason or report.summary()})")

    with container(DEFAULT_IMAGE) as name:
        put_files(name, plain_files(task))
        put_files(name, {"opd_grading.py": opd_grading_source().encode()}, root=HELPER_DIR)
        for _ in range(rounds):
            grade(grades, hosts)
            grade(drawn, draw=True)
            with two_runs(grader):
                grade(twice)
            with cold_start():
                grade(colds)
            code, wall, output = exec_pytest(name, args, env={"PYTHONPATH": HELPER_DIR})
            # a project's full suite may hold tests that fail on the gold tree too (they are
            # in neither FAIL_TO_PASS nor PASS_TO_PASS): exit 1 is a run, 2+ is not
            if code not in ((0, 1) if task.repo is not None else (0,)):
                raise SystemExit(f"{task.id}: plain pytest failed (exit {code}):\n{output}")
            plains.append(wall)
    return {"runs": _runs(grader, task, solved), "grade": statistics.median(grades),
            "twice": statistics.median(twice),
            "cold": statistics.median(colds), "plain": statistics.median(plains),
            "host": statistics.median(hosts), "drawn": statistics.median(drawn),
            "draw": statistics.median(draws), "calibrate": calibrate}


def table(title: str, tasks: list[Task], grader: Grader, rounds: int) -> list[dict[str, Any]]:
    """Print one row per task; the rows."""
    print(f"\n{title}\n{'task':<28} {'runs':>6} {'grade s':>8} {'host s':>7} {'drawn s':>8} "
          f"{'draw s':>7} {'2 runs s':>8} {'cold s':>7} {'plain s':>8} {'ratio':>6} "
          f"{'drawn':>6} {'2 runs':>6} {'cold':>6} {'calibrate s':>12}", flush=True)
    rows = []
    for task in tasks:
        row = time_task(task, grader, rounds)
        rows.append(row)
        print(f"{task.id:<28} {row['runs']:>6} {row['grade']:>8.3f} {row['host']:>7.3f} "
              f"{row['drawn']:>8.3f} {row['draw']:>7.3f} {row['twice']:>8.3f} "
              f"{row['cold']:>7.3f} {row['plain']:>8.3f} {row['grade'] / row['plain']:>5.2f}x "
              f"{row['drawn'] / row['plain']:>5.2f}x {row['twice'] / row['plain']:>5.2f}x "
              f"{row['cold'] / row['plain']:>5.2f}x {row['calibrate']:>12.2f}", flush=True)
    return rows


def summary(name: str, rows: list[dict[str, Any]], rounds: int) -> str:
    ratios = [r["grade"] / r["plain"] for r in rows]
    drawn = [r["drawn"] / r["plain"] for r in rows]
    twice = [r["twice"] / r["plain"] for r in rows]
    cold = [r["cold"] / r["plain"] for r in rows]
    total = sum(r["grade"] for r in rows) / sum(r["plain"] for r in rows)
    once = sum(r["runs"] == "1" for r in rows)
    partial = sum(r["runs"].startswith("1+") for r in rows)
    return (f"{name}: median ratio {statistics.median(ratios):.2f}x (drawn at reset: "
            f"{statistics.median(drawn):.2f}x, max {max(drawn):.2f}x; 2 runs: "
            f"{statistics.median(twice):.2f}x, cold: {statistics.median(cold):.2f}x), "
            f"max {max(ratios):.2f}x, graded in one run "
            f"{once} of {len(rows)}, with a partial second run {partial}, summed grade / summed "
            f"plain {total:.2f}x, {len(rows)} tasks x {rounds} rounds")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3, help="timed runs per task and side")
    parser.add_argument("--tasks", default="", help="comma-separated task ids (default: all)")
    parser.add_argument("--hold", action=argparse.BooleanOptionalAction, default=True,
                        help="host-held expectations (held.py; the Grader's default, "
                             "--no-hold: the canary scheme alone)")
    parser.add_argument("--repo", type=int, default=0,
                        help="repository tasks per library, against the project's full suite")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    suite = list(load_suite("coding"))
    if args.tasks:
        wanted = set(args.tasks.split(","))
        suite = [t for t in suite if t.id in wanted]
    repo = sample(load_repo_suite(), args.repo) if args.repo else []
    pool = make_pool("docker", size=2)
    grader = Grader(pool, hold=args.hold)
    try:
        rows = table("built-in tasks", suite, grader, args.rounds) if suite else []
        repo_rows = table("repository tasks (plain: the full suite)", repo, grader,
                          args.rounds) if repo else []
        many = time_task(MANY_CALLS, grader, args.rounds)
    finally:
        pool.close()
    print()
    if rows:
        print(summary("built-in suite", rows, args.rounds) + " (target <= 1.5x)")
    if repo_rows:
        print(summary("repository suite", repo_rows, args.rounds))
    print(f"{CALLS:,} calls into the solution: grade {many['grade']:.3f} s, plain "
          f"{many['plain']:.3f} s, ratio {many['grade'] / many['plain']:.2f}x (target <= 2x)")


if __name__ == "__main__":
    main()
