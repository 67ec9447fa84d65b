"""Synthesis yield and cost of the `repo` suite, per library (issue 25, point 2 and proof).

From the synthesis progress log and the committed manifest: mutations tried and kept, the
reasons the others were dropped, FAIL_TO_PASS / PASS_TO_PASS per task, and validation wall
time per tried mutation (1 full suite run + 2 runs of the scored tests, in the sandbox image);
per library, the statements that pass `statement_problems`, the kind of behaviour they report
(a wrong value, an exception, a missing exception, other) and how many snippets call the
changed function itself (allowed there, never in prose: opd_gym/authoring/statements.py).
Then the mix of mutation kinds per library (issue 30, point 4: the greppable share, kinds
`GREPPABLE`, stays under 15%) and the recorded difficulty (lines changed, FAIL_TO_PASS count,
tests failing on the mutant). With `--grade N`: for N tasks per library, `Grader.grade` of the
gold fix against plain `python3 -m pytest` on the same test ids (PASS_TO_PASS is every passing
test) and on the whole suite with no ids, in a sandbox of the same image (files placed
first), each timed as the whole call. With `--env N`: per library, an environment image built from
scratch (one setup step unpacking the library's sdist from the setup cache into the image,
the shape of a dependency install), its build time and the disk it adds; then, through
`CodingEnv` on N tasks, the first reset of a task in that image (its pool and workspace cold)
and the median of later resets (warm pool, cached workspace).

    python benchmarks/synthesis.py [--grade 2] [--env 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections import Counter, defaultdict

from opd_gym.authoring.repo_suite import _progress_path
from opd_gym.authoring.statements import calls_changed_function
from opd_gym.authoring.synth import (
    GREPPABLE,
    Mutation,
    check_statement,
    kind_group,
    read_manifest,
    run_suite,
)
from opd_gym.tasks.libraries import sdist_cache
from opd_gym.tasks.repo_suite import load_repo_suite, manifest_path, sample


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


def kinds_table() -> None:
    """Per library: tasks per kind, the greppable share and the recorded difficulty."""
    data = read_manifest(manifest_path())
    by_lib: dict[str, list[dict]] = defaultdict(list)
    for record in data["tasks"]:
        by_lib[record["project"]].append(record)
    everyone = [r for records in by_lib.values() for r in records]
    print(f"{'library':<15} {'tasks':>5} {'grep%':>6} {'lines':>6} {'F2P':>5} {'failing':>8} "
          f"{'valid s':>8}  kinds")
    for name, records in sorted(by_lib.items()) + [("all", everyone)]:
        kinds = Counter(kind_group(r["mutation"]["kind"]) for r in records)
        grep = sum(kinds[k] for k in GREPPABLE) / len(records)
        diff = [r.get("difficulty") or {} for r in records]
        lines = statistics.mean(d.get("lines_changed") or Mutation(**r["mutation"]).lines_changed
                                for d, r in zip(diff, records, strict=True))
        f2p = statistics.mean(len(r["fail_to_pass"]) for r in records)
        failing = statistics.mean(d.get("tests_failing", r.get("failures", 0))
                                  for d, r in zip(diff, records, strict=True))
        wall = data["projects"].get(name, {}).get("validation_s", "")
        print(f"{name:<15} {len(records):>5} {grep:>6.0%} {lines:>6.1f} {f2p:>5.1f} "
              f"{failing:>8.1f} {wall!s:>8}  "
              f"{', '.join(f'{k}: {v}' for k, v in kinds.most_common())}")


def statement_table() -> None:
    from opd_gym.tasks.repo_suite import _project

    data = read_manifest(manifest_path())
    print(f"{'library':<15} {'tasks':>5} {'pass':>5} {'value':>6} {'raises':>7} "
          f"{'no-raise':>9} {'other':>6} {'public call':>12}")
    by_lib: dict[str, list[dict]] = defaultdict(list)
    for record in data["tasks"]:
        by_lib[record["project"]].append(record)
    for name, records in sorted(by_lib.items()):
        project = _project(name)
        kinds: Counter[str] = Counter()
        passing = public = 0
        for record in records:
            mutation = Mutation(**record["mutation"])
            text = record["statement"]
            passing += not check_statement(project, mutation, text,
                                           record["fail_to_pass"] + record["pass_to_pass"])
            public += calls_changed_function(text, mutation.function)
            observed = text.split("```")[-1]
            kinds["value" if "It returns" in observed.split("\n")[2] else
                  "raises" if "` is raised" in observed.split("\n")[2] else
                  "no-raise" if "No exception is raised" in observed else "other"] += 1
        print(f"{name:<15} {len(records):>5} {passing:>5} {kinds['value']:>6} "
              f"{kinds['raises']:>7} {kinds['no-raise']:>9} {kinds['other']:>6} {public:>12}")


def grading_table(per_library: int) -> None:
    from opd_gym.grading import Grader
    from opd_gym.sandboxes import make_pool

    tasks = sample(load_repo_suite(), per_library)
    pool = make_pool("docker", size=2)
    grader = Grader(pool)
    print(f"{'task':<28} {'ids':>5} {'grade s':>8} {'plain s':>8} {'full s':>7} {'ratio':>6}"
          "  verdict")
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
                started = time.perf_counter()
                run_suite(sandbox)  # the whole suite, no ids: what a user would run
                full_s = time.perf_counter() - started
            finally:
                pool.release(sandbox)
            passed = sum(o == "passed" for o in plain.outcomes.values())
            verdict = f"score={report.score:.2f} plain passed {passed}/" \
                      f"{len(task.test_ids or ())} {report.reason[:60]}"
            print(f"{task.id:<28} {len(task.test_ids or ()):>5} {graded:>8.2f} {plain_s:>8.2f} "
                  f"{full_s:>7.2f} {graded / full_s:>6.2f}  {verdict}")
    finally:
        pool.close()


def env_table(per_library: int) -> None:
    from dataclasses import replace

    from opd_gym import CodingEnv
    from opd_gym.sandboxes import make_pool
    from opd_gym.sandboxes.docker import DockerEngine
    from opd_gym.sandboxes.env_image import EnvironmentSpec, ImageCache
    from opd_gym.tasks.libraries import library, sdist_path

    engine = DockerEngine()
    cache = ImageCache(engine)
    by_lib: dict[str, list] = defaultdict(list)
    for task in sample(load_repo_suite(), per_library):
        by_lib[task.repo.name].append(task)
    print(f"{'library':<15} {'build s':>8} {'adds MiB':>9} {'first reset s':>14} "
          f"{'warm reset ms':>14} {'resets':>7}")
    for name, tasks in sorted(by_lib.items()):
        lib = library(name)
        sdist = sdist_path(lib).name
        marker = f"/opt/src-{name}-{time.time_ns()}"  # a fresh image: the build is timed
        spec = EnvironmentSpec(setup=(f"mkdir -p {marker} && tar -xzf /opd-cache/{sdist} "
                                      f"-C {marker}",), cache_dir=sdist_cache())
        report = cache.ensure(spec)
        assert report.built
        own = [replace(t, repo=replace(t.repo, setup=spec.setup)) for t in tasks]
        pool = make_pool("docker", size=2)
        env = CodingEnv(tasks=own, sandbox=pool)
        try:
            started = time.perf_counter()
            env.reset(seed=0, options={"task": own[0]})
            first = time.perf_counter() - started
            warm = []
            for i in range(1, 3 * len(own)):
                time.sleep(1.5)  # the pool refills while an episode plays
                started = time.perf_counter()
                env.reset(seed=i, options={"task": own[i % len(own)]})
                warm.append(time.perf_counter() - started)
        finally:
            env.close()
            pool.close()
            engine.client.images.remove(report.tag, force=True)
        print(f"{name:<15} {report.seconds:>8.2f} {report.size / 2**20:>9.1f} {first:>14.2f} "
              f"{statistics.median(warm) * 1000:>14.0f} {len(warm):>7}")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--grade", type=int, default=0, help="tasks per library to grade")
    parser.add_argument("--env", type=int, default=0,
                        help="tasks per library to reset in an environment image of their own")
    args = parser.parse_args()
    yield_table()
    kinds_table()
    statement_table()
    if args.grade:
        grading_table(args.grade)
    if args.env:
        env_table(args.env)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
