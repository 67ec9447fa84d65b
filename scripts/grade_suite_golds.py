"""Grade every repository-suite task's gold fix and untouched base with the default Grader
and record the tasks it cannot verify (`envs/repo/refused.jsonl`), which the suite then
leaves out.

The suite's filter (`repo_suite.can_earn`) is static: it cannot see, for instance, that a
failing test's value is an object with an `__eq__` of its own, which calibration never
vouches for, so the Grader refuses that task's gold. This script finds such tasks by
grading them as a user would.

    python scripts/grade_suite_golds.py [--workers 2] [--limit N] [--seed 0]
        [--libraries parse,six] [--ids ID,ID] [--write]

Tasks are graded in a seeded random order, so a partial run (`--limit`) samples every
library. `--write` appends the refused ones to the file; a task whose grade is an infra
error is named and never listed (the exit status is then 1). Each result is printed as one line;
the last line is the summary.
"""

from __future__ import annotations

import argparse
import json
import random
import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor

from opd_gym.grading import Grader
from opd_gym.sandboxes import make_pool
from opd_gym.tasks.repo_suite import load_repo_suite, refused_path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--limit", type=int, default=0, help="grade only this many tasks")
    parser.add_argument("--seed", type=int, default=0, help="the order tasks are graded in")
    parser.add_argument("--libraries", default="", help="comma-separated (default: all)")
    parser.add_argument("--ids", default="", help="comma-separated task ids (default: all)")
    parser.add_argument("--write", action="store_true", help=f"append refusals to {refused_path()}")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    tasks = load_repo_suite()
    if args.libraries:
        wanted = set(args.libraries.split(","))
        tasks = [t for t in tasks if t.repo is not None and t.repo.name in wanted]
    if args.ids:
        wanted = set(args.ids.split(","))
        tasks = [t for t in tasks if t.id in wanted]
    random.Random(args.seed).shuffle(tasks)
    if args.limit:
        tasks = tasks[:args.limit]
    if not tasks:
        raise SystemExit("no suite task matches (a task refused already is left out of the suite)")
    pool = make_pool("docker", size=args.workers)
    grader = Grader(pool)
    lock = threading.Lock()
    refused: list[dict[str, object]] = []
    failed: list[str] = []  # infra errors: no verdict on the task, never listed as refused

    def check(task) -> None:
        started = time.monotonic()
        gold = grader.grade(task, {p: t.encode() for p, t in {**task.files,
                                                              **task.solution}.items()})
        base = grader.grade(task, {p: t.encode() for p, t in task.files.items()})
        ok = gold.score == 1.0 and base.score == 0.0
        with lock:
            print(f"{'ok ' if ok else 'BAD'} {task.id} gold={gold.score} base={base.score} "
                  f"{time.monotonic() - started:.0f}s {(gold.reason or base.reason or '')[:240]}",
                  flush=True)
            if gold.infra_error or base.infra_error:
                failed.append(task.id)
            elif not ok:
                refused.append({"id": task.id, "gold": gold.score, "base": base.score,
                                "reason": gold.reason or base.reason or ""})

    try:
        with ThreadPoolExecutor(args.workers) as workers:
            list(workers.map(check, tasks))
    finally:
        pool.close()
    if args.write and refused:
        with refused_path().open("a", encoding="utf-8") as out:
            for row in refused:
                out.write(json.dumps(row, sort_keys=True) + "\n")
    print(f"{len(refused)} of {len(tasks)} tasks refused", flush=True)
    if failed:
        raise SystemExit(f"{len(failed)} task(s) got no verdict (infra errors), not listed: "
                         + ", ".join(sorted(failed)))


if __name__ == "__main__":
    main()
