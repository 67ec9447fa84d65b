"""Synthesis yield and cost of the `repo` suite, per library (issue 25, point 2 and proof).

From the synthesis progress log and the committed manifest: mutations tried and kept, the
reasons the others were dropped, FAIL_TO_PASS / PASS_TO_PASS per task, and validation wall
time per tried mutation (1 full suite run + 2 runs of the scored tests, in the sandbox image).
With `--grade N`: for N tasks per library, `Grader.grade` of the gold fix against plain
`python3 -m pytest` on the same test ids in a sandbox of the same image (files placed first),
both timed as the whole call.

    python benchmarks/synthesis.py [--grade 2]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections import Counter, defaultdict

from opd_gym.tasks.libraries import sdist_cache
from opd_gym.tasks.repo_suite import _progress_path, load_repo_suite, manifest_path, sample
from opd_gym.tasks.synth import read_manifest, run_suite


def yield_table() -> None:
    data = read_manifest(manifest_path())
    kept_in_suite = Counter(r["project"] for r in data["tasks"])
    rows: dict[str, list[dict]] = defaultdict(list)
    progress = _progress_path()
    if progress.exists():
        for line in progress.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            rows[row["project"]].append(row)
    print(f"progress log: {progress} (sdists: {sdist_cache()})")
    print(f"{'library':<15} {'tried':>5} {'kept':>5} {'suite':>5} {'yield':>6} "
          f"{'F2P/task':>9} {'P2P/task':>9} {'valid s/try':>11}  dropped because")
    for name in sorted(set(rows) | set(kept_in_suite)):
        tried = rows.get(name, [])
        kept = [r for r in tried if r.get("kept")]
        tasks = [r for r in data["tasks"] if r["project"] == name]
        f2p = statistics.mean(len(r["fail_to_pass"]) for r in tasks) if tasks else 0
        p2p = statistics.mean(len(r["pass_to_pass"]) for r in tasks) if tasks else 0
        wall = statistics.mean(r["wall"] for r in tried) if tried else 0
        why = Counter(r["reason"] for r in tried if not r.get("kept"))
        share = f"{len(kept) / len(tried):.0%}" if tried else "-"
        print(f"{name:<15} {len(tried):>5} {len(kept):>5} {kept_in_suite[name]:>5} "
              f"{share:>6} {f2p:>9.1f} {p2p:>9.1f} {wall:>11.1f}  "
              f"{', '.join(f'{k}: {v}' for k, v in why.most_common()) or '-'}")
    print(f"suite: {len(data['tasks'])} tasks")


def grading_table(per_library: int) -> None:
    from opd_gym.grading import Grader
    from opd_gym.sandboxes import make_pool

    tasks = sample(load_repo_suite(), per_library)
    pool = make_pool("docker", size=2)
    grader = Grader(pool)
    print(f"{'task':<28} {'grade s':>8} {'plain s':>8} {'ratio':>6}  verdict")
    try:
        for task in tasks:
            fixed = {p: t.encode() for p, t in {**task.files, **task.solution}.items()}
            grader.calibration(task)  # once per task, as a Grader does; not timed below
            started = time.perf_counter()
            report = grader.grade(task, fixed)
            graded = time.perf_counter() - started
            sandbox = pool.acquire()
            try:
                sandbox.write_files({**fixed, **{p: t.encode() for p, t in task.tests.items()},
                                     "pytest.ini": (task.pytest_ini or "").encode()})
                started = time.perf_counter()
                plain = run_suite(sandbox, list(task.test_ids or ()))
                plain_s = time.perf_counter() - started
            finally:
                pool.release(sandbox)
            passed = sum(o == "passed" for o in plain.outcomes.values())
            verdict = f"score={report.score:.2f} plain passed {passed}/" \
                      f"{len(task.test_ids or ())} {report.reason[:60]}"
            print(f"{task.id:<28} {graded:>8.2f} {plain_s:>8.2f} {graded / plain_s:>6.2f}  "
                  f"{verdict}")
    finally:
        pool.close()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--grade", type=int, default=0, help="tasks per library to grade")
    args = parser.parse_args()
    yield_table()
    if args.grade:
        grading_table(args.grade)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
