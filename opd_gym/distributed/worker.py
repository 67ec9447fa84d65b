"""A rollout worker: a Ray actor that plays episodes on its node with its own sandbox pool.

The actor is threaded (`max_concurrency` = episodes in flight); each thread takes a slot (an
env stack and an agent, built on first use) so several episodes run at once. Episodes are
played exactly as the local runner plays them (`opd_gym.rollout._play_one`: episode i, task
`task_ids[i % n]`, seed `seed + i`), so the same seeds give the same episodes. The finished
row goes back to the driver, which alone writes the run directory.

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
        tasks: Sequence[Any],
        *,
        sandbox: Any,
        max_turns: int,
        make_agent: Callable[[Any], Any],
        opd_options: Mapping[str, Any] | None,
        slots: int = 2,
    ) -> None:
        from opd_gym import specs

        self.tasks = list(tasks)
        self.max_turns = max_turns
        self.make_agent = make_agent
        self.opd_options = None if opd_options is None else dict(opd_options)
        self.pool = specs.make_pool(sandbox, size=max(2, slots + 1))
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
        import gymnasium as gym

        from opd_gym.wrappers.recorder import TrajectoryRecorder

        env = gym.make(
            "opd_gym/Coding-v0", tasks=self.tasks, sandbox=self.pool, max_turns=self.max_turns
        )
        if self.opd_options is not None:
            from opd_gym.opd.wrapper import OPDWrapper

            env = OPDWrapper(env, **self.opd_options)
        # rows go to the driver; the recorder's own file is a sink it needs (nothing kept here)
        recorder = TrajectoryRecorder(env, os.devnull, fsync=False)
        slot = (recorder, self.make_agent(env))
        with self._lock:
            self._made[self._made.index(None)] = slot
        return slot

    def play(self, episode: int, task_id: str, seed: int) -> dict[str, Any]:
        """Play one episode: {"episode", "row"} or {"episode", "error", "row": partial|None}."""
        from opd_gym.rollout import _play_one

        recorder, agent = self._slot()
        try:
            row = _play_one(recorder, agent, episode, task_id, seed)
            self.episodes_played += 1
            return {"episode": episode, "row": row}
        except Exception as exc:  # one broken episode must not end the run (as locally)
            partial = None
            try:
                partial = recorder.record(finished=False)
            except Exception:
                partial = None
            return {"episode": episode, "error": f"{type(exc).__name__}: {exc}", "row": partial}
        finally:
            self._free.put((recorder, agent))

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
        for slot in self._made:
            if slot is None:
                continue
            recorder, agent = slot
            close = getattr(agent, "close", None)
            if callable(close):
                close()
            recorder.close()
        self._made.clear()
        self.pool.close()


__all__ = ["RolloutWorker"]
