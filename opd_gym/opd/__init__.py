"""On-policy distillation: judges, teachers, the OPD record, and the OPDWrapper."""


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
]

