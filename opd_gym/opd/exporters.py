"""Moved to `opd_gym.exports.formats` (one export package); this name keeps old imports working."""

from opd_gym.exports.formats import (  # noqa: F401
    ATROPOS_IGNORE,
    ATROPOS_PAD_ID,
    ATROPOS_PAD_LOGPROB,
    to_advantages,
    to_atropos,
    to_atropos_trajectories,
    to_trl_rows,
)
