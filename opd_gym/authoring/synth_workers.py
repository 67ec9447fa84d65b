"""Synthesis on a Ray cluster: actors that validate mutants (threads of this process are
`synth.ThreadValidators`, the default).

`synthesize` (opd_gym/authoring/synth.py) hands mutations out in schedule order, at most
`slots` at a time, and records each verdict as it comes back; the backend only runs
`validate_mutation`. Each worker (a thread, or a Ray actor with its own sandbox pool) keeps
one `Bench` per project, a sandbox holding the original tree, so a mutant costs no container
start. A verdict of None means the machinery failed (a sandbox or an actor died): the
mutation is not logged and a later run tries it again.

Ray actors rebuild the project from its `source` record (a pinned library from setup's sdist
cache, an sdist or a folder by path), so every node of a cluster needs `scripts/setup.sh`'s
cache (or the path) and a Docker daemon with the sandbox image; nothing is fetched online.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from opd_gym.authoring.synth import (
    Baseline,
    Bench,
    Mutation,
    Project,
    ThreadValidators,
    Verdict,
    project_from_source,
    validate_mutation,
)
from opd_gym.sandboxes.base import SandboxError


class _Worker:
    """The body of one Ray actor: its own sandbox pool and one bench per project."""

    def __init__(self, sandbox: str) -> None:
        from opd_gym.sandboxes import make_pool

        self.pool = make_pool(sandbox, size=1)
        self.projects: dict[str, Project] = {}
        self.benches: dict[str, Bench] = {}

    def validate(self, source: Mapping[str, str], base: Baseline, mutation: Mutation
                 ) -> Verdict | None:
        """The verdict on one mutant (None: a sandbox failed, try it again later)."""
        key = json.dumps(dict(source), sort_keys=True)
        if key not in self.projects:
            self.projects[key] = project_from_source(source)
            self.benches[key] = Bench(self.projects[key], self.pool)
        bench = self.benches[key]
        try:
            return validate_mutation(self.projects[key], base, mutation, self.pool, 0, bench)
        except SandboxError:
            bench.close()
            return None

    def release(self, source: Mapping[str, str]) -> bool:
        """Give back the sandbox holding the project of `source`."""
        bench = self.benches.get(json.dumps(dict(source), sort_keys=True))
        if bench is not None:
            bench.close()
        return True

    def close(self) -> bool:
        """Give every sandbox back and close the pool."""
        for bench in self.benches.values():
            bench.close()
        self.pool.close()
        return True


class RayValidators:
    """`workers` Ray actors, one mutant each at a time, on a local cluster (started here and
    shut down on close) or the cluster at `address` ("auto", "host:port", "ray://...")."""

    def __init__(self, workers: int, address: str | None = None, sandbox: str = "docker",
                 worker_cpus: float = 1.0) -> None:
        import os

        import ray

        self.slots = max(workers, 1)
        self._started_ray = False
        if not ray.is_initialized():
            kwargs: dict[str, Any] = {"log_to_driver": False}
            if address is None:
                need = int(self.slots * worker_cpus + 0.999)
                kwargs.update(num_cpus=max(need, os.cpu_count() or 1), include_dashboard=False)
            else:
                kwargs["address"] = address
            ray.init(**kwargs)
            self._started_ray = True
        actor = ray.remote(num_cpus=worker_cpus, max_restarts=2)(_Worker)
        self._actors = [actor.remote(sandbox) for _ in range(self.slots)]
        self._idle = list(self._actors)
        self._busy: dict[Any, Any] = {}  # ObjectRef -> its actor

    def submit(self, project: Project, base: Baseline, mutation: Mutation) -> Any:
        actor = self._idle.pop()  # synthesize never has more than `slots` in flight
        ref = actor.validate.remote(dict(project.source), base, mutation)
        self._busy[ref] = actor
        return ref

    def wait(self, handles: Sequence[Any]) -> list[tuple[Any, Verdict | None]]:
        import ray

        done, _ = ray.wait(list(handles), num_returns=1)
        out = []
        for ref in done:
            self._idle.append(self._busy.pop(ref))
            try:
                out.append((ref, ray.get(ref)))
            except ray.exceptions.RayError:  # the actor died (Ray restarts it): retried later
                out.append((ref, None))
        return out

    def release(self, project: Project) -> None:
        import ray

        try:
            ray.get([a.release.remote(dict(project.source)) for a in self._actors],
                    timeout=120)
        except ray.exceptions.RayError:
            pass

    def close(self) -> None:
        import ray

        try:
            ray.get([a.close.remote() for a in self._actors], timeout=120)
        except ray.exceptions.RayError:
            pass
        for actor in self._actors:
            ray.kill(actor)
        self._actors, self._idle = [], []
        if self._started_ray:
            ray.shutdown()


def make_validators(pool: Any, workers: int, ray: bool = False, address: str | None = None,
                    sandbox: str = "docker") -> ThreadValidators | RayValidators:
    """Threads of this process sharing `pool`, or (`ray`) actors of a Ray cluster."""
    if ray or address is not None:
        return RayValidators(workers, address, sandbox)
    return ThreadValidators(pool, workers)
