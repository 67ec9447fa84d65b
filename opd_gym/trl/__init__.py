"""TRL integration: a GRPOTrainer environment over CodingEnv, tokenizer set-up and a warm-up.

Needs the ``trl`` extra (``pip install 'opd_gym[trl]'``). See docs/trainers.md.
"""

from opd_gym.trl.environment import (
    CodingToolEnv,
    dataset_rows,
    environment_factory,
    reference_hint,
    tool_methods,
)
from opd_gym.trl.templates import prepare_tokenizer
from opd_gym.trl.warmup import demo_conversation, sft_warmup

__all__ = [
    "CodingToolEnv",
    "dataset_rows",
    "demo_conversation",
    "environment_factory",
    "prepare_tokenizer",
    "reference_hint",
    "sft_warmup",
    "tool_methods",
]
