"""ServeRuntime: what every session of one server shares (warm pool, grader, OPD teacher,
run directory) and the bookkeeping that lets shutdown close whatever is still open."""

from __future__ import annotations

import itertools
import threading
import time
from typing import Any

from opd_gym import specs
from opd_gym.grading.store import make_grader
from opd_gym.records.policy import close as close_quietly
from opd_gym.records.rows import EpisodeRow
from opd_gym.rollout_core import RowSink, build_env, load_teacher, opd_config
from opd_gym.runs import RunDirectory, RunSummary
from opd_gym.runs.config import RolloutConfig, plain_config
from opd_gym.serve.config import ServeConfig
from opd_gym.tasks.resolve import resolve_tasks


def served_opd_options(config: ServeConfig) -> dict[str, Any]:
    """The OPD options of the run (config.json records them), with `--tokenizer` as the
    student's tokenizer when one is named."""
    options = dict(config.opd_options)
    if config.tokenizer is not None:
        options["student_tokenizer"] = config.tokenizer
    return options


def student_tokenizer(spec: str, opd: Any) -> Any:
    """The student's tokenizer `spec` names, loaded once for every session and checked
    against the teacher's now (a mismatch refuses the server's start: ConfigError)."""
    from opd_gym.opd.chat import check_tokenizers

    tokenizer = specs.tokenizer(spec)
    check_tokenizers(tokenizer, opd.teacher.tokenizer, student_name=f"(--tokenizer {spec})",
                     teacher_name=f"(teacher {getattr(opd.teacher, 'name', '') or ''})")
    return tokenizer


class ServeRuntime:
    """Shared state of a server: sessions build their env stacks here and hand rows back."""

    def __init__(self, config: ServeConfig) -> None:
        self.config = config.check()
        self.rollout = RolloutConfig(
            out_dir=config.run_dir(), episodes=0, tasks=config.tasks, sandbox=config.sandbox,
            parallel=config.max_sessions, max_turns=config.max_turns, opd=config.opd,
            opd_options=served_opd_options(config), tool_format=config.tool_format,
            max_tool_output_chars=config.max_tool_output_chars,
            verify_tasks=config.verify_tasks, skip_unverifiable=config.skip_unverifiable,
            calibrations=config.calibrations)
        self.tasks = resolve_tasks(config.tasks)
        self.task_ids = {task.id for task in self.tasks}
        self.run = RunDirectory(self.rollout.out_dir)
        self.run.open_for_run(resume=False)
        self.run.trajectories.touch()  # a served run with no episode yet is still a run
        self.run.write_config({**plain_config(self.rollout), "served": True})
        self.sink = RowSink(self.run)
        self._owned: list[Any] = []
        self.opd = None
        self.student_tokenizer: Any = None  # `--tokenizer`: clients' token ids are checked
        if config.opd:
            self.opd, teacher = load_teacher(opd_config(self.rollout))
            self._owned.append(teacher)
            if config.tokenizer is not None:
                try:
                    self.student_tokenizer = student_tokenizer(config.tokenizer, self.opd)
                except BaseException:
                    close_quietly(teacher)
                    raise
                self.opd = self.opd.replace(student_tokenizer=self.student_tokenizer)
        self.pool = specs.make_pool(config.sandbox, size=config.pool_size,
                                    workers=max(2, min(config.pool_size, 8)))
        self.grader = make_grader(self.pool, self.rollout.calibrations)
        self._numbers = itertools.count()
        self._lock = threading.Lock()
        self._live: set[Any] = set()  # open session environments (closed at shutdown)
        self.started = time.perf_counter()
        self.closed = False
        self.stopping = False  # set when shutdown begins (sessions closed then: interrupted)
        self.interrupted_sessions = 0  # episodes a shutdown cut short (their rows: interrupted)

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

    def note_interrupted(self) -> None:
        """Count an episode the shutdown cut short (the summary says the run was interrupted)."""
        with self._lock:
            self.interrupted_sessions += 1

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
            seconds=time.perf_counter() - self.started,
            interrupted=bool(self.interrupted_sessions))
        self.run.write_summary(summary.to_dict())
        return summary


__all__ = ["ServeRuntime"]
