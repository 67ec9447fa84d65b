"""How long loading the `repo` suite takes (issue 56, point 5): in a fresh process on a
machine that has never computed which tests can earn (`first on a machine`: an empty earning
cache beside a copy of setup's sdists), in a fresh process once that cache is on disk
(`fresh process`: what every run and test session pays), and again in the same process
(`cached`). Each figure is the median of `--runs` loads, side by side in one run.

    python benchmarks/suite_load.py [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from opd_gym.tasks.libraries import sdist_cache

PROBE = ("import time\nfrom opd_gym.tasks.repo_suite import load_repo_suite\n"
         "t = time.perf_counter(); n = len(load_repo_suite())\n"
         "first = time.perf_counter() - t\n"
         "t = time.perf_counter(); load_repo_suite(); again = time.perf_counter() - t\n"
         "print(n, first, again)\n")


def _load(sdists: Path) -> tuple[int, float, float]:
    env = {**os.environ, "OPD_GYM_SDISTS": str(sdists)}
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True,
                         text=True, check=True).stdout.split()
    return int(out[0]), float(out[1]), float(out[2])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    cold, warm, cached = [], [], []
    count = 0
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="opd-suite-load-") as tmp:
            sdists = Path(tmp) / "sdists"
            shutil.copytree(sdist_cache(), sdists)
            count, first, _ = _load(sdists)  # the earning cache is made here
            cold.append(first)
            count, first, again = _load(sdists)
            warm.append(first)
            cached.append(again)
    rows = [("first on a machine", cold), ("fresh process", warm), ("cached", cached)]
    print(f"repo suite: {count} tasks, median of {args.runs} run(s)")
    print(f"{'load':<20} {'seconds':>8} {'x fresh':>8}")
    base = statistics.median(warm)
    for name, values in rows:
        median = statistics.median(values)
        print(f"{name:<20} {median:>8.2f} {median / base:>8.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
