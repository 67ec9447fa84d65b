"""Actions: the model's text, optionally with the exact token ids and logprobs it sampled.

An agent may pass a plain `str`, a `TokenText` (a `str` that also carries `token_ids`,
`logprobs` and optionally `prompt_ids`), a mapping `{"text": ..., "token_ids": [...],
"logprobs": [...]}`, or an OpenAI assistant message `{"role": "assistant", "content": ...,
"tool_calls": [...]}`. `to_model_output` turns any of them into one `ModelOutputData`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


class TokenText(str):
    """Model output text that also carries the sampled token ids (and logprobs) behind it."""

    token_ids: list[int] | None
    logprobs: list[float] | None
    prompt_ids: list[int] | None
    topk_ids: list[list[int]] | None

    def __new__(
        cls,
        text: str,
        token_ids: Sequence[int] | None = None,
        logprobs: Sequence[float] | None = None,
        prompt_ids: Sequence[int] | None = None,
        topk_ids: Sequence[Sequence[int]] | None = None,
    ) -> TokenText:
        self = super().__new__(cls, text)
        self.token_ids = None if token_ids is None else [int(t) for t in token_ids]
        self.logprobs = None if logprobs is None else [float(p) for p in logprobs]
        self.prompt_ids = None if prompt_ids is None else [int(t) for t in prompt_ids]
        # the policy's own top-K candidate ids at each sampled position (teachers score them)
        self.topk_ids = None if topk_ids is None else [[int(t) for t in row] for row in topk_ids]
        if self.topk_ids is not None and self.token_ids is not None and \
                len(self.topk_ids) != len(self.token_ids):
            raise ValueError(f"topk_ids has {len(self.topk_ids)} rows but token_ids has "
                             f"{len(self.token_ids)}; one row per sampled token")
        if self.token_ids is not None and self.logprobs is not None:
            if len(self.token_ids) != len(self.logprobs):
                raise ValueError(
                    f"token_ids has {len(self.token_ids)} entries but logprobs has "
                    f"{len(self.logprobs)}; they must align one to one"
                )
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        return (TokenText, (str(self), self.token_ids, self.logprobs, self.prompt_ids,
                            self.topk_ids))

    def __repr__(self) -> str:
        n = "no" if self.token_ids is None else len(self.token_ids)
        return f"TokenText({str.__repr__(self)}, {n} token ids)"


@dataclass(frozen=True)
class ModelOutputData:
    """One normalised action: text plus whatever token data and pre-parsed calls came with it.

    `tool_calls` is None when the calls must be parsed from `text`, and a list of OpenAI
    tool-call mappings when the action already carried them. `problem` names why the action
    itself is unusable (wrong type), for the observation.
    """

    text: str
    token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    prompt_ids: list[int] | None = None
    tool_calls: list[Any] | None = None
    problem: str | None = None
    topk_ids: list[list[int]] | None = None


def _int_list(value: Any) -> list[int] | None:
    if value is None:
        return None
    try:
        return [int(v) for v in value]
    except (TypeError, ValueError):
        return None


def _int_rows(value: Any) -> list[list[int]] | None:
    """Rows of ints of one common width (the student's top-K ids), or None if malformed."""
    if value is None:
        return None
    try:
        rows = [[int(v) for v in row] for row in value]
    except (TypeError, ValueError):
        return None
    return rows if len({len(row) for row in rows}) <= 1 else None


def _float_list(value: Any) -> list[float] | None:
    if value is None:
        return None
    try:
        return [float(v) for v in value]
    except (TypeError, ValueError):
        return None


def to_model_output(action: Any) -> ModelOutputData:
    """Normalise any accepted action form; never raises (bad input sets `problem`)."""
    if isinstance(action, str):
        return ModelOutputData(
            text=str(action),
            token_ids=getattr(action, "token_ids", None),
            logprobs=getattr(action, "logprobs", None),
            prompt_ids=getattr(action, "prompt_ids", None),
            topk_ids=_int_rows(getattr(action, "topk_ids", None)),
        )
    if isinstance(action, Mapping):
        text = action.get("text", action.get("content"))
        calls = action.get("tool_calls")
        if text is not None and not isinstance(text, str):
            return ModelOutputData(
                text="", problem=f"the action's text must be a string, got {type(text).__name__}"
            )
        if calls is not None and not isinstance(calls, list):
            return ModelOutputData(
                text=text or "",
                problem=f"the action's tool_calls must be a list, got {type(calls).__name__}",
            )
        if text is None and calls is None:
            return ModelOutputData(
                text="",
                problem="the action mapping has no 'text', 'content' or 'tool_calls' entry",
            )
        return ModelOutputData(
            text=text or "",
            token_ids=_int_list(action.get("token_ids")),
            logprobs=_float_list(action.get("logprobs")),
            prompt_ids=_int_list(action.get("prompt_ids")),
            topk_ids=_int_rows(action.get("topk_ids")),
            tool_calls=list(calls) if calls else None,
        )
    return ModelOutputData(
        text="" if action is None else repr(action)[:200],
        problem=f"the action must be the model's text (a string), got {type(action).__name__}",
    )
