"""opd_gym: Gymnasium environments for multi-turn LLM coding agents.

Importing the package registers `opd_gym/Coding-v0` (and one id per env folder), so
`gym.make("opd_gym/Coding-v0")` and `gym.make("opd_gym:opd_gym/Coding-v0")` both work.
Heavy pieces (Docker engine, torch, transformers) load only when used.
"""

from typing import Any

from opd_gym.actions import TokenText
from opd_gym.env import CodingEnv
from opd_gym.episode import Episode, EpisodeSettings
from opd_gym.errors import (
    CalibrationError,
    ConfigError,
    DatasetError,
    GradingError,
    ModelError,
    OPDGymError,
    UnverifiableTaskError,
)
from opd_gym.grading import CalibrationStore, Grader, GradeReport
from opd_gym.registration import register_envs
from opd_gym.rewards import RewardWeights
from opd_gym.spaces import ModelOutput, UnicodeText
from opd_gym.tasks import RepoInfo, Task, load_harbor, load_suite, load_tasks
from opd_gym.transcript import Turn, messages_for_template
from opd_gym.wrappers import TrajectoryRecorder

__version__ = "0.1.0"

ENV_IDS = register_envs()

from opd_gym import compat  # noqa: E402  (old import paths: installed once the package is)

compat.install()

_LAZY = {
    "OPDWrapper": "opd_gym.opd.wrapper",
    "OPDConfig": "opd_gym.opd.config",
    # Harbor ATIF trajectories scored by the teacher (the inverse of export --to atif)
    **{n: "opd_gym.exports.atif_in" for n in ("score_trajectories", "score_trajectory")},
    "ModelClient": "opd_gym.models.client",
    "EpisodeRow": "opd_gym.runs",
    "RunDirectory": "opd_gym.runs",
    "RecordingProxy": "opd_gym.proxy.server",  # the recording model proxy (opd_gym.proxy)
    "MiniSweAgentRunner": "opd_gym.harness",  # mini-swe-agent through the proxy (harness)
    **{n: "opd_gym.serve" for n in ("ServeConfig", "ServerThread")},  # the serve extra
}

__all__ = [
    "CalibrationError",
    "ConfigError",
    "DatasetError",
    "GradingError",
    "UnverifiableTaskError",
    "ModelError",
    "OPDGymError",
    "ENV_IDS",
    "CodingEnv",
    "Episode",
    "EpisodeRow",
    "EpisodeSettings",
    "CalibrationStore",
    "GradeReport",
    "Grader",
    "ModelClient",
    "ModelOutput",
    "OPDConfig",
    "OPDWrapper",
    "RewardWeights",
    "RunDirectory",
    "RepoInfo",
    "Task",
    "TokenText",
    "TrajectoryRecorder",
    "Turn",
    "UnicodeText",
    "__version__",
    "load_suite",
    "load_harbor",
    "load_tasks",
    "messages_for_template",
    "register_envs",
    "score_trajectories",
    "score_trajectory",
]


def __getattr__(name: str) -> Any:
    """Import rarely needed, heavier parts (the OPD wrapper) on first access."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'opd_gym' has no attribute {name!r}")
