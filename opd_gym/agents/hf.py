"""A local transformers model as the agent: samples each turn and returns the exact ids.

The returned `TokenText` carries the sampled token ids, their logprobs under the distribution
they were sampled from (temperature applied, renormalised over the top-p nucleus; at T=1 and
top_p=1 exactly what a same-model teacher reproduces) and the prompt ids, so the env's turns
are token-exact. `logprob_temperature` states the footing for the OPD records.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from opd_gym.actions import TokenText
from opd_gym.errors import ConfigError
from opd_gym.transcript import prompt_ids


class TransformersPolicy:
    """Samples from a causal LM (a path or a loaded model) with the chat template and tools.

    `dtype` defaults to the checkpoint's dtype ("float64" is allowed, for exactness checks);
    `max_model_len` caps prompt + sampled tokens (default: the model's position limit).
    `student_topk` > 0 also returns the policy's own top-K ids at each sampled position
    (`TokenText.topk_ids`): a teacher that can score given ids then fills
    `OPDRecord.teacher_candidate_logprobs` for them.
    `fork(seed)` gives another agent sharing the model but with its own generator (one per
    rollout worker); `seed_episode(seed)` reseeds it, so each episode's draws depend only on
    its own seed, not on which worker plays it.
    """

    def __init__(
        self,
        model: Any,
        *,
        tokenizer: Any = None,
        max_new_tokens: int = 256,
        temperature: float = 1.0,
        top_p: float = 1.0,
        seed: int = 0,
        device: str = "cpu",
        dtype: str | None = "auto",
        max_model_len: int | None = None,
        student_topk: int = 0,
    ) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from opd_gym.models.dtypes import DEFAULTS, normalize_dtype, resolve_dtype

        if max_new_tokens < 1:
            raise ConfigError("max_new_tokens must be >= 1")
        if student_topk < 0:
            raise ConfigError("student_topk must be >= 0 (0: do not return top-K ids)")
        if not 0.0 < top_p <= 1.0:
            raise ConfigError("top_p must be in (0, 1]")
        if isinstance(model, str) or hasattr(model, "__fspath__"):
            tokenizer = tokenizer or AutoTokenizer.from_pretrained(str(model))
            name = resolve_dtype(dtype, str(model))
            model = AutoModelForCausalLM.from_pretrained(
                str(model), dtype=getattr(torch, name) if name != "auto" else "auto")
        elif dtype not in DEFAULTS:
            model = model.to(getattr(torch, normalize_dtype(str(dtype))))
        if tokenizer is None:
            raise ConfigError("pass the tokenizer along with a loaded model")
        if temperature <= 0:
            raise ConfigError("temperature must be > 0 (use a small value for near-greedy)")
        self.model = model.to(device).eval()
        self.tokenizer = tokenizer
        self.max_new_tokens = max_new_tokens
        self.student_topk = min(int(student_topk), int(self.model.config.get_text_config()
                                                       .vocab_size))
        self.temperature = temperature
        self.logprob_temperature = temperature  # the returned logprobs are at this temperature
        self.top_p = top_p
        self.device = device
        self.seed = int(seed)
        limit = getattr(self.model.config.get_text_config(), "max_position_embeddings", None)
        self.max_model_len = max_model_len or limit
        self._generator = torch.Generator(device=device).manual_seed(self.seed)
        self._lock = threading.Lock()  # one model may serve several rollout workers

    def fork(self, seed: int) -> TransformersPolicy:
        """An agent sharing this model (and its lock) with its own generator seeded `seed`."""
        import torch

        other = copy.copy(self)
        other.seed = int(seed)
        other._generator = torch.Generator(device=self.device).manual_seed(int(seed))
        return other

    def seed_episode(self, seed: int) -> None:
        """Reseed this agent's generator (called by the rollout with each episode's seed)."""
        self._generator.manual_seed(int(seed))

    def reset(self, observation: str, info: Mapping[str, Any]) -> None:
        """Nothing to reset: each turn is sampled from the messages in `info`."""

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
        with self._lock:
            return self._sample(messages, tools, prompt_ids)

    def _sample(self, messages, tools, offered=None) -> TokenText:
        import torch
        from transformers import DynamicCache

        prompt = ([int(i) for i in offered] if offered is not None
                  else prompt_ids(self.tokenizer, messages, tools))
        eos = self.tokenizer.eos_token_id
        budget = self.max_new_tokens
        if self.max_model_len:
            budget = min(budget, int(self.max_model_len) - len(prompt))
            if budget < 1:
                raise ConfigError(f"the prompt has {len(prompt)} tokens: no room left in "
                                 f"max_model_len {self.max_model_len} to sample a turn")
        cache = DynamicCache(config=self.model.config)
        step_input = torch.tensor([prompt], device=self.device)
        ids: list[int] = []
        logprobs: list[float] = []
        topk_ids: list[list[int]] = []
        with torch.no_grad():
            for _ in range(budget):
                logits = self.model(input_ids=step_input, past_key_values=cache, use_cache=True)
                logits = logits.logits[0, -1]
                logits = logits if logits.dtype == torch.float64 else logits.float()
                # the sampled distribution: softmax(logits / T), then the top-p nucleus
                logp = torch.log_softmax(logits.double() / self.temperature, dim=-1)
                probs = logp.exp()
                kept = 0.0  # log of the nucleus mass the draw is renormalised by
                if self.top_p < 1.0:
                    sorted_p, order = probs.sort(descending=True)
                    keep = sorted_p.cumsum(0) - sorted_p < self.top_p
                    probs = torch.zeros_like(probs).scatter(0, order[keep], sorted_p[keep])
                    kept = float(torch.logsumexp(logp[order[keep]], dim=0))
                token = int(torch.multinomial(probs, 1, generator=self._generator))
                ids.append(token)
                logprobs.append(float(logp[token]) - kept)
                if self.student_topk:
                    topk_ids.append(logp.topk(self.student_topk).indices.tolist())
                if token == eos:
                    break
                step_input = torch.tensor([[token]], device=self.device)
        body = ids[:-1] if ids and ids[-1] == eos else ids
        text = self.tokenizer.decode(body, skip_special_tokens=False)
        return TokenText(text, token_ids=ids, logprobs=logprobs, prompt_ids=prompt,
                         topk_ids=topk_ids if self.student_topk else None)
