"""A teacher backed by a local transformers causal LM, with chunked top-K and KV-cache reuse.

Cost model: logits at position t predict token t + 1, and only the rows that predict scored
tokens are projected through the LM head (`logits_to_keep` with explicit row indices). Each
forward pass runs at most `prefill_chunk` new tokens on top of the KV cache and projects at
most `chunk_rows` rows, which are reduced to logsumexp + top-K at once, so peak memory is
bounded by `chunk_rows x vocab` instead of `tokens x vocab`; the architecture's own forward
(including any logit scaling or soft-capping) is used unchanged. The KV cache of the last
scored sequence is kept: a new request only runs the tokens after its longest common prefix
with it (the cache is cropped back to that prefix), so the turns of one episode (same
context, growing) cost about their new tokens, not the context.
"""

from __future__ import annotations

import inspect
import os
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from opd_gym.models.dtypes import DEFAULTS, normalize_dtype, resolve_dtype
from opd_gym.opd.teachers.base import ScoreRequest, SpanScores, validate_requests

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16,
           "float64": torch.float64}


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two id sequences."""
    n = min(len(a), len(b))
    if n and a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # binary search on prefix equality (slices compare in C)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


class TransformersTeacher:
    """Score student tokens with a transformers causal LM (see module doc for the cost model).

    `model_path_or_model` is a local folder (loaded with from_pretrained) or a loaded model
    (moved/cast in place; pass its `tokenizer`). Each forward pass runs at most
    `prefill_chunk` tokens and projects at most `chunk_rows` scored rows. `reuse_cache=False`
    re-prefills every request from scratch (for comparison and benchmarks).
    """

    def __init__(
        self,
        model_path_or_model: str | os.PathLike[str] | Any,
        *,
        tokenizer: Any = None,
        device: str = "cpu",
        dtype: str | None = "auto",
        max_model_len: int | None = None,
        chunk_rows: int = 256,
        prefill_chunk: int = 2048,
        reuse_cache: bool = True,
        name: str | None = None,
    ) -> None:
        if chunk_rows < 1 or prefill_chunk < 1:
            raise ValueError("chunk_rows and prefill_chunk must be >= 1")
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if isinstance(model_path_or_model, str | os.PathLike):
            path = os.fspath(model_path_or_model)
            dtype = resolve_dtype(dtype, path)
            model = AutoModelForCausalLM.from_pretrained(path, dtype=_DTYPES.get(dtype, "auto"))
            tokenizer = tokenizer if tokenizer is not None else AutoTokenizer.from_pretrained(path)
            name = name or path
        else:
            model = model_path_or_model
            if dtype not in DEFAULTS:  # a loaded model keeps its dtype unless one is named
                model = model.to(_DTYPES[normalize_dtype(str(dtype))])
            if tokenizer is None:
                tokenizer = AutoTokenizer.from_pretrained(model.config.name_or_path)
            name = name or str(model.config.name_or_path or type(model).__name__)
        self.model = model.to(device).eval()
        self.dtype = str(next(self.model.parameters()).dtype).removeprefix("torch.")
        self.max_model_len = max_model_len
        self.tokenizer = tokenizer
        self.name = name
        self.device = torch.device(device)
        self.chunk_rows = int(chunk_rows)
        self.prefill_chunk = int(prefill_chunk)
        self.reuse_cache = bool(reuse_cache)
        self.tokens_processed = 0  # rows run through the model body, for cost accounting
        self._keeps_logits = "logits_to_keep" in inspect.signature(self.model.forward).parameters
        self._lock = threading.Lock()
        self._cache: Any = None
        self._cached_ids: list[int] = []

    @property
    def vocab_size(self) -> int:
        """Rows of the output distribution (the LM head's size, may exceed len(tokenizer))."""
        return int(self.model.get_output_embeddings().weight.shape[0])

    def reset_cache(self) -> None:
        """Drop the kept KV cache (frees its memory; the next request re-prefills)."""
        with self._lock:
            self._drop_cache()

    def score(self, requests: Sequence[ScoreRequest], topk: int) -> list[list[SpanScores]]:
        """Per request, per span: sampled-token logprobs and raw top-K (thread-safe)."""
        requests = list(requests)
        validate_requests(requests, topk, self.vocab_size)
        limit = self.max_model_len or getattr(self.model.config.get_text_config(),
                                              "max_position_embeddings", None)
        for i, req in enumerate(requests):
            if limit and len(req.ids) > limit:
                what = "max_model_len" if self.max_model_len else "max_position_embeddings"
                raise ValueError(f"request {i} has {len(req.ids)} ids, more than the teacher's "
                                 f"{what} {limit}")
        # Lexicographic order walks shared prefixes depth-first: adjacent requests share most.
        order = sorted(range(len(requests)), key=lambda i: requests[i].ids) \
            if self.reuse_cache else range(len(requests))
        results: list[list[SpanScores]] = [[] for _ in requests]
        with self._lock, torch.inference_mode():
            for i in order:
                try:
                    results[i] = self._score_one(requests[i], int(topk))
                except BaseException:
                    self._drop_cache()  # a half-updated cache must never be reused
                    raise
        return results

    def _drop_cache(self) -> None:
        self._cache = None
        self._cached_ids = []

    def _fresh_cache(self) -> Any:
        from transformers import DynamicCache

        return DynamicCache(config=self.model.config)

    def _prepare_cache(self, ids: list[int], reusable: int) -> int:
        """Make the cache hold ids[:n] for the largest usable n <= reusable; return n."""
        if not self.reuse_cache or self._cache is None:
            self._cache = self._fresh_cache()
            self._cached_ids = []
            return 0
        keep = min(_common_prefix(self._cached_ids, ids), reusable)
        remove = len(self._cached_ids) - keep
        if remove > 0:
            try:
                self._cache.crop(-remove)  # negative = number of tokens to drop
            except (RuntimeError, ValueError):  # e.g. sliding-window layers past their window
                self._cache = self._fresh_cache()
                self._cached_ids = []
                return 0
            self._cached_ids = self._cached_ids[:keep]
        if self._cache.get_seq_length() != keep:
            self._cache = self._fresh_cache()
            self._cached_ids = []
            return 0
        return keep

    def _forward(self, chunk: list[int], rows: list[int] | None) -> torch.Tensor | None:
        """Run `chunk` on top of the cache; return float32 logits [len(rows), V] for local rows."""
        input_ids = torch.tensor([chunk], dtype=torch.long, device=self.device)
        kwargs: dict[str, Any] = {"past_key_values": self._cache, "use_cache": True}
        if self._keeps_logits:
            index = rows if rows else [len(chunk) - 1]  # nothing needed: project a single row
            kwargs["logits_to_keep"] = torch.tensor(index, dtype=torch.long, device=self.device)
        out = self.model(input_ids=input_ids, **kwargs)
        self._cache = out.past_key_values
        self._cached_ids.extend(chunk)
        self.tokens_processed += len(chunk)
        if not rows:
            return None
        logits = out.logits[0]
        if not self._keeps_logits:
            logits = logits[torch.tensor(rows, dtype=torch.long, device=logits.device)]
        return logits.float()

    def _score_one(self, req: ScoreRequest, topk: int) -> list[SpanScores]:
        ids = list(req.ids)
        live = [(s, e) for s, e in req.spans if e > s]
        if not live:
            return [SpanScores.empty(topk) for _ in req.spans]
        first_row = min(s for s, _ in live) - 1  # row p predicts token p + 1
        feed_end = max(e for _, e in live) - 1  # rows [0, feed_end) are needed at most
        needed = np.zeros(feed_end, np.bool_)
        for s, e in live:
            needed[s - 1:e - 1] = True

        n_rows = feed_end - first_row
        token_lp = np.full(n_rows, np.nan, np.float32)
        top_ids = np.full((n_rows, topk), -1, np.int32)
        top_lp = np.full((n_rows, topk), np.nan, np.float32)
        targets = torch.tensor(ids[first_row + 1:feed_end + 1], dtype=torch.long,
                               device=self.device)

        pos = self._prepare_cache(ids, reusable=first_row)
        rows_needed = np.flatnonzero(needed)  # sorted absolute row positions
        while pos < feed_end:
            # One forward covers at most prefill_chunk tokens and at most chunk_rows scored rows.
            end = min(feed_end, pos + self.prefill_chunk)
            lo = int(np.searchsorted(rows_needed, pos))
            if lo + self.chunk_rows < len(rows_needed):
                end = min(end, int(rows_needed[lo + self.chunk_rows]))
            rows = rows_needed[lo:int(np.searchsorted(rows_needed, end))]
            logits = self._forward(ids[pos:end], (rows - pos).tolist())
            if logits is not None:
                at = rows - first_row
                lse = torch.logsumexp(logits, dim=-1)
                tgt = targets[torch.from_numpy(at).to(self.device)]
                token_lp[at] = (logits.gather(1, tgt[:, None])[:, 0] - lse).cpu().numpy()
                if topk:
                    vals, idx = torch.topk(logits, topk, dim=-1, largest=True, sorted=True)
                    top_lp[at] = (vals - lse[:, None]).cpu().numpy()
                    top_ids[at] = idx.to(torch.int32).cpu().numpy()
                del logits
            pos = end

        out = []
        for s, e in req.spans:
            if e <= s:
                out.append(SpanScores.empty(topk))
                continue
            a, b = s - 1 - first_row, e - 1 - first_row
            out.append(SpanScores(token_lp[a:b].copy(), top_ids[a:b].copy(), top_lp[a:b].copy()))
        return out
