"""Run directories: the typed, versioned episode row and the object that owns the files."""

from opd_gym.records.rows import (
    SCHEMA_VERSION,
    SUPPORTED_VERSIONS,
    EpisodeRow,
    grade_passed,
    hint_rate,
    schema_version,
)
from opd_gym.runs.directory import REPORT, SUMMARY, TRAJECTORIES, RunDirectory, read_trajectories
from opd_gym.runs.summary import RunSummary, episode_metrics

__all__ = [
    "REPORT",
    "SCHEMA_VERSION",
    "SUMMARY",
    "SUPPORTED_VERSIONS",
    "TRAJECTORIES",
    "EpisodeRow",
    "RunDirectory",
    "RunSummary",
    "episode_metrics",
    "grade_passed",
    "hint_rate",
    "read_trajectories",
    "schema_version",
]
