"""How often a synthesized bug in an unseen library yields a task the grader can vouch for
(issue 55, point 6): per library, mutants are drawn in schedule order, each mutant's whole
suite runs under plain pytest in the sandbox image, and the ones that fail some test that
passes on the original (FAIL_TO_PASS) become tasks whose reference is the original module.
Each such task is calibrated by a real `Grader` (docker), and the table prints the share of
mutants that fail a test, the share of those whose task is verifiable (some FAIL_TO_PASS test
earns: `Calibration.earning`), the share of their failing tests that earn, and the rules that
decided the others (`opd_gym.grading.rules`). No static canary filter runs first: this is the
survivorship the repository suite hides.

The libraries default to the pinned fidelity libraries the repository suite does not use
that no task of the repository suite's manifest mutates, from the setup cache.

    python benchmarks/verifiability.py [--mutants 8] [--libraries cachetools,semver]
"""

from __future__ import annotations

import argparse
import time
from collections import Counter

from opd_gym.authoring.synth import (
    Mutation,
    baseline,
    build_task,
    find_mutations,
    project_from_library,
    read_manifest,
    run_suite,
    schedule,
    suite_files,
)
from opd_gym.errors import DatasetError
from opd_gym.grading import Grader
from opd_gym.sandboxes import make_pool
from opd_gym.tasks.libraries import LIBRARIES, SCALE_LIBRARIES, library
from opd_gym.tasks.repo_suite import manifest_path


def unseen_libraries() -> list[str]:
    """The pinned libraries no task of the repository suite's manifest mutates."""
    used = {task["project"] for task in read_manifest(manifest_path())["tasks"]}
    return [lib.name for lib in (*LIBRARIES, *SCALE_LIBRARIES) if lib.name not in used]


def failing_ids(project, base, mutation: Mutation, pool) -> list[str]:
    """The ids passing on the original that the mutant's whole suite does not pass."""
    sandbox = pool.acquire()
    try:
        files = suite_files(project)
        files[mutation.path] = mutation.apply(
            project.workspace[mutation.path].decode()).encode()
        sandbox.write_files(files)
        run = run_suite(sandbox, timeout=base.timeout)
    finally:
        pool.release(sandbox)
    if run.timed_out or run.collect_errors or not run.outcomes:
        return []
    return sorted(i for i in base.passing if run.outcomes.get(i, "missing") != "passed")


def measure(name: str, mutants: int, seed: int, pool, grader: Grader) -> dict:
    project = project_from_library(library(name))
    base = baseline(project, pool, runs=2)
    drawn = schedule(find_mutations(project), seed)[:mutants]
    failing_mutants = verifiable = f2p_total = f2p_earning = 0
    rules: Counter[str] = Counter()
    for mutation in drawn:
        failing = failing_ids(project, base, mutation, pool)
        if not failing:
            continue
        failing_mutants += 1
        passing = sorted(set(base.passing) - set(failing))
        record = {"mutation": mutation.record(), "statement": "(benchmark)",
                  "fail_to_pass": failing, "pass_to_pass": passing}
        task = build_task(project, record)
        try:
            calibration = grader.calibration(task)
        except Exception as exc:  # noqa: BLE001 - a failed calibration is a row of its own
            rules[f"calibration failed ({type(exc).__name__})"] += len(failing)
            f2p_total += len(failing)
            continue
        earning = [i for i in failing if calibration.earns(i)]
        f2p_total += len(failing)
        f2p_earning += len(earning)
        verifiable += bool(earning)
        rules.update(calibration.rule(i).name for i in failing if i not in earning)
    return {"library": name, "drawn": len(drawn), "failing": failing_mutants,
            "verifiable": verifiable, "f2p": f2p_total, "earning": f2p_earning,
            "rules": rules}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mutants", type=int, default=8, help="mutants drawn per library")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--libraries", help="comma-separated (default: the unseen ones)")
    args = parser.parse_args()
    names = args.libraries.split(",") if args.libraries else unseen_libraries()
    started = time.perf_counter()
    rows = []
    with make_pool("docker", size=2) as pool:
        grader = Grader(pool)
        for name in names:
            try:
                rows.append(measure(name, args.mutants, args.seed, pool, grader))
            except DatasetError as exc:  # the suite does not run as synthesis runs it
                print(f"[verifiability] {name}: no figure: {str(exc)[:300]}", flush=True)
                continue
            print(f"[verifiability] {name} done", flush=True)
    header = ("library", "mutants", "fail a test", "verifiable", "failing tests earning",
              "why the others do not earn")
    lines = [header]
    for r in rows:
        share = f"{r['verifiable']}/{r['failing']}" + (
            f" ({100 * r['verifiable'] / r['failing']:.0f}%)" if r["failing"] else "")
        earn = f"{r['earning']}/{r['f2p']}" + (
            f" ({100 * r['earning'] / r['f2p']:.0f}%)" if r["f2p"] else "")
        why = ", ".join(f"{k} {v}" for k, v in r["rules"].most_common(4)) or "-"
        lines.append((r["library"], str(r["drawn"]), str(r["failing"]), share, earn, why))
    widths = [max(len(row[i]) for row in lines) for i in range(len(header))]
    for n, row in enumerate(lines):
        print("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)))
        if n == 0:
            print("-" * (sum(widths) + 2 * (len(widths) - 1)))
    print(f"({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
