"""ServeRuntime: what every session of one server shares (warm pool, grader, OPD teacher,
run directory) and the bookkeeping that lets shutdown close whatever is still open."""

from __future__ import annotations

import itertools
import threading
import time
from typing import Any

from opd_gym import specs
from opd_gym.grading import Grader
from opd_gym.records.policy import close as close_quietly
from opd_gym.records.rows import EpisodeRow
from opd_gym.rollout_core import RowSink, build_env, load_teacher, opd_config
from opd_gym.runs import RunDirectory, RunSummary
from opd_gym.runs.config import RolloutConfig, plain_config
from opd_gym.serve.config import ServeConfig
from opd_gym.tasks.resolve import resolve_tasks


class ServeRuntime:
    """Shared state of a server: sessions build their env stacks here and hand rows back."""

    def __init__(self, config: ServeConfig) -> None:
        self.config = config.check()
        self.rollout = RolloutConfig(
            out_dir=config.run_dir(), episodes=0, tasks=config.tasks, sandbox=config.sandbox,
            parallel=config.max_sessions, max_turns=config.max_turns, opd=config.opd,
            opd_options=dict(config.opd_options), tool_format=config.tool_format,
            max_tool_output_chars=config.max_tool_output_chars,
            verify_tasks=config.verify_tasks, skip_unverifiable=config.skip_unverifiable)
        self.tasks = resolve_tasks(config.tasks)
        self.task_ids = {task.id for task in self.tasks}
        self.run = RunDirectory(self.rollout.out_dir)
        self.run.open_for_run(resume=False)
        self.run.trajectories.touch()  # a served run with no episode yet is still a run
        self.run.write_config({**plain_config(self.rollout), "served": True})
        self.sink = RowSink(self.run)
        self._owned: list[Any] = []
        self.opd = None
        if config.opd:
            self.opd, teacher = load_teacher(opd_config(self.rollout))
            self._owned.append(teacher)
        self.pool = specs.make_pool(config.sandbox, size=config.pool_size,
                                    workers=max(2, min(config.pool_size, 8)))
        self.grader = Grader(self.pool)
        self._numbers = itertools.count()
        self._lock = threading.Lock()
        self._live: set[Any] = set()  # open session environments (closed at shutdown)
        self.started = time.perf_counter()
        self.closed = False
        self.stopping = False  # set when shutdown begins (sessions closed then: interrupted)

    def env_stack(self) -> Any:
        """A fresh recorder -> (OPD wrapper) -> coding env on the shared pool and grader."""
        return build_env(self.rollout, tasks=self.tasks, pool=self.pool, opd_options=self.opd,
                         grader=self.grader)

    def next_episode(self) -> int:
        """The next row number of the run (unique across sessions)."""
        with self._lock:
            return next(self._numbers)

    def record(self, row: EpisodeRow | None) -> None:
        """Append a finished (or cut short) episode's row, fsync'd, like any rollout."""
        if row is not None:
            from opd_gym.rollout_core import EpisodeOutcome

            self.sink(EpisodeOutcome(row.episode or 0, row))

    def attach(self, env: Any) -> None:
        """Track an open session environment; refused once shutdown has begun."""
        with self._lock:
            if self.closed:
                from opd_gym.serve.errors import ServeError

                raise ServeError("the server is shutting down: no new sessions")
            self._live.add(env)

    def detach(self, env: Any) -> None:
        """Forget a closed session environment."""
        with self._lock:
            self._live.discard(env)

    @property
    def live_sessions(self) -> int:
        """Session environments open now (each holds at most one sandbox)."""
        with self._lock:
            return len(self._live)

    def close(self) -> RunSummary:
        """Close every session still open (their rows marked interrupted), the pool and the
        teacher, and write `summary.json`; idempotent."""
        with self._lock:
            already, self.closed = self.closed, True
            live = list(self._live)
        for env in live:
            env.close(interrupted=True)
        if not already:
            self.pool.close()
            for obj in self._owned:
                close_quietly(obj)
        summary = RunSummary.of_rows(
            self.run.episodes(), failures=self.sink.failures,
            config={**plain_config(self.rollout), "served": True},
            seconds=time.perf_counter() - self.started, interrupted=bool(live))
        self.run.write_summary(summary.to_dict())
        return summary


__all__ = ["ServeRuntime"]
