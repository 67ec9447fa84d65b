"""stable-baselines3 integration: numeric observation wrappers, discrete candidate actions
with masks, a token-embedding feature extractor, and an env factory for SB3 vector envs.

Needs the `sb3` extra (`pip install 'opd_gym[sb3]'`). SB3 trains small policies over these
numeric views (which candidate to run, when to test or submit); it does not train the LLM.
"""

from __future__ import annotations

try:
    import stable_baselines3  # noqa: F401
    import torch  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "opd_gym.sb3 needs the 'sb3' extra (stable-baselines3, sb3-contrib): "
        "pip install 'opd_gym[sb3]'"
    ) from exc

from opd_gym.sb3.actions import (
    EMPTY_SLOT,
    LIST_FILES,
    RUN_TESTS,
    SUBMIT,
    Candidate,
    CandidateFn,
    DiscreteToolCalls,
    candidate_text,
)
from opd_gym.sb3.extractor import TokenEmbeddingExtractor
from opd_gym.sb3.factory import make_env, make_vec_env
from opd_gym.sb3.features import NUMERIC_FEATURES, ByteTokenizer, HashedNgrams
from opd_gym.sb3.observations import HashedTextObservation, TokenIdObservation

__all__ = [
    "EMPTY_SLOT",
    "LIST_FILES",
    "NUMERIC_FEATURES",
    "RUN_TESTS",
    "SUBMIT",
    "ByteTokenizer",
    "Candidate",
    "CandidateFn",
    "DiscreteToolCalls",
    "HashedNgrams",
    "HashedTextObservation",
    "TokenEmbeddingExtractor",
    "TokenIdObservation",
    "candidate_text",
    "make_env",
    "make_vec_env",
]
