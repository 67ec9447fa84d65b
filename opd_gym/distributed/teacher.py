"""The teacher as a shared Ray service: one actor holds the model, every worker calls it.

`TeacherService` is a threaded actor, so concurrent `score` calls from many workers reach the
teacher together and a batching teacher (TransformersTeacher's scheduler) runs them as one
forward pass. `RemoteTeacher` is what a worker's `OPDWrapper` holds: it speaks the Teacher
protocol and turns a dead or silent actor into a `ModelError` within `timeout`, which the
scorer records as an unscored turn (skip reason `teacher_error`), so a run never hangs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from opd_gym.errors import ModelError


class TeacherService:
    """Holds one teacher (built from a spec or given as an object) and scores for all workers."""

    def __init__(self, teacher: Any, options: Mapping[str, Any] | None = None) -> None:
        from opd_gym.opd.teachers import make_teacher

        self.teacher = make_teacher(teacher, **dict(options or {}))
        self._owned = self.teacher is not teacher

    def describe(self) -> dict[str, Any]:
        """What a worker needs locally: the name, the tokenizer and the vocabulary size."""
        return {
            "name": getattr(self.teacher, "name", type(self.teacher).__name__),
            "tokenizer": self.teacher.tokenizer,
            "vocab_size": int(self.teacher.vocab_size),
        }

    def score(self, requests: Sequence[Any], topk: int) -> Any:
        """The teacher's `score` (concurrent calls arrive on the actor's threads together)."""
        return self.teacher.score(list(requests), topk)

    def pid(self) -> int:
        """The actor's process id (tests and operators use it to find the process)."""
        import os

        return os.getpid()

    def close(self) -> None:
        """Close the teacher if this service built it."""
        from opd_gym.records.policy import close

        if self._owned:
            close(self.teacher)


class RemoteTeacher:
    """A Teacher that forwards `score` to a `TeacherService` actor (picklable: ships to workers)."""

    def __init__(self, actor: Any, description: Mapping[str, Any], *, timeout: float = 300.0):
        self.actor = actor
        self.name = str(description["name"])
        self.tokenizer = description["tokenizer"]
        self._vocab_size = int(description["vocab_size"])
        self.timeout = timeout

    @classmethod
    def connect(cls, actor: Any, *, timeout: float = 300.0) -> RemoteTeacher:
        """Ask the service what it serves (waits at most `timeout`, e.g. for the model load)."""
        return cls(actor, _get(actor.describe.remote(), timeout), timeout=timeout)

    @property
    def vocab_size(self) -> int:
        return self._vocab_size

    def score(self, requests: Sequence[Any], topk: int) -> Any:
        """Scores from the service; ModelError (a reason, never a hang) when it is gone."""
        return _get(self.actor.score.remote(list(requests), topk), self.timeout)

    def close(self) -> None:
        """Nothing to close here: the service belongs to whoever started it."""


def _get(ref: Any, timeout: float) -> Any:
    """`ray.get` with a timeout; actor death or silence becomes a ModelError naming it."""
    import ray
    from ray.exceptions import GetTimeoutError, RayActorError

    try:
        return ray.get(ref, timeout=timeout)
    except RayActorError as exc:
        raise ModelError(f"the teacher actor died ({type(exc).__name__})") from exc
    except GetTimeoutError as exc:
        ray.cancel(ref)
        raise ModelError(f"the teacher actor did not answer within {timeout:g} s") from exc


__all__ = ["RemoteTeacher", "TeacherService"]
