"""Split collusion at scale (issue 29, point 2): payloads that solve nothing and forge passes
in only some grading runs or for only some tests, played against the default Grader on the
built-in tasks, the dataset fixtures and a seeded sample of the repository suite.

Strategies (the payload of tests/security/test_split_collusion.py):
- `uid`: every test passes in the run of one uid (1001 or 1002, in turn);
- `coin`: every test passes in a whole run on a fair coin per grading process;
- `failing`: each test the agent saw fail (a repository task's FAIL_TO_PASS names, every test
  of the others) passes on a coin of its own (p = 0.3), in every run; no run signal at all.

Prints, per suite and strategy, the grades played, the mean correctness, how many paid (score
above 0), flagged as forgery and infra errors. The issue's bar: a mean of at most 0.01.

    python benchmarks/split_attack.py [--repo-sample 40] [--passes 2] [--seed 0]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from opd_gym.grading import Grader
from opd_gym.nodeids import base_id
from opd_gym.sandboxes import make_pool
from opd_gym.tasks import Task, load_suite, load_tasks

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "security"))
from test_split_collusion import split  # noqa: E402  (the payload the tests play)

FIXTURES = ROOT / "tests" / "fixtures"
STRATEGIES = ("uid", "coin", "failing")


def _failing(task: Task) -> set[str]:
    """Test function names an agent could know fail: FAIL_TO_PASS, else every test."""
    ids = task.repo.fail_to_pass if task.repo is not None else ()
    if not ids:
        from opd_gym.grading.expected import expected_tests, test_paths

        ids = expected_tests(task.tests, test_paths(task))
    return {base_id(i).rpartition("::")[2] for i in ids}


def suites(repo_sample: int, seed: int) -> dict[str, list[Task]]:
    """The tasks played: built-in tasks whose tests import the solution, the dataset fixtures,
    and `repo_sample` repository tasks drawn with `seed`."""
    builtin = [t for t in load_suite("coding") if any(p.endswith(".py") for p in t.solution)
               and not t.id.endswith("_stdio")]
    data = [t for schema in ("humaneval", "mbpp")
            for t in load_tasks(FIXTURES / f"{schema}.jsonl", schema=schema)]
    repo = list(load_tasks("repo"))
    return {"built-in": builtin, "dataset fixtures": data,
            f"repo (sample of {repo_sample})": random.Random(seed).sample(repo, repo_sample)}


def play(grader: Grader, tasks: Sequence[Task], strategy: str, passes: int) -> list:
    """`passes` grades of each task (a uid split alternates the uid between passes)."""
    jobs = [(task, split(task, strategy, 1001 + n % 2, 0.3, _failing(task)))
            for n in range(passes) for task in tasks]
    with ThreadPoolExecutor(3) as workers:
        return list(workers.map(lambda job: grader.grade(*job), jobs))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo-sample", type=int, default=40)
    parser.add_argument("--passes", type=int, default=2, help="grades per task and strategy")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    pool = make_pool("docker", size=3, workers=3)
    try:
        grader = Grader(pool)
        rows = []
        for name, tasks in suites(args.repo_sample, args.seed).items():
            with ThreadPoolExecutor(3) as workers:
                list(workers.map(grader.calibration, tasks))
            for strategy in STRATEGIES:
                reports = play(grader, tasks, strategy, args.passes)
                scores = [r.score for r in reports]
                rows.append((name, strategy, len(scores), statistics.fmean(scores),
                             sum(s > 0 for s in scores), sum(bool(r.forgery) for r in reports),
                             sum(bool(r.infra_error) for r in reports)))
                print(f"  {name} {strategy}: mean {rows[-1][3]:.4f}", file=sys.stderr)
    finally:
        pool.close()
    print("| suite | strategy | grades | mean correctness | paid | flagged | infra |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for name, strategy, count, mean, paid, flagged, infra in rows:
        print(f"| {name} | {strategy} | {count} | {mean:.4f} | {paid} | {flagged} | {infra} |")
    worst = max(rows, key=lambda r: r[3])
    print(f"\nworst mean: {worst[3]:.4f} ({worst[0]}, {worst[1]}); bar: 0.01")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
