"""`opd-gym tasks synth SOURCE`: synthesis from the command line, with a progress bar, on the
threads of this process or on Ray actors (kept apart from `synth` so that the Ray backend,
which builds on `synth`, is not imported by it)."""

from __future__ import annotations

import time
from pathlib import Path

from opd_gym.authoring.synth import Progress, Verdict, resolve_project, synthesize, write_manifest
from opd_gym.errors import DatasetError


def synth_command(source: str, output: str | None, max_tasks: int, seed: int,
                  sandbox: str = "docker", workers: int = 2,
                  max_tries: int | None = None, ray: bool = False,
                  address: str | None = None) -> int:
    """`opd-gym tasks synth SOURCE`: validated tasks into a manifest, with a progress bar;
    `workers` validations at once, threads here or (`ray`, `address`) Ray actors."""
    import sys

    if max_tasks < 1:
        print("opd-gym tasks synth: --max must be at least 1", file=sys.stderr)
        return 2
    try:
        project = resolve_project(source)
    except DatasetError as exc:
        print(f"opd-gym tasks synth: {exc}", file=sys.stderr)
        return 2
    out = Path(output or f"{project.name}-synth.json")
    progress = Progress(out.with_name(out.name + ".progress.jsonl"))
    from tqdm import tqdm

    from opd_gym.sandboxes import make_pool

    bar = tqdm(total=max_tasks, unit="task", desc=f"{project.name}: kept", dynamic_ncols=True)
    tried = [0]

    def tick(verdict: Verdict | None) -> None:
        tried[0] += 1
        if verdict is not None and verdict.kept and bar.n < max_tasks:
            bar.update(1)  # a worker may keep one more after the last needed: never past max
        bar.set_postfix(tried=tried[0])

    started = time.perf_counter()
    from opd_gym.authoring.synth_workers import make_validators

    distributed = ray or address is not None
    try:  # with Ray the local pool only runs the baseline; the actors bring their own
        pool = make_pool(sandbox, size=1 if distributed else max(workers, 1))
        validators = make_validators(pool, workers, ray, address, sandbox)
    except Exception as exc:
        print(f"opd-gym tasks synth: no sandbox or no Ray cluster: {exc}", file=sys.stderr)
        return 2
    try:
        records = synthesize(project, pool, progress, max_tasks, seed, max_tries, workers,
                             on_verdict=tick, validators=validators)
    except DatasetError as exc:
        print(f"opd-gym tasks synth: {exc}", file=sys.stderr)
        return 2
    finally:
        validators.close()
        pool.close()
        bar.close()
    rows = progress.of(project.name)
    write_manifest(out, project, records, {"tried": len(rows),
                                           "kept": sum(bool(r.get("kept")) for r in rows),
                                           "seed": seed})
    print(f"{len(records)} task(s) from {len(rows)} mutation(s) tried in "
          f"{time.perf_counter() - started:.0f} s -> {out}")
    return 0 if records else 1
