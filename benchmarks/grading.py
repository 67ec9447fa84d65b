"""Grading wall time against plain pytest, side by side in one run (issue 22, point 3).

For every built-in task (envs/coding/tasks/*) with its reference solution: `Grader.grade`
(copy into a fresh pooled sandbox, both canary variants, verdict checks) against plain
`python3 -m pytest` on the same files in a container of the same image (the whole process,
started with `docker exec`; the files are put there beforehand, as the pool's containers are
started beforehand; `opd_grading`, the helper module some hidden tests import, is put on
PYTHONPATH as the harness puts it on sys.path). Then a synthetic task whose one test makes
10^5 calls into the solution. Rounds are interleaved task by task so that machine noise hits
both alike; each task is calibrated once first (a Grader does that once per task; its cost is
shown apart).

    python benchmarks/grading.py [--rounds 3] [--tasks bank_account,cli_args]
"""

from __future__ import annotations

import argparse
import ast
import statistics
import sys
import time
import warnings
from pathlib import Path

from opd_gym.grading import Grader
from opd_gym.sandboxes import make_pool
from opd_gym.sandboxes.image import DEFAULT_IMAGE
from opd_gym.tasks import Task, load_suite

ROOT = Path(__file__).resolve().parent.parent
# The library-agreement test's reference runner: the same plain pytest, shared on purpose.
sys.path.insert(0, str(ROOT / "tests" / "grading"))
from plain_pytest import container, exec_pytest, put_files  # noqa: E402

CALLS = 100_000
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


def time_task(task: Task, grader: Grader, rounds: int) -> dict[str, float]:
    """Median wall seconds of grade and of plain pytest on `task`, and the calibration cost."""
    solved = {p: t.encode() for p, t in {**task.files, **task.solution}.items()}
    tests = sorted(p for p in task.tests if p.endswith(".py"))
    started = time.perf_counter()
    grader.calibration(task)
    calibrate = time.perf_counter() - started
    grades, plains = [], []
    with container(DEFAULT_IMAGE) as name:
        put_files(name, plain_files(task))
        put_files(name, {"opd_grading.py": opd_grading_source().encode()}, root=HELPER_DIR)
        for _ in range(rounds):
            started = time.perf_counter()
            report = grader.grade(task, solved)
            grades.append(time.perf_counter() - started)
            if report.score != 1.0:
                raise SystemExit(f"{task.id}: the reference solution graded {report.score} "
                                 f"({report.reason or report.summary()})")
            code, wall, output = exec_pytest(name, ["-q", "-p", "no:cacheprovider", *tests],
                                             env={"PYTHONPATH": HELPER_DIR})
            if code != 0:
                raise SystemExit(f"{task.id}: plain pytest failed (exit {code}):\n{output}")
            plains.append(wall)
    return {"grade": statistics.median(grades), "plain": statistics.median(plains),
            "calibrate": calibrate}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3, help="timed runs per task and side")
    parser.add_argument("--tasks", default="", help="comma-separated task ids (default: all)")
    parser.add_argument("--hold", action=argparse.BooleanOptionalAction, default=True,
                        help="host-held expectations (held.py; the Grader's default, "
                             "--no-hold: the canary scheme alone)")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    suite = list(load_suite("coding"))
    if args.tasks:
        wanted = set(args.tasks.split(","))
        suite = [t for t in suite if t.id in wanted]
    pool = make_pool("docker", size=2)
    grader = Grader(pool, hold=args.hold)
    rows: list[tuple[str, dict[str, float]]] = []
    print(f"{'task':<24} {'grade s':>8} {'plain s':>8} {'ratio':>6} {'calibrate s':>12}",
          flush=True)
    try:
        for task in suite:
            row = time_task(task, grader, args.rounds)
            rows.append((task.id, row))
            print(f"{task.id:<24} {row['grade']:>8.3f} {row['plain']:>8.3f} "
                  f"{row['grade'] / row['plain']:>5.2f}x {row['calibrate']:>12.2f}", flush=True)
        many = time_task(MANY_CALLS, grader, args.rounds)
    finally:
        pool.close()
    ratios = [row["grade"] / row["plain"] for _, row in rows]
    print(f"\nbuilt-in suite: median ratio {statistics.median(ratios):.2f}x (target <= 1.5x), "
          f"max {max(ratios):.2f}x, {len(rows)} tasks x {args.rounds} rounds")
    print(f"{CALLS:,} calls into the solution: grade {many['grade']:.3f} s, plain "
          f"{many['plain']:.3f} s, ratio {many['grade'] / many['plain']:.2f}x (target <= 2x)")


if __name__ == "__main__":
    main()
