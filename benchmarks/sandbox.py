"""Sandbox speed, measured side by side in one run: persistent shell vs `docker exec`, warm
pool vs cold start, and many sandboxes at once. Prints a table; run on an idle machine.

    python benchmarks/sandbox.py [--n 300] [--parallel 16] [--commands 100]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

from opd_gym.sandboxes import make_pool, sandbox_factory
from opd_gym.sandboxes.docker import DockerEngine, DockerSandbox


def percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered) * 1e3, ordered[int(0.95 * (len(ordered) - 1))] * 1e3


def timed(fn, n: int) -> list[float]:
    out = []
    for _ in range(n):
        started = time.perf_counter()
        fn()
        out.append(time.perf_counter() - started)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=300, help="samples per latency row")
    parser.add_argument("--parallel", type=int, default=16, help="concurrent sandboxes")
    parser.add_argument("--commands", type=int, default=100, help="commands per sandbox")
    args = parser.parse_args()
    rows: list[tuple[str, str, str, str]] = []
    engine = DockerEngine()

    with DockerSandbox(engine=engine) as sb:
        sb.run("true")
        shell = timed(lambda: sb.run("echo hi"), args.n)
        cid = sb.container.id
        sdk = timed(lambda: sb.container.exec_run(["echo", "hi"]), max(args.n // 3, 20))
        cli_samples: list[float] = []
        if shutil.which("docker"):
            cli = ["docker", "exec", cid, "echo", "hi"]
            cli_samples = timed(lambda: subprocess.run(cli, capture_output=True), args.n // 3)
    p50_shell, p95_shell = percentiles(shell)
    rows.append(("echo hi: persistent shell", f"{p50_shell:.2f}", f"{p95_shell:.2f}", "1.0x"))
    p50, p95 = percentiles(sdk)
    rows.append(
        ("echo hi: docker exec (SDK)", f"{p50:.2f}", f"{p95:.2f}", f"{p50 / p50_shell:.1f}x")
    )
    if cli_samples:
        p50, p95 = percentiles(cli_samples)
        rows.append(
            ("echo hi: docker exec (CLI)", f"{p50:.2f}", f"{p95:.2f}", f"{p50 / p50_shell:.1f}x")
        )

    factory = sandbox_factory("docker")

    def cold() -> None:
        box = factory()
        box.start()
        box.close()

    cold_samples = timed(cold, 10)
    with make_pool("docker", size=2) as pool:
        pool.release(pool.acquire())
        warm_samples = []
        for _ in range(20):
            time.sleep(0.6)  # let the pool refill, as it does between episodes
            started = time.perf_counter()
            box = pool.acquire()
            warm_samples.append(time.perf_counter() - started)
            pool.release(box)
    p50_cold, p95_cold = percentiles(cold_samples)
    p50, p95 = percentiles(warm_samples)
    rows.append(("acquire: warm pool", f"{p50:.2f}", f"{p95:.2f}", "1.0x"))
    rows.append(
        ("acquire: cold start+stop", f"{p50_cold:.2f}", f"{p95_cold:.2f}", f"{p50_cold / p50:.0f}x")
    )

    errors = 0
    latencies: list[float] = []

    def worker(_: int) -> None:
        nonlocal errors
        with factory() as box:
            for i in range(args.commands):
                started = time.perf_counter()
                result = box.run(f"echo {i} > f && cat f")
                latencies.append(time.perf_counter() - started)
                if result.output.strip() != str(i):
                    errors += 1

    started = time.perf_counter()
    with ThreadPoolExecutor(args.parallel) as ex:
        for future in [ex.submit(worker, i) for i in range(args.parallel)]:
            try:
                future.result()
            except Exception:
                errors += args.commands
    wall = time.perf_counter() - started
    p50, p95 = percentiles(latencies)
    rows.append(
        (
            f"{args.parallel} sandboxes x {args.commands} cmds",
            f"{p50:.2f}",
            f"{p95:.2f}",
            f"wall {wall:.1f}s, errors {errors}",
        )
    )

    widths = [
        max(len(r[i]) for r in rows + [("case", "p50 ms", "p95 ms", "ratio")]) for i in range(4)
    ]
    header = ("case", "p50 ms", "p95 ms", "ratio / note")
    print(" | ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)))
    print("-|-".join("-" * w for w in widths))
    for row in rows:
        print(" | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)))


if __name__ == "__main__":
    main()
