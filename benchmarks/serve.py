"""The price of serving (issue 32, point 5): one step's latency in process vs over the
OpenEnv server (loopback WebSocket, openenv-core's client), and episodes per minute with
1, 8 and 32 concurrent clients, side by side in one run. Docker sandboxes, the built-in
`coding` suite, the scripted demo policy (no model: what is measured is the env and the
server). Each task is calibrated once in a warm-up episode, outside the timings.

    python benchmarks/serve.py [--steps 40] [--clients 1,8,32] [--episodes 32]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time

from openenv.core.generic_client import GenericEnvClient

from opd_gym.agents.demo import demo_script
from opd_gym.rollout_core import build_env
from opd_gym.runs.config import RolloutConfig
from opd_gym.serve import ServeConfig, ServerThread
from opd_gym.tools.parsing import format_tool_call

CHEAP = format_tool_call("terminal", {"command": "echo ok"})


def stats(seconds: list[float]) -> str:
    """mean / p50 / p95 in milliseconds."""
    ordered = sorted(seconds)
    p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
    return (f"{1000 * statistics.mean(ordered):8.1f} {1000 * statistics.median(ordered):8.1f} "
            f"{1000 * p95:8.1f}")


def in_process_steps(server: ServerThread, task_id: str, steps: int) -> list[float]:
    """Step latencies of the same env stack the server builds, called directly."""
    runtime = server.runtime
    recorder = build_env(RolloutConfig(out_dir=tempfile.mkdtemp(), opd=False, max_turns=10**6),
                         tasks=runtime.tasks, pool=runtime.pool, grader=runtime.grader)
    try:
        recorder.reset(seed=0, options={"task_id": task_id})
        timings = []
        for _ in range(steps):
            start = time.perf_counter()
            recorder.step(CHEAP)
            timings.append(time.perf_counter() - start)
        return timings
    finally:
        recorder.close()


async def served_steps(url: str, task_id: str, steps: int) -> list[float]:
    """Step latencies over the wire (the client's round trip)."""
    async with GenericEnvClient(base_url=url) as client:
        await client.reset(seed=0, task_id=task_id)
        timings = []
        for _ in range(steps):
            start = time.perf_counter()
            await client.step({"text": CHEAP})
            timings.append(time.perf_counter() - start)
        return timings


async def play(url: str, task, seed: int) -> float:
    """One demo episode over the wire; its reward."""
    async with GenericEnvClient(base_url=url, message_timeout_s=600) as client:
        await client.reset(seed=seed, task_id=task.id)
        for output in demo_script(task):
            result = await client.step({"text": output})
            if result.done:
                return float(result.reward or 0.0)
    return 0.0


async def throughput(url: str, task, clients: int, episodes: int) -> tuple[float, float]:
    """(episodes per minute, mean reward) with `clients` clients sharing `episodes`."""
    queue = list(range(episodes))
    rewards: list[float] = []

    async def client() -> None:
        while queue:
            rewards.append(await play(url, task, queue.pop()))

    start = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    return 60 * len(rewards) / (time.perf_counter() - start), statistics.mean(rewards)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40, help="steps per latency sample")
    parser.add_argument("--clients", default="1,8,32", help="concurrency levels")
    parser.add_argument("--episodes", type=int, default=32,
                        help="episodes per level (at least one per client)")
    parser.add_argument("--pool-size", type=int, default=8)
    args = parser.parse_args()
    levels = [int(n) for n in args.clients.split(",")]
    config = ServeConfig(port=0, out_dir=tempfile.mkdtemp(prefix="opd-serve-bench-"),
                         max_sessions=max(levels) + 1, pool_size=args.pool_size,
                         max_turns=10**6)
    with ServerThread(config) as server:
        task = next(t for t in server.runtime.tasks if t.solution)
        asyncio.run(play(server.url, task, 0))  # warm-up: calibrates the task
        local = in_process_steps(server, task.id, args.steps)
        remote = asyncio.run(served_steps(server.url, task.id, args.steps))
        print(f"step latency, terminal 'echo ok', {args.steps} steps (ms)")
        print(f"{'':14} {'mean':>8} {'p50':>8} {'p95':>8}")
        print(f"{'in process':14} {stats(local)}")
        print(f"{'over server':14} {stats(remote)}")
        print(f"{'overhead':14} {1000 * (statistics.mean(remote) - statistics.mean(local)):8.1f}")
        print(f"\ndemo episodes ({task.id}, graded), {args.episodes} per level")
        print(f"{'clients':>7} {'episodes/min':>13} {'mean reward':>12}")
        for clients in levels:
            rate, reward = asyncio.run(throughput(server.url, task, clients,
                                                  max(args.episodes, clients)))
            print(f"{clients:7d} {rate:13.1f} {reward:12.2f}")


if __name__ == "__main__":
    main()
