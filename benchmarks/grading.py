"""Grading wall time per episode, side by side in one run: the privilege-separated harness
against the grader it replaced (pytest run by the agent's own uid, verdict read from JUnit XML),
each grading every built-in task's reference solution in Docker. Prints a table.

    python benchmarks/grading.py [--rounds 2] [--baseline a0d5d17]

The old grader and the old test files are read from git at `--baseline` (the commit before
the harness landed), so both run against today's sandboxes; grades are interleaved task by
task so that machine noise hits both alike.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
import types
import warnings
from pathlib import Path

from opd_gym.grading import Grader
from opd_gym.sandboxes import make_pool
from opd_gym.tasks import Task, load_suite

ROOT = Path(__file__).resolve().parent.parent


def git_show(rev: str, path: str) -> str:
    return subprocess.run(["git", "show", f"{rev}:{path}"], cwd=ROOT, check=True,
                          capture_output=True, text=True).stdout


def legacy_grader(rev: str, pool) -> object:
    """The Grader class as it was at `rev`, loaded from git into a private module."""
    module = types.ModuleType("legacy_grading")
    sys.modules[module.__name__] = module  # dataclasses look their module up
    exec(compile(git_show(rev, "opd_gym/grading.py"), "legacy_grading.py", "exec"),
         module.__dict__)
    return module.Grader(pool)


def legacy_task(rev: str, task: Task) -> Task:
    """`task` with the hidden test files it had at `rev`."""
    folder = f"envs/coding/tasks/{task.id}/tests"
    tests = {name: git_show(rev, f"{folder}/{Path(name).name}") for name in task.tests}
    return Task(**{**task.__dict__, "tests": tests})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=2, help="gradings per task and grader")
    parser.add_argument("--baseline", default="a0d5d17", help="git revision of the old grader")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    suite = load_suite("coding")
    pool = make_pool("docker", size=2)
    new, old = Grader(pool), legacy_grader(args.baseline, pool)
    times: dict[str, list[float]] = {"new": [], "old": []}
    ratios = []
    scores = {"new": [], "old": []}
    for task in suite:
        files = {k: v.encode() for k, v in {**task.files, **task.solution}.items()}
        before = legacy_task(args.baseline, task)
        per = {"new": [], "old": []}
        for _ in range(args.rounds):
            for name, grader, graded in (("old", old, before), ("new", new, task)):
                started = time.perf_counter()
                report = grader.grade(graded, files)
                per[name].append(time.perf_counter() - started)
                scores[name].append(report.score)
        for name in per:
            times[name].append(statistics.median(per[name]))
        ratios.append(times["new"][-1] / times["old"][-1])
    pool.close()
    print(f"{'grader':<34} {'median s/episode':>17} {'total s':>9} {'mean score':>11}")
    for name, label in (("old", "old: pytest as agent uid + JUnit"),
                        ("new", "new: root harness + uid-1000 runner")):
        print(f"{label:<34} {statistics.median(times[name]):>17.3f} {sum(times[name]):>9.2f} "
              f"{statistics.mean(scores[name]):>11.3f}")
    print(f"\nnew/old per task: median {statistics.median(ratios):.2f}x, "
          f"max {max(ratios):.2f}x, total {sum(times['new']) / sum(times['old']):.2f}x "
          f"({len(suite)} tasks x {args.rounds} rounds, reference solutions)")


if __name__ == "__main__":
    main()
