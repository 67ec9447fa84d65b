"""Episodes and their recorded turns: what the model saw and sampled at each proxied call.

A turn keeps the prompt ids exactly as the model saw them, the sampled ids (end-of-turn
token included when sampled) and their logprobs, so the env can take it as a token-exact
turn (`to_action`, `to_token_text`) and the teacher scores exactly those ids.
`extends_previous` says whether its prompt continues the previous turn's prompt + sampled
ids token for token (a harness that truncates or rewrites its history breaks that).
"""

from __future__ import annotations

import re
import secrets
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from opd_gym.actions import TokenText
from opd_gym.proxy.errors import ProxyRequestError, UnknownEpisode

KEY_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
RESERVED_KEYS = frozenset({"v1", "opd", "health"})


@dataclass(frozen=True)
class Sampled:
    """What one model call sampled, as a backend reports it (before it becomes a turn)."""

    prompt_ids: list[int]
    token_ids: list[int]
    logprobs: list[float]
    content: str | None
    tool_calls: list[dict[str, Any]] | None
    finish_reason: str | None
    model: str

    def __post_init__(self) -> None:
        if len(self.token_ids) != len(self.logprobs):
            raise ValueError(f"{len(self.token_ids)} sampled ids but {len(self.logprobs)} "
                             "logprobs; they must align one to one")


@dataclass(frozen=True)
class ProxyTurn:
    """One recorded call: the request's messages/tools and exactly what the model did."""

    index: int
    prompt_ids: list[int]
    token_ids: list[int]
    logprobs: list[float]
    content: str | None
    tool_calls: list[dict[str, Any]] | None
    finish_reason: str | None
    model: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    sampling: dict[str, Any]
    extends_previous: bool | None  # None for the first turn
    stream: bool
    model_seconds: float  # time spent waiting for the model (the proxy's own cost excluded)
    recorded_at: float = field(default_factory=time.time)

    def to_action(self) -> dict[str, Any]:
        """The env's mapping action: content and tool calls with the exact ids and logprobs."""
        return {"role": "assistant", "content": self.content or "",
                "tool_calls": [dict(c) for c in self.tool_calls] if self.tool_calls else None,
                "token_ids": list(self.token_ids), "logprobs": list(self.logprobs),
                "prompt_ids": list(self.prompt_ids)}

    def to_token_text(self, tokenizer: Any) -> TokenText:
        """The env's `TokenText`: the raw sampled text (decoded with the served model's
        tokenizer, end-of-turn token dropped) carrying the exact ids and logprobs."""
        eos = getattr(tokenizer, "eos_token_id", None)
        body = self.token_ids[:-1] if self.token_ids and self.token_ids[-1] == eos else \
            self.token_ids
        text = tokenizer.decode(body, skip_special_tokens=False)
        return TokenText(text, token_ids=self.token_ids, logprobs=self.logprobs,
                         prompt_ids=self.prompt_ids)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready copy (what the control API returns)."""
        return asdict(self)


def extends(previous: ProxyTurn | None, prompt_ids: Sequence[int]) -> bool | None:
    """Whether `prompt_ids` start with the previous turn's prompt + sampled ids (None: first)."""
    if previous is None:
        return None
    before = [*previous.prompt_ids, *previous.token_ids]
    return len(prompt_ids) >= len(before) and list(prompt_ids[:len(before)]) == before


class RecordedEpisode:
    """An open episode: its key and the turns recorded so far, in completion order."""

    def __init__(self, key: str, metadata: Mapping[str, Any] | None = None) -> None:
        self.key = key
        self.metadata = dict(metadata or {})
        self.turns: list[ProxyTurn] = []
        self.opened_at = time.time()


class EpisodeRegistry:
    """The open episodes of one proxy, safe to use from the server and caller threads."""

    def __init__(self) -> None:
        self._episodes: dict[str, RecordedEpisode] = {}
        self._changed = threading.Condition()

    def open(self, key: str | None = None, metadata: Mapping[str, Any] | None = None) -> str:
        """Open an episode under `key` (a fresh random key when None) and return the key."""
        key = key or f"ep-{secrets.token_hex(8)}"
        if not KEY_PATTERN.fullmatch(key) or key in RESERVED_KEYS:
            raise ProxyRequestError(
                f"episode key {key!r} must be 1-128 letters, digits, '.', '_' or '-', start "
                f"with a letter or digit, and not be one of {sorted(RESERVED_KEYS)}")
        with self._changed:
            if key in self._episodes:
                raise ProxyRequestError(f"episode {key!r} is already open")
            self._episodes[key] = RecordedEpisode(key, metadata)
        return key

    def get(self, key: str | None) -> RecordedEpisode:
        """The open episode `key`; `UnknownEpisode` when none is named or it is not open."""
        if not key:
            raise UnknownEpisode("no episode named: put the episode key in the base URL "
                                 "(http://HOST:PORT/<key>/v1) or the X-OPD-Episode header")
        with self._changed:
            episode = self._episodes.get(key)
        if episode is None:
            raise UnknownEpisode(f"episode {key!r} is not open on this proxy")
        return episode

    def keys(self) -> list[str]:
        """The keys of the open episodes."""
        with self._changed:
            return list(self._episodes)

    def record(self, key: str, sampled: Sampled, *, messages: list[dict[str, Any]],
               tools: list[dict[str, Any]] | None, sampling: dict[str, Any], stream: bool,
               model_seconds: float) -> ProxyTurn:
        """Append one turn to episode `key` (which must still be open) and return it."""
        with self._changed:
            episode = self._episodes.get(key)
            if episode is None:
                raise UnknownEpisode(f"episode {key!r} was closed while its call ran; "
                                     "the call is not recorded")
            previous = episode.turns[-1] if episode.turns else None
            turn = ProxyTurn(
                index=len(episode.turns), prompt_ids=list(sampled.prompt_ids),
                token_ids=list(sampled.token_ids), logprobs=list(sampled.logprobs),
                content=sampled.content, tool_calls=sampled.tool_calls,
                finish_reason=sampled.finish_reason, model=sampled.model, messages=messages,
                tools=tools, sampling=sampling,
                extends_previous=extends(previous, sampled.prompt_ids), stream=stream,
                model_seconds=model_seconds)
            episode.turns.append(turn)
            self._changed.notify_all()
            return turn

    def turns(self, key: str) -> list[ProxyTurn]:
        """A copy of the turns recorded for `key` so far."""
        episode = self.get(key)
        with self._changed:
            return list(episode.turns)

    def wait_for_turns(self, key: str, count: int, timeout: float | None = None
                       ) -> list[ProxyTurn]:
        """Block until `key` has at least `count` turns (or `timeout` s pass); its turns."""
        episode = self.get(key)
        with self._changed:
            self._changed.wait_for(lambda: len(episode.turns) >= count, timeout)
            return list(episode.turns)

    def close(self, key: str) -> list[ProxyTurn]:
        """Close episode `key` (later calls naming it are refused) and return its turns."""
        with self._changed:
            episode = self._episodes.pop(key, None)
        if episode is None:
            raise UnknownEpisode(f"episode {key!r} is not open on this proxy")
        return list(episode.turns)
