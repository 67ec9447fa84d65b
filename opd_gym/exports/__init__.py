"""Exports for trainers: per-record formats (`formats`) and whole-run files (`run`).

`formats` maps one OPD record to Atropos groups, TRL rows or per-token advantages; `run`
reads a rollout's run directory and writes those formats (JSONL, or Parquet) for every turn;
`atif` writes each episode as a Harbor ATIF trajectory with its OPD records.
"""

from opd_gym.exports.atif import export_atif, to_atif
from opd_gym.exports.formats import (
    ATROPOS_IGNORE,
    ATROPOS_PAD_ID,
    ATROPOS_PAD_LOGPROB,
    to_advantages,
    to_atropos,
    to_atropos_trajectories,
    to_trl_rows,
)
from opd_gym.exports.run import FORMATS, TurnExample, examples, export_run

__all__ = [
    "ATROPOS_IGNORE",
    "ATROPOS_PAD_ID",
    "ATROPOS_PAD_LOGPROB",
    "FORMATS",
    "TurnExample",
    "examples",
    "export_atif",
    "export_run",
    "to_advantages",
    "to_atropos",
    "to_atif",
    "to_atropos_trajectories",
    "to_trl_rows",
]
