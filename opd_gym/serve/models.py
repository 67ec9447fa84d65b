"""The wire models: OpenEnv's Action / Observation / State, specialised for coding episodes.

They subclass openenv-core's pydantic bases, so validation (unknown fields refused, types
checked) and serialization are OpenEnv's own; a wrong-format action is a VALIDATION_ERROR.
"""

from __future__ import annotations

from typing import Any

from openenv.core.env_server.types import Action, Observation, State
from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError

MAX_TEXT_CHARS = 1_000_000  # one model turn; the byte limit on a request is stricter anyway
MAX_TOKENS = 262_144  # sampled ids in one turn (prompt ids: 8 times that)


class ToolCall(BaseModel):
    """One structured tool call, written into the env's tool-call format by the server."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=64, description="tool name, e.g. terminal")
    arguments: dict[str, Any] = Field(default_factory=dict, description="the tool's arguments")


class CodingAction(Action):
    """One assistant turn: the model's raw output `text`, or structured `tool_calls`.

    With `text`, a client that sampled the turn itself may send what it sampled, token-exact
    (as `TokenText` carries it in process): `token_ids` and their `logprobs`, the
    `prompt_ids` the model saw, and its own `topk_ids`; the OPD teacher then scores exactly
    those ids instead of a context rebuilt from the messages."""

    text: str | None = Field(default=None, max_length=MAX_TEXT_CHARS,
                             description="the model's output, tool calls in the env's format")
    tool_calls: list[ToolCall] | None = Field(default=None, max_length=64,
                                              description="calls the server writes as text")
    token_ids: list[int] | None = Field(default=None, max_length=MAX_TOKENS,
                                        description="the sampled token ids behind `text`")
    logprobs: list[float] | None = Field(default=None, max_length=MAX_TOKENS,
                                         description="their logprobs, one per sampled id")
    prompt_ids: list[int] | None = Field(default=None, max_length=MAX_TOKENS * 8,
                                         description="the prompt ids the model saw")
    topk_ids: list[list[int]] | None = Field(default=None, max_length=MAX_TOKENS,
                                             description="the sampler's top-K ids per position")

    @model_validator(mode="after")
    def _one_form(self) -> CodingAction:
        """Exactly one of `text` and `tool_calls`: an ambiguous turn is refused, not guessed;
        token data only with `text`, aligned one to one with the sampled ids."""
        if (self.text is None) == (self.tool_calls is None):
            # a PydanticCustomError carries no exception object: OpenEnv can send it as JSON
            raise PydanticCustomError(
                "one_form", "give exactly one of 'text' (the model output) or 'tool_calls'")
        exact = (self.token_ids, self.logprobs, self.prompt_ids, self.topk_ids)
        if self.text is None and any(x is not None for x in exact):
            raise PydanticCustomError(
                "token_data", "token_ids, logprobs, prompt_ids and topk_ids go with 'text'")
        if self.token_ids is None and any(x is not None for x in (self.logprobs,
                                                                   self.topk_ids)):
            raise PydanticCustomError("token_data", "logprobs and topk_ids need token_ids")
        for name, rows in (("logprobs", self.logprobs), ("topk_ids", self.topk_ids)):
            if rows is not None and self.token_ids is not None \
                    and len(rows) != len(self.token_ids):
                raise PydanticCustomError(
                    "token_data", "{name} has {got} entries but token_ids has {want}; they "
                    "align one to one", {"name": name, "got": len(rows),
                                         "want": len(self.token_ids)})
        return self


class CodingObservation(Observation):
    """What the agent sees after reset or a step, with the env's info as plain JSON."""

    text: str = Field(default="", description="the prompt (reset) or the tool results (step)")
    terminated: bool = Field(default=False, description="the agent submitted")
    truncated: bool = Field(default=False, description="cut short (turn cap, format errors)")
    info: dict[str, Any] = Field(default_factory=dict, description="the env's info, as JSON")


class CodingState(State):
    """A session's episode at a glance (cheap: answered without touching the sandbox)."""

    task_id: str | None = Field(default=None, description="the task being played")
    seed: int | None = Field(default=None, description="the seed the episode was reset with")
    episode: int | None = Field(default=None, description="its row number in the run")
    done: bool = Field(default=False, description="the episode has ended")
    reward: float | None = Field(default=None, description="the last reward")


__all__ = ["CodingAction", "CodingObservation", "CodingState", "ToolCall"]
