"""Episodes/minute: the local runner vs Ray with 1, 2 and 4 workers, side by side in one run.

Demo policy, rule judge, tiny teacher; `--sandbox docker` (default local). Ray's time
excludes cluster start (one cluster for all rows) but includes actor start-up; the
scheduling overhead is the driver's time handing out and collecting episodes, per episode.

    python benchmarks/ray_rollout.py --episodes 8 --sandbox docker
"""

from __future__ import annotations

import argparse
import tempfile
import time
import warnings
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--episodes", type=int, default=8)
    parser.add_argument("--sandbox", default="local")
    parser.add_argument("--workers", default="1,2,4")
    parser.add_argument("--episodes-per-worker", type=int, default=2)
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    import ray

    from opd_gym.agents.policies import make_agent_factory
    from opd_gym.distributed import RayOptions, RayRollout
    from opd_gym.rollout import RolloutConfig, run_rollout
    from opd_gym.tasks import load_suite

    agent = make_agent_factory("demo", load_suite())
    out = Path(tempfile.mkdtemp(prefix="ray-bench-"))

    def config(name: str, parallel: int = 1) -> RolloutConfig:
        return RolloutConfig(out_dir=str(out / name), episodes=args.episodes,
                             sandbox=args.sandbox, parallel=parallel, max_turns=6)

    rows = []
    started = time.perf_counter()
    run_rollout(config("local"), agent, teacher="tiny", judge="rule", progress=False)
    rows.append(("local (1 thread)", time.perf_counter() - started, None))
    workers = [int(w) for w in args.workers.split(",")]
    ray.init(num_cpus=max(workers) + 1, include_dashboard=False, log_to_driver=False)
    try:
        for n in workers:
            options = RayOptions(workers=n, episodes_per_worker=args.episodes_per_worker)
            started = time.perf_counter()
            with RayRollout(config(f"ray{n}"), agent, teacher="tiny", judge="rule",
                            options=options) as rollout:
                rollout.record(progress=False)
                overhead = rollout.stats.schedule_seconds / max(rollout.stats.submitted, 1)
            rows.append((f"ray, {n} worker(s) x {args.episodes_per_worker}",
                         time.perf_counter() - started, overhead))
    finally:
        ray.shutdown()
    print(f"{'runner':<26} {'seconds':>8} {'episodes/min':>13} {'sched. ms/ep':>13}")
    for name, seconds, overhead in rows:
        sched = "-" if overhead is None else f"{overhead * 1000:.2f}"
        print(f"{name:<26} {seconds:>8.1f} {args.episodes * 60 / seconds:>13.1f} {sched:>13}")


if __name__ == "__main__":
    main()
