"""A teacher backed by a local transformers causal LM: per-prefix KV caches, batched scoring.

Cost model: logits at position t predict token t + 1, and only the rows that predict scored
tokens are projected through the LM head, `chunk_rows` rows at a time, each chunk reduced to
logsumexp + top-K (+ candidate logprobs) at once, so peak memory is bounded by
`chunk_rows x vocab` instead of `tokens x vocab`. Each forward pass runs at most
`prefill_chunk` new tokens of a sequence on top of its KV cache.

KV reuse (`reuse_cache`): a pool of per-prefix caches (kv_cache.KVCachePool) under a token
budget (`cache_budget_tokens`, or `cache_budget_bytes` converted with the model's KV bytes per
token), least recently used evicted. A request extends the cached sequence sharing its longest
prefix, so the turns of one episode cost about their new tokens even when turns of other
episodes (parallel envs sharing this teacher) are scored in between.

Batching (`batching`): requests given in one `score()` call and requests from concurrent
`score()` calls (collected for `batch_window_ms` by batching.BatchScheduler, up to
`batch_tokens`) run as batched forward passes: each sequence's cache is left-padded to the
longest, its new tokens right-padded, with an attention mask and explicit positions; the
decoder's hidden states are gathered at the scored rows only and projected through the LM
head (any final logit soft-capping or scale the config names is applied; a one-off check
against the model's own forward falls back to one request per pass if they disagree).
"""

from __future__ import annotations

import inspect
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from opd_gym.errors import ConfigError
from opd_gym.models.dtypes import DEFAULTS, normalize_dtype, resolve_dtype
from opd_gym.opd.teachers.base import (
    ContextTooLong,
    ScoreRequest,
    SpanScores,
    validate_requests,
)
from opd_gym.opd.teachers.batching import BatchScheduler
from opd_gym.opd.teachers.kv_cache import KVCachePool, common_prefix

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16,
           "float64": torch.float64}

DEFAULT_CACHE_BUDGET_TOKENS = 65536

_common_prefix = common_prefix  # the old private name, kept for importers


@dataclass
class _Seq:
    """One request being scored: its feed range, scored rows and output buffers."""

    req: ScoreRequest
    topk: int
    ids: list[int]
    first_row: int = 0
    feed_end: int = 0
    rows: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    targets: torch.Tensor | None = None
    token_lp: np.ndarray | None = None
    top_ids: np.ndarray | None = None
    top_lp: np.ndarray | None = None
    cand: list[tuple[int, int, int, torch.Tensor, np.ndarray]] = field(default_factory=list)
    cache: Any = None
    pos: int = 0
    wave: int = 0
    result: list[SpanScores] | None = None


class TransformersTeacher:
    """Score student tokens with a transformers causal LM (see module doc for the cost model).

    `model_path_or_model` is a local folder (loaded with from_pretrained) or a loaded model
    (moved/cast in place; pass its `tokenizer`). Each forward pass runs at most
    `prefill_chunk` tokens per sequence and `batch_tokens` padded tokens in all; LM-head rows
    are projected `chunk_rows` at a time. `reuse_cache=False` re-prefills every request from
    scratch (for comparison and benchmarks); `batching=False` runs one request per pass.
    KV caches are kept per prefix up to `cache_budget_tokens` (default 65,536) or
    `cache_budget_bytes`, and at most `cache_max_sequences` sequences (None: no cap; 1: the
    old single cache). Concurrent calls are collected for up to `batch_window_ms`.
    Counters: `tokens_processed` (rows run through the model body), `padded_tokens_processed`
    (including padding), `forward_passes`.
    """

    supports_candidates = True  # scores given ids (e.g. the student's top-K) per position

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
        cache_budget_tokens: int | None = None,
        cache_budget_bytes: int | None = None,
        cache_max_sequences: int | None = None,
        batching: bool = True,
        batch_window_ms: float = 2.0,
        batch_tokens: int = 16384,
        temperature: float = 1.0,
    ) -> None:
        if not temperature > 0:
            raise ConfigError(f"teacher temperature must be > 0, got {temperature!r}")
        if chunk_rows < 1 or prefill_chunk < 1:
            raise ValueError("chunk_rows and prefill_chunk must be >= 1")
        if batch_tokens < 1:
            raise ConfigError(f"batch_tokens must be >= 1, got {batch_tokens!r}")
        if cache_budget_tokens is not None and cache_budget_bytes is not None:
            raise ConfigError("give cache_budget_tokens or cache_budget_bytes, not both")
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
        self.batch_tokens = int(batch_tokens)
        self.temperature = float(temperature)  # logprobs of softmax(logits / temperature)
        self.tokens_processed = 0  # rows run through the model body, for cost accounting
        self.padded_tokens_processed = 0  # the same, padding included
        self.forward_passes = 0
        self._keeps_logits = "logits_to_keep" in inspect.signature(self.model.forward).parameters
        if cache_budget_bytes is not None:
            if cache_budget_bytes < 0:
                raise ConfigError(f"cache_budget_bytes must be >= 0, got {cache_budget_bytes}")
            budget = int(cache_budget_bytes) // max(1, self.kv_bytes_per_token)
        else:
            budget = DEFAULT_CACHE_BUDGET_TOKENS if cache_budget_tokens is None \
                else cache_budget_tokens
        self.cache_pool = KVCachePool(budget, max_entries=cache_max_sequences)
        self._decomposed: bool | None = None  # decoder + LM head == model forward? (checked once)
        self._lock = threading.Lock()
        self._scheduler: BatchScheduler[tuple[ScoreRequest, int], list[SpanScores]] = \
            BatchScheduler(self._run_locked, window_s=batch_window_ms / 1000.0,
                           max_tokens=self.batch_tokens, size=lambda x: len(x[0].ids),
                           enabled=batching)

    @property
    def batching(self) -> bool:
        """Whether concurrent and multi-request calls run as batched forward passes."""
        return self._scheduler.enabled

    @property
    def context_limit(self) -> int | None:
        """The longest input scored: `max_model_len` if given, else the model's
        max_position_embeddings (None when the config has neither)."""
        limit = self.max_model_len or getattr(self.model.config.get_text_config(),
                                              "max_position_embeddings", None)
        return int(limit) if limit else None

    @property
    def vocab_size(self) -> int:
        """Rows of the output distribution (the LM head's size, may exceed len(tokenizer))."""
        return int(self.model.get_output_embeddings().weight.shape[0])

    @property
    def kv_bytes_per_token(self) -> int:
        """Bytes of KV cache one token takes (keys + values, all layers) in the model's dtype."""
        cfg = self.model.config.get_text_config()
        heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        size = torch.tensor([], dtype=next(self.model.parameters()).dtype).element_size()
        return int(2 * cfg.num_hidden_layers * heads * head_dim * size)

    def reset_cache(self) -> None:
        """Drop every kept KV cache (frees their memory; the next requests re-prefill)."""
        with self._lock:
            self.cache_pool.clear()

    def score(self, requests: Sequence[ScoreRequest], topk: int) -> list[list[SpanScores]]:
        """Per request, per span: sampled-token logprobs and raw top-K (thread-safe)."""
        requests = list(requests)
        validate_requests(requests, topk, self.vocab_size)
        limit = self.context_limit
        for i, req in enumerate(requests):
            if limit and len(req.ids) > limit:
                what = "max_model_len" if self.max_model_len else "max_position_embeddings"
                raise ContextTooLong(f"request {i} has {len(req.ids)} ids, more than the "
                                     f"teacher's {what} {limit}")
        if not requests:
            return []
        return self._scheduler.submit([(req, int(topk)) for req in requests])

    # -- one batch (the scheduler's leader runs it) -------------------------------------------

    def _run_locked(self, items: list[tuple[ScoreRequest, int]]) -> list[list[SpanScores]]:
        with self._lock, torch.inference_mode():
            return self._run(items)

    def _run(self, items: list[tuple[ScoreRequest, int]]) -> list[list[SpanScores]]:
        """Score a batch: plan waves (a request extending another waits for it), run each."""
        seqs = [self._plan(req, topk) for req, topk in items]
        live = [s for s in seqs if s.result is None]
        if self._decomposed is None and live:
            self._decomposed = self._check_decomposed()
        if self.reuse_cache:
            # Lexicographic order puts each request next to the one sharing most of its prefix;
            # it waits a wave for that request (the next turn of the same episode, say) when
            # the prefix it leaves in the pool is longer than what the pool has now.
            live.sort(key=lambda s: s.req.ids)
            for prev, cur in zip(live, live[1:], strict=False):
                _, from_pool = self.cache_pool.best(cur.ids, cur.first_row)
                from_prev = min(common_prefix(prev.ids[:prev.feed_end], cur.ids), cur.first_row)
                if from_prev > from_pool:
                    cur.wave = prev.wave + 1
        for wave in sorted({s.wave for s in live}):
            group = [s for s in live if s.wave == wave]
            try:
                self._attach_caches(group)
                self._prefill(group)
            finally:
                for s in group:  # finished caches go back; a failed one is dropped
                    if self.reuse_cache and s.cache is not None and s.pos == s.feed_end:
                        self.cache_pool.put(s.ids[:s.feed_end], s.cache)
                    s.cache = None
                self.cache_pool.evict()
            for s in group:
                s.result = self._finish(s)
        return [s.result for s in seqs]  # type: ignore[misc]

    def _plan(self, req: ScoreRequest, topk: int) -> _Seq:
        """Work out the rows a request needs; requests with nothing to score finish here."""
        seq = _Seq(req, topk, list(req.ids))
        cands = req.candidates or (None,) * len(req.spans)
        live = [(s, e) for s, e in req.spans if e > s]
        if not live:
            seq.result = [SpanScores.empty(topk, None if c is None else c.shape[1])
                          for c in cands]
            return seq
        seq.first_row = min(s for s, _ in live) - 1  # row p predicts token p + 1
        seq.feed_end = max(e for _, e in live) - 1  # rows [0, feed_end) are needed at most
        needed = np.zeros(seq.feed_end, np.bool_)
        for s, e in live:
            needed[s - 1:e - 1] = True
        seq.rows = np.flatnonzero(needed)
        n_rows = seq.feed_end - seq.first_row
        seq.token_lp = np.full(n_rows, np.nan, np.float32)
        seq.top_ids = np.full((n_rows, topk), -1, np.int32)
        seq.top_lp = np.full((n_rows, topk), np.nan, np.float32)
        seq.targets = torch.tensor(seq.ids[seq.first_row + 1:seq.feed_end + 1], dtype=torch.long,
                                   device=self.device)
        for k, ((s, e), c) in enumerate(zip(req.spans, cands, strict=True)):
            if c is not None and e > s:
                seq.cand.append((k, s, e, torch.tensor(c, device=self.device),
                                 np.full(c.shape, np.nan, np.float32)))
        return seq

    def _attach_caches(self, group: list[_Seq]) -> None:
        """Give each sequence the pooled cache sharing its longest usable prefix, or a new one."""
        taken: set[int] = set()
        for s in group:
            if self.reuse_cache:
                entry, keep = self.cache_pool.best(s.ids, s.first_row, exclude=taken)
                if entry is not None:
                    taken.add(entry.key)
                entry = self.cache_pool.checkout(entry, keep)
                if entry is not None:
                    s.cache, s.pos = entry.cache, keep
                    continue
            s.cache, s.pos = self._fresh_cache(), 0

    def _fresh_cache(self) -> Any:
        from transformers import DynamicCache

        return DynamicCache(config=self.model.config)

    def _batchable(self, seqs: list[_Seq]) -> bool:
        """Stacking caches needs plain (non-sliding) dynamic layers and the decomposed head."""
        from transformers.cache_utils import DynamicLayer

        if not self._decomposed:
            return False
        return all(type(layer) is DynamicLayer for s in seqs for layer in s.cache.layers)

    def _prefill(self, group: list[_Seq]) -> None:
        """Run every sequence of a wave to its feed end, batching those that fit together."""
        while True:
            active = [s for s in group if s.pos < s.feed_end]
            if not active:
                return
            if not self._batchable(active):
                for s in active:
                    self._step([s])
                continue
            active.sort(key=lambda s: s.pos)  # similar cache lengths pad least
            sub: list[_Seq] = []
            for s in active:
                width = max([min(x.feed_end - x.pos, self.prefill_chunk) for x in sub + [s]])
                if sub and width * (len(sub) + 1) > self.batch_tokens:
                    self._step(sub)
                    sub = []
                sub.append(s)
            self._step(sub)

    def _step(self, batch: list[_Seq]) -> None:
        """One forward pass: the next chunk of each sequence on top of its cache."""
        ends = []
        for s in batch:
            end = min(s.feed_end, s.pos + self.prefill_chunk)
            if len(batch) == 1 and not self._decomposed:
                lo = int(np.searchsorted(s.rows, s.pos))  # the model's own head: bound its rows
                if lo + self.chunk_rows < len(s.rows):
                    end = min(end, int(s.rows[lo + self.chunk_rows]))
            ends.append(end)
        lengths = [e - s.pos for e, s in zip(ends, batch, strict=True)]
        width = max(lengths)
        self.tokens_processed += sum(lengths)
        self.padded_tokens_processed += width * len(batch)
        self.forward_passes += 1
        local = [s.rows[np.searchsorted(s.rows, s.pos):np.searchsorted(s.rows, e)]
                 for s, e in zip(batch, ends, strict=True)]
        if len(batch) == 1:
            s = batch[0]
            input_ids = torch.tensor([s.ids[s.pos:ends[0]]], dtype=torch.long, device=self.device)
            if not self._decomposed:
                self._step_model_head(s, input_ids, local[0])
                s.pos = ends[0]
                return
            out = self.model.get_decoder()(input_ids=input_ids, past_key_values=s.cache,
                                           use_cache=True)
            s.cache = out.past_key_values
            hidden = [out.last_hidden_state[0]]
        else:
            hidden = self._batched_body(batch, ends, width)
        for s, e, h, rows in zip(batch, ends, hidden, local, strict=True):
            if len(rows):
                self._project(s, h[torch.as_tensor(rows - s.pos, device=self.device)], rows)
            s.pos = e

    def _batched_body(self, batch: list[_Seq], ends: list[int], width: int) -> list[torch.Tensor]:
        """Decoder pass over padded caches + chunks; split caches back; return hidden states."""
        from transformers import DynamicCache

        pasts = [s.pos for s in batch]
        pmax = max(pasts)
        b = len(batch)
        input_ids = torch.zeros((b, width), dtype=torch.long, device=self.device)
        mask = torch.zeros((b, pmax + width), dtype=torch.long, device=self.device)
        positions = torch.zeros((b, width), dtype=torch.long, device=self.device)
        for i, (s, e) in enumerate(zip(batch, ends, strict=True)):
            n = e - s.pos
            input_ids[i, :n] = torch.tensor(s.ids[s.pos:e], dtype=torch.long)
            mask[i, pmax - s.pos:pmax + n] = 1
            positions[i] = torch.arange(s.pos, s.pos + width)
        cache = DynamicCache(config=self.model.config)
        if pmax:
            for layer_idx, layer in enumerate(cache.layers):
                parts = [s.cache.layers[layer_idx] for s in batch]
                ref = next(p for p in parts if p.is_initialized and p.keys.numel())
                shape = (b, ref.keys.shape[1], pmax, ref.keys.shape[3])
                keys = ref.keys.new_zeros(shape)
                values = ref.values.new_zeros(shape[:3] + (ref.values.shape[3],))
                for i, (p, past) in enumerate(zip(parts, pasts, strict=True)):
                    if past:
                        keys[i, :, pmax - past:] = p.keys[0]
                        values[i, :, pmax - past:] = p.values[0]
                layer.update(keys, values)
            for s in batch:
                s.cache = None  # the stacked copy replaces them; frees memory early
        out = self.model.get_decoder()(input_ids=input_ids, attention_mask=mask,
                                       position_ids=positions, past_key_values=cache,
                                       use_cache=True)
        cache = out.past_key_values
        for i, (s, e) in enumerate(zip(batch, ends, strict=True)):
            own = DynamicCache(config=self.model.config)
            lo, hi = pmax - s.pos, pmax + (e - s.pos)
            for layer_idx, layer in enumerate(own.layers):
                full = cache.layers[layer_idx]
                layer.update(full.keys[i:i + 1, :, lo:hi].clone(),
                             full.values[i:i + 1, :, lo:hi].clone())
            s.cache = own
        del cache
        return list(out.last_hidden_state)

    def _head(self, hidden: torch.Tensor) -> torch.Tensor:
        """LM-head logits (float32) of hidden states, with the config's final scaling/capping."""
        logits = self.model.get_output_embeddings()(hidden).float()
        cfg = self.model.config.get_text_config()
        scale = getattr(cfg, "logit_scale", None)
        if isinstance(scale, int | float) and scale != 1:
            logits = logits * scale
        cap = getattr(cfg, "final_logit_softcapping", None)
        if cap:
            logits = torch.tanh(logits / cap) * cap
        return logits

    def _check_decomposed(self) -> bool:
        """True when decoder + `_head` reproduce the model's own logits (checked once)."""
        try:
            ids = torch.arange(1, 9, device=self.device)[None] % self.vocab_size
            want = self.model(input_ids=ids).logits.float()
            got = self._head(self.model.get_decoder()(input_ids=ids).last_hidden_state)
        except (AttributeError, TypeError, NotImplementedError, RuntimeError):
            return False
        tol = 1e-3 * (1.0 + float(want.abs().max()))
        return want.shape == got.shape and float((want - got).abs().max()) <= tol

    def _step_model_head(self, s: _Seq, input_ids: torch.Tensor, rows: np.ndarray) -> None:
        """Fallback: the model's own forward with logits only at `rows` (one sequence)."""
        kwargs: dict[str, Any] = {"past_key_values": s.cache, "use_cache": True}
        local = (rows - s.pos).tolist()
        if self._keeps_logits:
            index = local if local else [input_ids.shape[1] - 1]
            kwargs["logits_to_keep"] = torch.tensor(index, dtype=torch.long, device=self.device)
        out = self.model(input_ids=input_ids, **kwargs)
        s.cache = out.past_key_values
        if not local:
            return
        logits = out.logits[0]
        if not self._keeps_logits:
            logits = logits[torch.tensor(local, dtype=torch.long, device=logits.device)]
        self._reduce(s, logits.float(), rows)

    def _project(self, s: _Seq, hidden: torch.Tensor, rows: np.ndarray) -> None:
        """Project scored rows through the head `chunk_rows` at a time and reduce each chunk."""
        for c in range(0, len(rows), self.chunk_rows):
            self._reduce(s, self._head(hidden[c:c + self.chunk_rows]), rows[c:c + self.chunk_rows])

    def _reduce(self, s: _Seq, logits: torch.Tensor, rows: np.ndarray) -> None:
        """Logsumexp, sampled-token logprob, top-K and candidate logprobs of absolute `rows`."""
        at = rows - s.first_row
        if self.temperature != 1.0:
            logits = logits.double() / self.temperature
        lse = torch.logsumexp(logits, dim=-1)
        assert s.targets is not None and s.token_lp is not None
        tgt = s.targets[torch.from_numpy(at).to(self.device)]
        s.token_lp[at] = (logits.gather(1, tgt[:, None])[:, 0] - lse).cpu().numpy()
        if s.topk:
            vals, idx = torch.topk(logits, s.topk, dim=-1, largest=True, sorted=True)
            s.top_lp[at] = (vals - lse[:, None]).cpu().numpy()  # type: ignore[index]
            s.top_ids[at] = idx.to(torch.int32).cpu().numpy()  # type: ignore[index]
        for _k, start, end, cand, out in s.cand:
            inside = (rows >= start - 1) & (rows < end - 1)
            if not inside.any():
                continue
            sel = torch.from_numpy(np.flatnonzero(inside)).to(self.device)
            span_rows = rows[inside] - (start - 1)
            picked = cand[torch.from_numpy(span_rows).to(self.device)]
            out[span_rows] = (logits[sel].gather(1, picked) - lse[sel, None]).cpu().numpy()

    def _finish(self, s: _Seq) -> list[SpanScores]:
        """Cut the row buffers into one SpanScores per span."""
        assert s.token_lp is not None and s.top_ids is not None and s.top_lp is not None
        cands = {k: out for k, _s, _e, _c, out in s.cand}
        given = s.req.candidates or (None,) * len(s.req.spans)
        result = []
        for k, (start, end) in enumerate(s.req.spans):
            if end <= start:
                c = given[k]
                result.append(SpanScores.empty(s.topk, None if c is None else c.shape[1]))
                continue
            a, b = start - 1 - s.first_row, end - 1 - s.first_row
            result.append(SpanScores(s.token_lp[a:b].copy(), s.top_ids[a:b].copy(),
                                     s.top_lp[a:b].copy(), cands.get(k)))
        return result
