"""A vLLM server as the agent: samples each turn through `/v1/completions` from token ids.

The prompt is rendered here with the model's chat template and the env's tools schema and
sent as a token-id list, so the returned `TokenText` carries the exact prompt ids, the
exact sampled ids (end-of-turn token included) and their logprobs. vLLM reports sampled
logprobs of the raw (untempered) distribution by default: they are those of the distribution
the tokens were drawn from only at temperature 1 with no top-p/top-k/min-p filter, so only then
are they returned (or when the server runs with `--logprobs-mode processed_logprobs` and the
policy is told so); otherwise the turn carries no student logprobs rather than wrong ones.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from opd_gym.actions import TokenText
from opd_gym.errors import ConfigError
from opd_gym.models.client import ModelClient, ModelUnavailable
from opd_gym.models.tokenizer import served_tokenizer
from opd_gym.transcript import prompt_ids as render_prompt


class VLLMPolicy:
    """Samples assistant turns from a vLLM server with the chat template and tools.

    Args:
        base_url: the server, e.g. "http://127.0.0.1:8000" (a trailing "/v1" is accepted).
        model: the served model name; the first listed model when None.
        tokenizer: tokenizer object or local path of the served model; defaults to the
            model path the server reports.
        max_tokens: cap on sampled tokens per turn (also bounded by the context left).
        temperature, top_p: sampling settings; seed: request i is seeded from (`seed`, i)
            (reproducible runs, different draws per turn), None for unseeded;
            `seed_episode(seed)` restarts that sequence from an episode's own seed.
        extra_body: more completion parameters (e.g. {"min_p": 0.05}).
        processed_logprobs: the server was started with `--logprobs-mode processed_logprobs`,
            so its logprobs are of the tempered, filtered distribution the tokens were sampled
            from; without it, logprobs are returned only when sampling is plain (T=1, no
            filters), since raw logprobs would then be off the sampling distribution.
    """

    def __init__(
        self,
        base_url: str,
        *,
        model: str | None = None,
        tokenizer: Any = None,
        api_key: str | None = None,
        max_tokens: int = 256,
        temperature: float = 1.0,
        top_p: float = 1.0,
        seed: int | None = 0,
        timeout: float = 300.0,
        retries: int = 2,
        backoff: float = 0.5,
        extra_body: Mapping[str, Any] | None = None,
        processed_logprobs: bool = False,
    ) -> None:
        if max_tokens < 1:
            raise ConfigError("max_tokens must be >= 1")
        self.client = ModelClient(base_url, api_key=api_key, timeout=timeout, retries=retries,
                                 backoff=backoff)
        try:
            info = self.client.served_model(model)
            self.tokenizer, _ = served_tokenizer(tokenizer, info)
        except BaseException:
            self.client.close()
            raise
        self.model = str(info["id"])
        self.max_model_len = info.get("max_model_len")
        self.max_tokens = int(max_tokens)
        self.temperature = float(temperature)
        self.top_p = float(top_p)
        self.seed = seed
        self.extra_body = dict(extra_body or {})
        off = {"top_k": (None, -1, 0), "min_p": (None, 0), "typical_p": (None, 1)}
        filtered = self.top_p < 1.0 or any(
            self.extra_body.get(key) not in values for key, values in off.items())
        # raw logprobs (vLLM's default mode) are the sampling distribution's only at T=1
        # without filters; processed ones always are
        self.returns_logprobs = processed_logprobs or (self.temperature == 1.0 and not filtered)
        self.logprob_temperature = self.temperature if processed_logprobs else 1.0
        self._draws = itertools.count()
        self._draw_lock = threading.Lock()

    def reset(self, observation: str, info: Mapping[str, Any]) -> None:
        """Nothing to reset: each turn is sampled from the messages in `info`."""

    def seed_episode(self, seed: int) -> None:
        """Seed this episode's requests from `seed` (each worker's agent has its own)."""
        if self.seed is not None:
            with self._draw_lock:
                self.seed = int(seed)
                self._draws = itertools.count()

    def act(self, observation: str, info: Mapping[str, Any]) -> TokenText:
        """The next turn, prompted with the env's `info["student_prompt"]` ids when the OPD
        wrapper offers them (the same rendering the teacher's context is built from)."""
        offered = info.get("student_prompt")
        ids = offered.get("ids") if isinstance(offered, Mapping) else None
        return self.sample(info["messages"], info.get("tools"), prompt_ids=ids)

    def sample(
        self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None,
        prompt_ids: Sequence[int] | None = None,
    ) -> TokenText:
        """One assistant turn for `messages` (or the given `prompt_ids` of them), ending at
        the end-of-turn token or the cap."""
        prompt = ([int(i) for i in prompt_ids] if prompt_ids is not None
                  else render_prompt(self.tokenizer, messages, tools))
        budget = self.max_tokens
        if self.max_model_len is not None:
            budget = min(budget, int(self.max_model_len) - len(prompt))
            if budget < 1:
                raise ConfigError(f"the prompt has {len(prompt)} tokens: no room left in the "
                                 f"model's max_model_len {self.max_model_len} to sample a turn")
        body: dict[str, Any] = {
            "model": self.model,
            "prompt": prompt,
            "max_tokens": budget,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "logprobs": 0,
            "return_token_ids": True,
            "add_special_tokens": False,
            "skip_special_tokens": False,
            **self.extra_body,
        }
        if self.seed is not None:
            with self._draw_lock:
                body["seed"] = (self.seed * 1_000_003 + next(self._draws)) % 2**31
        choice = self.client.call("POST", "completions", body)["choices"][0]
        ids = [int(t) for t in choice.get("token_ids") or []]
        logprobs = [float(x) for x in (choice.get("logprobs") or {}).get("token_logprobs") or []]
        if len(logprobs) != len(ids) or (not ids and choice.get("text")):
            raise ModelUnavailable(f"the vLLM server returned {len(ids)} token ids and "
                               f"{len(logprobs)} logprobs; it needs return_token_ids support")
        eos = self.tokenizer.eos_token_id
        body_ids = ids[:-1] if ids and ids[-1] == eos else ids
        text = self.tokenizer.decode(body_ids, skip_special_tokens=False)
        return TokenText(text, token_ids=ids,
                         logprobs=logprobs if self.returns_logprobs else None, prompt_ids=prompt)

    def close(self) -> None:
        """Close the connections to the server."""
        self.client.close()
