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


class ToolCall(BaseModel):
    """One structured tool call, written into the env's tool-call format by the server."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=64, description="tool name, e.g. terminal")
    arguments: dict[str, Any] = Field(default_factory=dict, description="the tool's arguments")


class CodingAction(Action):
    """One assistant turn: the model's raw output `text`, or structured `tool_calls`."""

    text: str | None = Field(default=None, max_length=MAX_TEXT_CHARS,
                             description="the model's output, tool calls in the env's format")
    tool_calls: list[ToolCall] | None = Field(default=None, max_length=64,
                                              description="calls the server writes as text")

    @model_validator(mode="after")
    def _one_form(self) -> CodingAction:
        """Exactly one of `text` and `tool_calls`: an ambiguous turn is refused, not guessed."""
        if (self.text is None) == (self.tool_calls is None):
            # a PydanticCustomError carries no exception object: OpenEnv can send it as JSON
            raise PydanticCustomError(
                "one_form", "give exactly one of 'text' (the model output) or 'tool_calls'")
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
