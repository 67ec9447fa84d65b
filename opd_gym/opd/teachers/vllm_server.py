"""A teacher backed by a running vLLM OpenAI-compatible server (`/v1/completions`).

Each ScoreRequest becomes one completion request with the prompt as a token-id list,
`max_tokens=1` and `prompt_logprobs=K`; only the rows of the requested spans are kept.
Requests run concurrently (bounded by `max_in_flight`, shared by every caller of the same
teacher), so all turns of an episode, and of several episodes, are in flight together.

Cost model: vLLM skips prefix-cache reads for prompt-logprob requests, so every request
re-prefills its whole prompt and materialises top-K for every prompt row. One request per
turn costs O(turns x context); the `episode` hint scope sends one request per episode (one
row per token). Tokens after the last span are never sent.
"""

from __future__ import annotations

import functools
import re
import threading
import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from opd_gym.errors import ConfigError
from opd_gym.models.client import (
    ModelClient,
    ModelRejected,
    ModelUnavailable,
    split_base_url,  # noqa: F401  (importable from here, as before)
)
from opd_gym.models.tokenizer import served_tokenizer
from opd_gym.opd.teachers.base import (
    ScoreRequest,
    SpanScores,
    reject_candidates,
    validate_requests,
)
from opd_gym.opd.teachers.vllm_common import (
    check_length,
    feed_length,
    rows_from_dicts,
    scored_positions,
    served_limit,
    split_spans,
)

_CAP_RE = re.compile(r"greater than max allowed:\s*(\d+)")
_PROBE_MESSAGES = [
    {"role": "system", "content": "You are a careful coding assistant."},
    {"role": "user", "content": "Fix total() in main.py: héllo wörld, 你好, tabs\tand\nnewlines."},
    {"role": "assistant", "content": "def total(xs):\n    return sum(xs)  # 0 <= n < 10**9"},
]


# The HTTP layer is the models layer's one client; these names stay importable from here.
ServerUnavailable = ModelUnavailable
TeacherUnavailable = ModelUnavailable
ServerRejected = ModelRejected
VLLMClient = ModelClient


class LogprobCapError(ModelRejected):
    """The server refused the requested top-K: it is above its `--max-logprobs`."""


class VLLMServerTeacher:
    """Score student tokens with a vLLM server (see module doc for the cost model).

    Args:
        base_url: the server, e.g. "http://127.0.0.1:8000" (a trailing "/v1" is accepted).
        model: the served model name; the first listed model when None.
        tokenizer: tokenizer object or local path of the served model (chat templates are
            rendered here); defaults to the served model's path as the server reports it.
        max_in_flight: concurrent requests to the server (shared by all callers).
        timeout: seconds to wait for one response; retries: extra attempts after a timeout,
            a connection error, a 429 or a 5xx, each after `backoff * 2**attempt` seconds.
        check_tokenizer: on start, compare the server's tokenization (`/tokenize`,
            `/detokenize`) with the local tokenizer and refuse a mismatch.
        vocab_size: rows of the model's output distribution, when the local config of the
            model cannot be read (defaults to the larger of config and tokenizer sizes).
    """

    supports_candidates = False  # prompt_logprobs give the server's own top-K only

    def __init__(
        self,
        base_url: str,
        *,
        model: str | None = None,
        tokenizer: Any = None,
        api_key: str | None = None,
        max_in_flight: int = 8,
        timeout: float = 300.0,
        connect_timeout: float = 10.0,
        retries: int = 2,
        backoff: float = 0.5,
        check_tokenizer: bool = True,
        vocab_size: int | None = None,
        name: str | None = None,
    ) -> None:
        if max_in_flight < 1:
            raise ConfigError("max_in_flight must be >= 1")
        self.client = VLLMClient(base_url, api_key=api_key, timeout=timeout,
                                 connect_timeout=connect_timeout, retries=retries,
                                 backoff=backoff, max_connections=max_in_flight)
        self.root, self.api = self.client.root, self.client.api
        self.max_in_flight = int(max_in_flight)
        self._pool = ThreadPoolExecutor(self.max_in_flight, thread_name_prefix="vllm-teacher")
        try:
            info = self.client.served_model(model)
            self.model = str(info["id"])
            self.max_model_len = info.get("max_model_len")
            self.tokenizer, source = served_tokenizer(tokenizer, info)
            self._vocab_size = int(vocab_size) if vocab_size else _vocab_size(self.tokenizer,
                                                                                source)
            if check_tokenizer:
                self.check_tokenizer()
        except BaseException:
            self.close()
            raise
        self.name = name or f"vllm:{self.root} [{self.model}]"
        self.rows_scored = 0  # prompt rows the server computed, for cost accounting
        self._count = threading.Lock()

    @property
    def context_limit(self) -> int | None:
        """The longest input scored (max_model_len - 1; None when unknown)."""
        return served_limit(self.max_model_len)

    @property
    def vocab_size(self) -> int:
        """Rows of the teacher's output distribution (top-K is bounded by it)."""
        return self._vocab_size

    def check_tokenizer(self) -> None:
        """Raise ConfigError if the server tokenizes or decodes differently from the local one."""
        tok = self.tokenizer
        text = tok.apply_chat_template(_PROBE_MESSAGES, tokenize=False) \
            if getattr(tok, "chat_template", None) else \
            "\n".join(str(m["content"]) for m in _PROBE_MESSAGES)
        local = [int(i) for i in tok.encode(text, add_special_tokens=False)]
        try:
            served = self.client.call("POST", "/tokenize", {"model": self.model, "prompt": text,
                                                            "add_special_tokens": False})
        except ServerRejected as exc:
            if "tokenizer" not in exc.detail.lower():
                raise
            self._check_vocab_only()
            return
        served_ids = [int(i) for i in served["tokens"]]
        if served_ids != local:
            at = next((i for i, (a, b) in enumerate(zip(local, served_ids, strict=False))
                       if a != b), min(len(local), len(served_ids)))
            raise ConfigError(
                f"tokenizer mismatch: the vLLM server at {self.root} ({self.model}) tokenizes "
                f"a probe text differently from the local tokenizer {self._tok_name()} (first "
                f"difference at token {at}: local {local[at:at + 3]} vs server "
                f"{served_ids[at:at + 3]}); serve the same model or pass its tokenizer")
        n = min(len(tok), self._vocab_size)
        probe = sorted({*range(0, n, max(n // 97, 1)), n - 1})
        served_text = self.client.call("POST", "/detokenize",
                                       {"model": self.model, "tokens": probe})["prompt"]
        if served_text != tok.decode(probe):
            raise ConfigError(
                f"tokenizer mismatch: the vLLM server at {self.root} ({self.model}) decodes "
                f"ids across the vocabulary differently from the local tokenizer "
                f"{self._tok_name()}; serve the same model or pass its tokenizer")

    def _check_vocab_only(self) -> None:
        """A server without a tokenizer (--skip-tokenizer-init): check what can be checked."""
        last = self._vocab_size - 1
        try:
            self.client.call("POST", f"{self.api}/completions",
                             {"model": self.model, "prompt": [last], "max_tokens": 1})
        except ServerRejected as exc:
            raise ConfigError(f"tokenizer mismatch: the vLLM server at {self.root} rejects token "
                             f"id {last} of the local tokenizer {self._tok_name()}: "
                             f"{exc.detail}") from None
        warnings.warn(f"the vLLM server at {self.root} runs without a tokenizer "
                      "(--skip-tokenizer-init): only the vocabulary size was checked; make sure "
                      f"the local tokenizer {self._tok_name()} is the served model's",
                      RuntimeWarning, stacklevel=3)

    def _tok_name(self) -> str:
        return repr(getattr(self.tokenizer, "name_or_path", type(self.tokenizer).__name__))

    def score(self, requests: Sequence[ScoreRequest], topk: int) -> list[list[SpanScores]]:
        """Per request, per span: sampled-token logprobs and raw top-K (requests in parallel)."""
        requests = list(requests)
        validate_requests(requests, topk, self._vocab_size)
        reject_candidates(requests, "vLLM server")
        for i, req in enumerate(requests):
            check_length(i, feed_length(req), self.max_model_len)
        futures = [self._pool.submit(self._score_one, req, int(topk)) for req in requests]
        try:
            return [future.result() for future in futures]
        except BaseException:
            for future in futures:
                future.cancel()  # a failed batch must not keep the server busy
            raise

    def _score_one(self, req: ScoreRequest, topk: int) -> list[SpanScores]:
        positions = scored_positions(req)
        if not len(positions):
            return [SpanScores.empty(topk) for _ in req.spans]
        prompt = list(req.ids[: feed_length(req)])
        body = {
            "model": self.model,
            "prompt": prompt,
            "max_tokens": 1,
            "prompt_logprobs": topk,
            "temperature": 1.0,
            "top_p": 1.0,
            "top_k": 0,
            "n": 1,
            "add_special_tokens": False,
        }
        try:
            answer = self.client.call("POST", f"{self.api}/completions", body,
                                      decode=_completion_decoder())
        except ServerRejected as exc:
            cap = _CAP_RE.search(exc.detail)
            if cap:
                raise LogprobCapError(
                    f"the vLLM server at {self.root} caps logprobs at {cap.group(1)} but top-K "
                    f"{topk} was requested: restart it with --max-logprobs {topk} (or more), "
                    f"or lower topk to {cap.group(1)} or less", exc.status, exc.detail) from None
            raise
        try:
            rows = answer["choices"][0]["prompt_logprobs"]
        except (KeyError, IndexError, TypeError, AttributeError) as exc:
            raise ServerUnavailable(f"vLLM answer without prompt_logprobs: {exc}") from exc
        if rows is None or len(rows) != len(prompt):
            raise ServerUnavailable(
                f"vLLM returned {0 if rows is None else len(rows)} prompt-logprob rows for a "
                f"{len(prompt)}-token prompt")
        with self._count:
            self.rows_scored += len(prompt)
        token_lp, top_ids, top_lp = rows_from_dicts(prompt, positions, rows, topk)
        return split_spans(req, positions, token_lp, top_ids, top_lp, topk)

    def close(self) -> None:
        """Stop retrying, drop queued requests, wait for those in flight, close connections."""
        self.client.close()
        self._pool.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> VLLMServerTeacher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@functools.cache
def _completion_decoder() -> Callable[[bytes], Any] | None:
    """A typed msgspec decoder of prompt-logprob answers (~3x faster than json, and it skips
    the decoded token strings); None (plain json) when msgspec, a vLLM dependency, is absent."""
    try:
        import msgspec
    except ImportError:
        return None

    entry = msgspec.defstruct("Entry", [("logprob", float), ("rank", int | None, None)])
    choice = msgspec.defstruct(
        "Choice", [("prompt_logprobs", list[dict[int, entry] | None] | None, None)])
    answer_type = msgspec.defstruct("Answer", [("choices", list[choice])])
    decoder = msgspec.json.Decoder(answer_type)

    def decode(content: bytes) -> dict[str, Any]:
        try:
            answer = decoder.decode(content)
        except msgspec.DecodeError as exc:
            raise ValueError(str(exc)) from exc
        return {"choices": [{"prompt_logprobs": c.prompt_logprobs} for c in answer.choices]}

    return decode


def _vocab_size(tokenizer: Any, source: str | None) -> int:
    """The larger of the model config's vocab_size (when readable locally) and the tokenizer's."""
    size = len(tokenizer)
    if source:
        try:
            from transformers import AutoConfig

            config = AutoConfig.from_pretrained(source)
            size = max(size, int(getattr(config.get_text_config(), "vocab_size", 0) or 0))
        except (OSError, ValueError, TypeError, AttributeError):
            pass
    return size

