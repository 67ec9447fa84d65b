"""CodingEnv speed: env overhead per step beyond the sandbox call, reset with a warm pool, and
episodes per minute with 1, 4 and 8 envs in parallel on a fixed scripted workload.

    python benchmarks/env.py [--backend docker] [--episodes 15] [--resets 15] [--total 24]

Overhead is a step's wall time minus the time spent inside the sandbox's own calls (run,
read_file, write_file), measured on 15-turn episodes so the transcript grows as in practice;
the grading step is excluded (it is a sandbox run). The throughput rows split one fixed
workload (`--total` reference episodes over 8 built-in tasks) across 1, 4 or 8 envs on
threads, each env with its own warm pool; every episode uses two sandboxes (agent, grading),
so sandbox start-up bounds the rate. Run on an idle machine.
"""

from __future__ import annotations

import argparse
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from itertools import cycle

from opd_gym import CodingEnv
from opd_gym.agents import ReferenceAgent, run_episode
from opd_gym.sandboxes import SandboxPool, make_pool
from opd_gym.tasks import load_suite
from opd_gym.tools import format_tool_call

WORKLOAD = ["fizzbuzz", "two_sum", "bank_account", "geometry_package", "fix_leap_year",
            "rle_codec", "word_frequency_stdio", "mystery_checksum"]
SANDBOX_CALLS = ("run", "read_file", "write_file")


def settle(backend: str, timeout: float = 30.0) -> None:
    """Wait until the containers of the previous phase are gone, so phases do not overlap."""
    if backend != "docker":
        return
    from opd_gym.sandboxes.docker import LABEL, DockerEngine

    engine = DockerEngine()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with engine.call() as client:
            if not client.containers.list(all=True, sparse=True, filters={"label": LABEL}):
                return
        time.sleep(0.2)


def warm_pool(backend: str, size: int = 2) -> SandboxPool:
    """A warm pool for one env."""
    return make_pool(backend, size=size)


def p50_p95(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered) * 1e3, ordered[int(0.95 * (len(ordered) - 1))] * 1e3


class SandboxClock:
    """Times the sandbox calls of the env's current sandbox (instance-level wrappers)."""

    def __init__(self) -> None:
        self.spent = 0.0

    def attach(self, sandbox) -> None:
        for name in SANDBOX_CALLS:
            original = getattr(sandbox, name)

            def timed(*args, _original=original, **kwargs):
                started = time.perf_counter()
                try:
                    return _original(*args, **kwargs)
                finally:
                    self.spent += time.perf_counter() - started

            setattr(sandbox, name, timed)


def step_overhead(backend: str, episodes: int) -> dict[str, list[float]]:
    """Overhead samples (s) per kind of step: terminal, write_file, read_file, format error."""
    kinds = {
        "terminal": format_tool_call("terminal", {"command": "true"}),
        "write_file": format_tool_call("write_file", {"path": "s.py", "content": "x = 1\n" * 40}),
        "read_file": format_tool_call("read_file", {"path": "s.py"}),
        "format error": "I am thinking about it without calling a tool.",
    }
    samples: dict[str, list[float]] = {kind: [] for kind in kinds}
    pool = warm_pool(backend)
    env = CodingEnv(tasks=["fizzbuzz"], sandbox=pool, max_turns=15, max_format_errors=100)
    clock = SandboxClock()
    try:
        for _ in range(episodes):
            env.reset()
            clock.attach(env.sandbox)
            plan = cycle(kinds.items())
            for _ in range(env.max_turns - 1):  # the last turn would grade: not env overhead
                kind, text = next(plan)
                clock.spent = 0.0
                started = time.perf_counter()
                env.step(text)
                samples[kind].append(time.perf_counter() - started - clock.spent)
    finally:
        env.close()
        pool.close()
    return samples


def reset_latency(backend: str, n: int) -> list[float]:
    pool = warm_pool(backend)
    env = CodingEnv(tasks="coding", sandbox=pool)
    samples = []
    try:
        env.reset()
        for i in range(n):
            time.sleep(1.5)  # the pool refills in the background, as during a real episode
            started = time.perf_counter()
            env.reset(seed=i)
            samples.append(time.perf_counter() - started)
    finally:
        env.close()
        pool.close()
    return samples


def throughput(backend: str, parallel: int, total: int) -> tuple[int, float]:
    """(episodes, seconds) for `parallel` envs sharing `total` reference episodes."""
    tasks = load_suite("coding")
    pools = [warm_pool(backend) for _ in range(parallel)]
    envs = [CodingEnv(tasks=WORKLOAD, sandbox=pool) for pool in pools]
    jobs = [WORKLOAD[k % len(WORKLOAD)] for k in range(total)]

    def work(index: int) -> int:
        env, agent = envs[index], ReferenceAgent(tasks)
        mine = jobs[index::parallel]
        for task_id in mine:
            result = run_episode(env, agent, options={"task_id": task_id})
            assert result["info"]["reward_breakdown"]["correctness"] == 1.0, task_id
        return len(mine)

    try:
        time.sleep(2.0)  # let the pools fill: measure episodes, not first-time setup
        started = time.perf_counter()
        with ThreadPoolExecutor(parallel) as pool:
            done = sum(pool.map(work, range(parallel)))
        return done, time.perf_counter() - started
    finally:
        for env, pool in zip(envs, pools, strict=True):
            env.close()
            pool.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--backend", default="docker", help="docker, bwrap, local or auto")
    parser.add_argument("--episodes", type=int, default=15, help="episodes for the overhead rows")
    parser.add_argument("--resets", type=int, default=15, help="samples for the reset row")
    parser.add_argument("--total", type=int, default=24, help="episodes per throughput row")
    args = parser.parse_args()

    rows: list[tuple[str, str, str, str]] = []
    settle(args.backend)
    for kind, samples in step_overhead(args.backend, args.episodes).items():
        p50, p95 = p50_p95(samples)
        target = "<= 1 ms p50" if kind == "terminal" else ""
        rows.append((f"env overhead per step: {kind}", f"{p50:.3f} ms", f"{p95:.3f} ms", target))
    settle(args.backend)
    p50, p95 = p50_p95(reset_latency(args.backend, args.resets))
    rows.append(("reset, warm pool", f"{p50:.1f} ms", f"{p95:.1f} ms", "<= 100 ms p50"))
    for parallel in (1, 4, 8):
        settle(args.backend)
        episodes, seconds = throughput(args.backend, parallel, args.total)
        rows.append((f"episodes/minute, {parallel} env{'s' if parallel > 1 else ''}",
                     f"{episodes / seconds * 60:.1f}", f"{episodes} in {seconds:.1f} s", ""))

    header = ("what", "p50 / rate", "p95 / detail", "target")
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(4)]
    print(f"CodingEnv benchmark, backend={args.backend}, workload: reference agent on "
          f"{len(WORKLOAD)} built-in tasks (write files, run a check, submit, grade)\n")
    for row in [header, *rows]:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)))


if __name__ == "__main__":
    main()
