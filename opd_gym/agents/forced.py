"""A student that emits given texts, token-exact, with its model's own logprobs.

Useful to replay recorded or scripted turns under a model (and for exactness checks): each
turn is prompted like the sampling policies prompt (`messages_for_template` with the model's
tokenizer, the env's tools, generation prompt), its ids are the text's canonical encoding
plus the end-of-turn token, and its logprobs come from one plain forward pass of the model
over prompt + ids, independent of any teacher code.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from opd_gym.actions import TokenText
from opd_gym.errors import ConfigError
from opd_gym.models.tokenizer import render_ids
from opd_gym.transcript import messages_for_template


class TeacherForcedPolicy:
    """Emits `texts` in turn (cycling), returning exact prompt ids, ids and model logprobs."""

    logprob_temperature: float | None = None  # forced text: no sampling temperature (TokenPolicy)

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        texts: Sequence[str],
        *,
        give_prompt_ids: bool = True,
    ) -> None:
        if not texts:
            raise ConfigError("give at least one text")
        self.model, self.tokenizer, self.texts = model, tokenizer, list(texts)
        self.give_prompt_ids = give_prompt_ids
        self.prompts: list[list[int]] = []

    def reset(self, observation: str, info: Mapping[str, Any]) -> None:
        """Start again from the first text."""
        self.prompts = []

    def act(self, observation: str, info: Mapping[str, Any]) -> TokenText:
        import torch

        tok = self.tokenizer
        prompt = render_ids(tok, messages_for_template(info["messages"], tok), info.get("tools"),
                            add_generation_prompt=True)
        text = self.texts[len(self.prompts) % len(self.texts)]
        ids = [*tok.encode(text, add_special_tokens=False), int(tok.eos_token_id)]
        with torch.no_grad():
            device = next(self.model.parameters()).device
            logits = self.model(input_ids=torch.tensor([prompt + ids], device=device)).logits[0]
        logp = torch.log_softmax(logits[len(prompt) - 1:-1].double(), dim=-1)
        logprobs = logp[torch.arange(len(ids)), torch.tensor(ids, device=device)].tolist()
        self.prompts.append(prompt)
        return TokenText(text, token_ids=ids, logprobs=logprobs,
                         prompt_ids=prompt if self.give_prompt_ids else None)
