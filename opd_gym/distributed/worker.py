"""A rollout worker: a Ray actor that plays episodes on its node with its own sandbox pool.

The actor is threaded (`max_concurrency` = episodes in flight); each thread takes a slot (an
env stack and an agent, built on first use) so several episodes run at once. It receives the
whole run config and builds and plays episodes with the same core as the local runner
(`opd_gym.rollout_core`: `build_env`, `play`), so the same seeds give the same episodes
and flags such as the tool-call format hold here too. The finished row goes back to the
driver, which alone writes the run directory.

Creating the pool reaps containers whose owner process is gone (Docker's owner labels), so a
worker restarted after a crash removes what its dead predecessor left on that node.
"""

from __future__ import annotations

import os
import queue
import socket
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any


class RolloutWorker:
    """Plays episodes by id on this node; returns each finished episode's row."""

    def __init__(
        self,
        config: Any,
        tasks: Sequence[Any],
        *,
        make_agent: Callable[[Any], Any],
        opd_options: Mapping[str, Any] | None,
        slots: int = 2,
    ) -> None:
        from opd_gym import specs
        from opd_gym.grading.store import make_grader

        self.config = config  # a RolloutConfig
        self.tasks = list(tasks)
        self.make_agent = make_agent
        self.opd_options = None if opd_options is None else dict(opd_options)
        self.pool = specs.make_pool(config.sandbox, size=max(2, slots + 1))
        # shared by this worker's slots: one calibration per task (the run's store, if given)
        self.grader = make_grader(self.pool, config.calibrations)
        self._free: queue.Queue = queue.Queue()
        self._made: list[tuple[Any, Any]] = []
        self._lock = threading.Lock()
        self._slots = max(1, slots)
        self.episodes_played = 0

    def _slot(self) -> tuple[Any, Any]:
        """A free (recorder, agent) pair, built when fewer than `slots` exist."""
        try:
            return self._free.get_nowait()
        except queue.Empty:
            pass
        with self._lock:
            build = len(self._made) < self._slots
            if build:
                self._made.append(None)  # reserve
        if not build:
            return self._free.get()
        from opd_gym.rollout_core import build_agent, build_env

        # rows go to the driver; the recorder writes nowhere
        recorder = build_env(self.config, tasks=self.tasks, pool=self.pool,
                             opd_options=self.opd_options, grader=self.grader)
        agent = build_agent(recorder, self.make_agent)
        slot = (recorder, agent)
        with self._lock:
            self._made[self._made.index(None)] = slot
        return slot

    def play(self, episode: int, task_id: str, seed: int) -> dict[str, Any]:
        """Play one episode: its `EpisodeOutcome` as plain data (the row, or the partial row
        and the error), played by the same core as the local runner (`rollout_core.play`)."""
        from opd_gym.rollout_core import play

        recorder, agent = self._slot()
        try:
            outcome = play(recorder, agent, episode, task_id, seed)
            if outcome.error is None:
                self.episodes_played += 1
            return outcome.to_dict()
        finally:
            self._free.put((recorder, agent))

    def verify(self, task_ids: list[str], episodes: list[int]) -> tuple[list[str], list[str]]:
        """The run's check before its first episode (`runs.verify.verified_task_ids`), here
        where a sandbox backend is (the driver may have none): the task ids to plan with and
        what to tell the user. The calibrations stay in this worker's Grader, which its
        episodes reuse. Raises UnverifiableTaskError as the local runner does."""
        from opd_gym.runs.verify import verified_task_ids

        said: list[str] = []
        ids = verified_task_ids(self.config, self.tasks, task_ids, episodes, pool=self.pool,
                                grader=self.grader, say=said.append)
        return ids, said

    def prepare(self) -> dict[str, Any]:
        """Build the first slot now (env, agent, the student's tokenizer checked against the
        teacher's), so a mismatch stops the run before any episode; then `info()`."""
        self._free.put(self._slot())
        return self.info()

    def info(self) -> dict[str, Any]:
        """Where this worker runs: process id, host name, Ray node id."""
        import ray

        return {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "node_id": ray.get_runtime_context().get_node_id(),
            "episodes_played": self.episodes_played,
        }

    def close(self) -> None:
        """Close agents, envs and the sandbox pool (containers go)."""
        from opd_gym.records.policy import close

        for slot in self._made:
            if slot is None:
                continue
            recorder, agent = slot
            close(agent)
            recorder.close()
        self._made.clear()
        self.pool.close()


__all__ = ["RolloutWorker"]
