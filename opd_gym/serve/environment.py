"""CodingEnvironment: one OpenEnv session = one env stack on the shared warm pool.

OpenEnv's server makes one of these per WebSocket connection (its own thread, its own env,
at most one sandbox at a time) and calls `close()` when the client leaves, goes idle past
the timeout, or the server stops: the sandbox goes back to the pool and a cut-short episode
is written as an unfinished row. Nothing here is reachable from another session.
"""

from __future__ import annotations

import json
import threading
import uuid
from typing import Any

from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import EnvironmentMetadata

from opd_gym.actions import TokenText
from opd_gym.rollout_core import unfinished_row
from opd_gym.serve.errors import ServeError
from opd_gym.serve.models import CodingAction, CodingObservation, CodingState
from opd_gym.serve.runtime import ServeRuntime

INFO_DROPPED = ("turn_snapshot",)  # already in the row; not plain data


def jsonable(value: Any) -> Any:
    """`value` as plain JSON data (objects with `to_dict`, numpy values, anything else str)."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items() if k not in INFO_DROPPED}
    if isinstance(value, list | tuple | set):
        return [jsonable(v) for v in value]
    for attr in ("to_dict", "tolist"):
        if callable(getattr(value, attr, None)):
            return jsonable(getattr(value, attr)())
    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError):
        return str(value)


class CodingEnvironment(Environment[CodingAction, CodingObservation, CodingState]):
    """An OpenEnv Environment over opd_gym's coding env (with the OPD wrapper when served so)."""

    SUPPORTS_CONCURRENT_SESSIONS = True  # its own env and sandbox; shared pool is thread-safe

    def __init__(self, runtime: ServeRuntime) -> None:
        super().__init__()
        self.runtime = runtime
        self._lock = threading.Lock()  # close() may come from the reaper mid-step
        self._stack: Any = None
        self._state = CodingState()
        self._closed: str | None = None  # why, once closed
        runtime.attach(self)

    # -- OpenEnv API -----------------------------------------------------------------------
    def reset(self, seed: int | None = None, episode_id: str | None = None,
              task_id: str | None = None, **kwargs: Any) -> CodingObservation:
        """Start an episode: task `task_id` (else picked by `seed`), seeded with `seed`."""
        if kwargs:
            raise ServeError(f"unknown reset option(s) {sorted(kwargs)}; known: seed, "
                             "episode_id, task_id")
        if task_id is not None and task_id not in self.runtime.task_ids:
            raise ServeError(f"unknown task_id {task_id!r}; this server has "
                             f"{len(self.runtime.task_ids)} tasks: "
                             f"{', '.join(sorted(self.runtime.task_ids)[:20])}")
        with self._lock:
            self._check_open()
            self._flush_unfinished("reset before the episode ended")
            if self._stack is None:
                self._stack = self.runtime.env_stack()
            number = self.runtime.next_episode()
            self._stack.extra = {"episode": number, "served": True}  # row.extra["served"]
            options = {"task_id": task_id} if task_id is not None else None
            text, info = self._stack.reset(seed=seed, options=options)
            self._state = CodingState(episode_id=episode_id or str(uuid.uuid4()), step_count=0,
                                      task_id=info.get("task_id"), seed=seed, episode=number)
            return CodingObservation(text=reset_text(text, info), info=jsonable(info))

    def step(self, action: CodingAction, timeout_s: float | None = None,
             **kwargs: Any) -> CodingObservation:
        """Play one assistant turn; at the episode's end its row goes to the run directory."""
        with self._lock:
            self._check_open()
            if self._stack is None or self._state.done or self._state.task_id is None:
                raise ServeError("no episode in progress: send reset before step")
            output = self._output(action)
            self._check_turn(action, output)  # a refused turn runs nothing, counts nothing
            text, reward, terminated, truncated, info = self._stack.step(output)
            done = bool(terminated or truncated)
            self._state.step_count += 1
            self._state.done, self._state.reward = done, float(reward)
            if done:
                self.runtime.record(self._stack.last_row)
            return CodingObservation(text=text, reward=float(reward), done=done,
                                     terminated=bool(terminated), truncated=bool(truncated),
                                     info=jsonable(info))

    @property
    def state(self) -> CodingState:
        """A copy of the episode's state (read from the event loop: never touches the env)."""
        return self._state.model_copy()

    def get_metadata(self) -> EnvironmentMetadata:
        """What OpenEnv's /metadata shows for this server."""
        return EnvironmentMetadata(
            name="opd_gym", version=_version(),
            description="multi-turn coding episodes: tool calls run in a sandbox, hidden "
            "tests grade the submission" + (" (OPD records in info)" if self.runtime.opd
                                            else ""))

    def close(self, interrupted: bool = False) -> None:
        """Return the sandbox, write a cut-short episode's row; safe to call twice."""
        with self._lock:
            if self._closed is not None:
                return
            stopping = interrupted or self.runtime.stopping
            self._closed = ("the server stopped" if stopping else
                            f"idle over {self.runtime.config.idle_timeout:g} s, or its client left")
            try:  # only a shutdown interrupts: a client that left ended its own episode
                if self._flush_unfinished(f"{self._closed} before the episode ended",
                                          interrupted=stopping) and stopping:
                    self.runtime.note_interrupted()
            finally:
                stack, self._stack = self._stack, None
                if stack is not None:
                    stack.close()
                self.runtime.detach(self)

    # -- helpers ---------------------------------------------------------------------------
    def _check_open(self) -> None:
        """Refuse work on a session that was closed (reaped, its client gone, shutdown)."""
        if self._closed is not None:
            raise ServeError(f"this session is closed ({self._closed}): reconnect")

    def _output(self, action: CodingAction) -> str:
        """The turn as the env takes it: `TokenText` when the client sent its token ids."""
        if action.text is None:
            return self._calls_text(action)
        if action.token_ids is None and action.prompt_ids is None:
            return action.text
        return TokenText(action.text, token_ids=action.token_ids, logprobs=action.logprobs,
                         prompt_ids=action.prompt_ids, topk_ids=action.topk_ids)

    def _calls_text(self, action: CodingAction) -> str:
        """Structured calls written in the env's tool-call format."""
        fmt = self._stack.unwrapped.tool_format
        return fmt.format_calls([(call.name, call.arguments) for call in action.tool_calls or []])

    def _check_turn(self, action: CodingAction, output: str) -> None:
        """Refuse a turn that could not be taken whole, before the env runs any of it (its
        commands, its transcript entry, the step counters): token ids no tokenizer vouches
        for, ids outside the student's vocabulary, whatever the OPD wrapper would refuse."""
        runtime = self.runtime
        exact = action.token_ids is not None
        if exact and runtime.opd is not None and runtime.student_tokenizer is None:
            raise ServeError(
                "token_ids need the student's tokenizer to be checked against the teacher's: "
                "start the server with --opd --tokenizer SPEC (tiny, smollm2, hf:PATH: the "
                "policy's), or send the text alone (its records are then retokenized)")
        for name, ids in (("token_ids", action.token_ids), ("prompt_ids", action.prompt_ids)):
            if ids is not None:
                _check_ids(name, ids, runtime.student_tokenizer, runtime.config.tokenizer)
        if action.topk_ids is not None:
            widths = {len(row) for row in action.topk_ids}
            if len(widths) > 1:
                raise ServeError(f"topk_ids rows have {len(widths)} different widths "
                                 f"({sorted(widths)}); give each position the same K")
            for position, row in enumerate(action.topk_ids):
                _check_ids(f"topk_ids[{position}]", row, runtime.student_tokenizer,
                           runtime.config.tokenizer)
        layer = self._stack
        while layer is not None:  # every wrapper's own pre-step check (OPDWrapper's)
            check = getattr(type(layer), "check_action", None)
            if callable(check):
                layer.check_action(output)
            layer = getattr(layer, "env", None)

    def _flush_unfinished(self, why: str, interrupted: bool = False) -> bool:
        """The row of an episode left before its end (if a step was taken): not finished;
        whether one was written."""
        if self._stack is None or self._state.done or self._state.task_id is None:
            return False
        row = unfinished_row(self._stack, self._state.episode or 0, why=why,
                             interrupted=interrupted)
        self._state.done = True
        if row is not None:
            self.runtime.record(row)
        return row is not None


def _check_ids(name: str, ids: list[int], tokenizer: Any, spec: str | None) -> None:
    """Refuse negative ids, and with the student's tokenizer ids outside its vocabulary."""
    size = len(tokenizer) if tokenizer is not None else None
    for position, token in enumerate(ids):
        if token < 0 or (size is not None and token >= size):
            bound = f"0..{size - 1} (the vocabulary of --tokenizer {spec})" if size else ">= 0"
            raise ServeError(f"{name}[{position}] is {token}: a token id must be in {bound}")


def reset_text(prompt: str, info: dict[str, Any]) -> str:
    """The text a reset answers with: the system prompt (the tools and how to call them, in
    the env's tool-call format) before the task prompt, as `info["messages"]` holds them, so
    a client that prompts with the text alone is told how to call a tool."""
    messages = info.get("messages") or []
    system = next((m.get("content") for m in messages if m.get("role") == "system"), None)
    return f"{system}\n\n{prompt}" if system else prompt


def _version() -> str:
    """opd_gym's version, from the installed distribution's metadata (this module sits below
    the package's top, which re-exports it lazily)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("opd_gym")
    except PackageNotFoundError:
        return "unknown (opd_gym is not installed as a distribution)"


__all__ = ["CodingEnvironment", "jsonable"]
