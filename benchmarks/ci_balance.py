"""How evenly the test command's xdist workers share the suite, from a run's `--durations=0`
output: seconds per scheduling unit (a file, or tests/conftest.py's one unit for the vllm and
ray files), the heaviest units, and the makespan of two orders the units could go out in,
simulated side by side on the same durations against the lower bound (the larger of total
seconds over workers and the heaviest unit).

    .venv/bin/python -m pytest -n 2 --dist loadfile --durations=0 > run.log
    python benchmarks/ci_balance.py run.log [--workers 2]

pytest-xdist hands out the files with the most tests first; "heaviest first" is
longest-processing-time-first. When both sit at the lower bound, the suite's wall time is its
total work over the workers, and only less work shortens it.
"""

from __future__ import annotations

import argparse
import heapq
import importlib.util
import re
from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent / "tests"
LINE = re.compile(r"^\s*([0-9.]+)s (setup|call|teardown)\s+(\S+)")


def unit_of():
    """tests/conftest.py's rule for a node id's scheduling unit: its file, or one unit for all
    the files of ONE_WORKER (vllm and ray tests share a worker)."""
    spec = importlib.util.spec_from_file_location("_suite_conftest", TESTS / "conftest.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    one_worker = tuple(module.ONE_WORKER)

    def unit(nodeid: str) -> str:
        path = nodeid.split("::", 1)[0]
        return "vllm-ray" if path.startswith(one_worker) else path

    return unit


def parse(log: Path) -> tuple[Counter[str], Counter[str]]:
    """(seconds, tests) per unit from the durations lines of a pytest log."""
    unit = unit_of()
    seconds: Counter[str] = Counter()
    tests: Counter[str] = Counter()
    for line in log.read_text(errors="replace").splitlines():
        match = LINE.match(line)
        if match:
            value, phase, nodeid = float(match[1]), match[2], match[3]
            seconds[unit(nodeid)] += value
            tests[unit(nodeid)] += phase == "call"
    if not seconds:
        raise SystemExit(f"{log}: no durations lines (run pytest with --durations=0)")
    return seconds, tests


def makespan(order: list[str], seconds: Counter[str], workers: int) -> float:
    """Greedy list scheduling: each unit in turn goes to the worker that frees up first."""
    free = [0.0] * workers
    for unit in order:
        heapq.heappush(free, heapq.heappop(free) + seconds[unit])
    return max(free)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("log", type=Path)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    seconds, tests = parse(args.log)
    by_count = sorted(seconds, key=lambda u: -tests[u])  # pytest-xdist's loadscope reorder
    by_weight = sorted(seconds, key=lambda u: -seconds[u])
    total = sum(seconds.values())
    ideal = max(total / args.workers, max(seconds.values()))
    rows = [("xdist default (most tests first)", makespan(by_count, seconds, args.workers)),
            ("heaviest first", makespan(by_weight, seconds, args.workers))]
    print(f"{len(seconds)} units, {sum(tests.values())} tests, {total:.0f} s of test time, "
          f"{args.workers} workers; lower bound {ideal:.0f} s")
    print(f"| {'order':40} | makespan s | x lower bound |")
    print(f"|{'-' * 42}|-----------:|--------------:|")
    for name, span in rows:
        print(f"| {name:40} | {span:10.0f} | {span / ideal:13.2f} |")
    print("\nheaviest units:")
    for unit in by_weight[:12]:
        print(f"  {seconds[unit]:7.1f} s  {tests[unit]:4} tests  {unit}")


if __name__ == "__main__":
    main()
