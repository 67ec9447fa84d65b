"""On-policy distillation: judges, teachers, the OPD record, and the OPDWrapper."""

from typing import Any

from opd_gym.opd.config import OPDConfig
from opd_gym.opd.judges import JudgeInput, LLMJudge, RuleJudge, Verdict, make_judge
from opd_gym.opd.metrics import OPDMetrics
from opd_gym.opd.wrapper import OPDWrapper
from opd_gym.records.opd_record import OPDRecord, SkipReason

__all__ = [
    "JudgeInput",
    "LLMJudge",
    "OPDConfig",
    "OPDMetrics",
    "OPDRecord",
    "SkipReason",
    "OPDWrapper",
    "RuleJudge",
    "Verdict",
    "make_judge",
    "score_trajectories",
    "score_trajectory",
]


def __getattr__(name: str) -> Any:
    """ATIF in (`opd_gym.opd.atif_in`) on first access: it reads exports, which read records
    of this package, so importing it here eagerly would be circular."""
    if name in ("score_trajectories", "score_trajectory"):
        from opd_gym.opd import atif_in

        return getattr(atif_in, name)
    raise AttributeError(f"module 'opd_gym.opd' has no attribute {name!r}")
