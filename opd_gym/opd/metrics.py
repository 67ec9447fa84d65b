"""OPD metrics per episode and cumulative, under hermes-agent's names plus our own.

- `opd/hint_rate`: share of scored turns that got a hint;
- `opd/mean_hints_per_rollout`, `opd/mean_turns_scored`: hermes-agent's names;
- `opd/unscored/<reason>`: turns left without teacher signal, by reason;
- `opd/mean_teacher_minus_student`: mean of teacher - student logprob over positions with both;
- `opd/top1_mismatch`: share of scored positions where the teacher's top-1 is not the sampled token;
- `opd/kl_k3`: KL(student || teacher) per token, estimated on the student's own samples with
  Schulman's k3, mean of exp(r) - 1 - r where r = log p_teacher - log p_student: unbiased and
  never negative, so it reads as a KL (needs student logprobs);
- `opd/log_ratio_k1`: mean of log p_student - log p_teacher (the k1 estimator: unbiased too,
  but one sample can be negative; `opd/kl_estimate` in runs written before k3, see
  `LEGACY_NAMES`);
- `opd/hinted/turns`, `opd/hinted/mean_teacher_minus_student`, `opd/hinted/top1_mismatch`: the
  scored turns that got a hint, their gap and top-1 mismatch (where the teaching signal is);
- `opd/topk_mass`: mean teacher probability mass inside its top-K (how much K misses);
- `opd/copied_tokens`, `opd/copy_rate`: response positions that reproduce an n-gram of their
  turn's hint (masked by default), in number and as a share of the tokens of hinted turns.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np

from opd_gym.records.opd_record import OPDRecord, SkipReason

# metric names of runs written by earlier versions -> what those numbers are called now
LEGACY_NAMES = {"opd/kl_estimate": "opd/log_ratio_k1"}  # it was k1, named as a KL


def current_names(metrics: Mapping[str, object]) -> dict[str, object]:
    """A stored metrics mapping (a row's `opd_metrics`, an old summary's `opd`) under today's
    names: an old run's k1 figure shows as the log ratio it is, never as a KL."""
    return {LEGACY_NAMES.get(key, key): value for key, value in metrics.items()}


def _reason(error: str) -> str:
    """A short, stable metric key for an error message (its first words)."""
    head = error.split(":", 1)[0].strip().lower()
    return "_".join(head.split()[:4]) or "unknown"


@dataclass
class OPDMetrics:
    """Accumulates records; `episode(records)` returns that episode's metrics and adds them up."""

    episodes: int = 0
    turns: int = 0
    scored: int = 0
    hints: int = 0
    unscored: Counter = field(default_factory=Counter)
    positions: int = 0
    top1_mismatch: int = 0
    ranked: int = 0  # scored positions with a top-K (K > 0): what top-1 and mass are over
    delta_sum: float = 0.0
    delta_n: int = 0
    k3_sum: float = 0.0  # sum over positions of exp(r) - 1 - r, r = teacher - student logprob
    hinted_ranked: int = 0
    hinted_top1_mismatch: int = 0
    hinted_delta_sum: float = 0.0
    hinted_delta_n: int = 0
    mass_sum: float = 0.0
    copied: int = 0
    hinted_tokens: int = 0
    reconstructed: int = 0
    unchecked: int = 0
    control_turns: int = 0
    control_sum: float = 0.0
    control_n: int = 0

    def episode(self, records: Iterable[OPDRecord]) -> dict[str, float]:
        part = OPDMetrics()
        for record in records:
            part._add(record)
        part.episodes = 1
        self._merge(part)
        return part.summary()

    def _add(self, record: OPDRecord) -> None:
        self.turns += 1
        self.reconstructed += bool(getattr(record, "reconstructed", False))
        self.unchecked += bool(getattr(record, "ids_unchecked", False))
        control = getattr(record, "control_teacher_logprobs", None)
        if control is not None and record.student_logprobs is not None:
            both = record.mask & np.isfinite(record.student_logprobs) & np.isfinite(control)
            self.control_turns += 1
            self.control_sum += float((control[both].astype(np.float64)
                                       - record.student_logprobs[both]).sum())
            self.control_n += int(both.sum())
        if record.hint:
            self.copied += record.num_copied
            self.hinted_tokens += record.num_tokens
        if not record.scored:
            if record.skip_reason is not None:
                why = str(record.skip_reason)
            elif record.num_copied:
                why = str(SkipReason.COPIED_HINT)
            else:
                why = _reason(record.error or "unknown")
            self.unscored[why] += 1
            return
        self.scored += 1
        self.hints += bool(record.hint)  # scored turns with a hint
        on = record.mask
        self.positions += int(on.sum())
        hinted = bool(record.hint)
        if record.topk:  # with topk 0 there is no top-1 and no mass to count
            missed = int((record.teacher_topk_ids[on, 0] != record.token_ids[on]).sum())
            self.ranked += int(on.sum())
            self.top1_mismatch += missed
            self.mass_sum += float(np.exp(record.teacher_topk_logprobs[on]
                                          .astype(np.float64)).sum())
            if hinted:
                self.hinted_ranked += int(on.sum())
                self.hinted_top1_mismatch += missed
        if record.student_logprobs is not None:
            both = on & np.isfinite(record.student_logprobs)
            delta = (record.teacher_token_logprobs[both].astype(np.float64)
                     - record.student_logprobs[both].astype(np.float64))
            self.delta_sum += float(delta.sum())
            self.delta_n += int(both.sum())
            self.k3_sum += float((np.expm1(delta) - delta).sum())
            if hinted:
                self.hinted_delta_sum += float(delta.sum())
                self.hinted_delta_n += int(both.sum())

    def _merge(self, other: OPDMetrics) -> None:
        for name in (
            "episodes",
            "turns",
            "scored",
            "hints",
            "positions",
            "top1_mismatch",
            "ranked",
            "delta_sum",
            "delta_n",
            "k3_sum",
            "hinted_ranked",
            "hinted_top1_mismatch",
            "hinted_delta_sum",
            "hinted_delta_n",
            "mass_sum",
            "copied",
            "hinted_tokens",
            "reconstructed",
            "unchecked",
            "control_turns",
            "control_sum",
            "control_n",
        ):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.unscored.update(other.unscored)

    def summary(self) -> dict[str, float]:
        """The metrics dict (cumulative over every episode added so far)."""
        episodes = max(self.episodes, 1)
        nan = float("nan")
        out = {
            "opd/episodes": float(self.episodes),
            "opd/turns": float(self.turns),
            "opd/turns_scored": float(self.scored),
            "opd/mean_turns_scored": self.scored / episodes,
            "opd/mean_hints_per_rollout": self.hints / episodes,
            "opd/hint_rate": self.hints / self.scored if self.scored else 0.0,
            "opd/tokens_scored": float(self.positions),
            "opd/top1_mismatch": self.top1_mismatch / self.ranked if self.ranked else nan,
            "opd/topk_mass": self.mass_sum / self.ranked if self.ranked else nan,
            "opd/mean_teacher_minus_student": self.delta_sum / self.delta_n
            if self.delta_n
            else nan,
            "opd/kl_k3": self.k3_sum / self.delta_n if self.delta_n else nan,
            "opd/log_ratio_k1": -self.delta_sum / self.delta_n if self.delta_n else nan,
            "opd/hinted/turns": float(self.hints),
            "opd/hinted/mean_teacher_minus_student": self.hinted_delta_sum / self.hinted_delta_n
            if self.hinted_delta_n else nan,
            "opd/hinted/top1_mismatch": self.hinted_top1_mismatch / self.hinted_ranked
            if self.hinted_ranked else nan,
            "opd/copied_tokens": float(self.copied),
            "opd/copy_rate": self.copied / self.hinted_tokens if self.hinted_tokens else 0.0,
            "opd/reconstructed_rate": self.reconstructed / self.turns if self.turns else 0.0,
            "opd/ids_unchecked": float(self.unchecked),
        }
        if self.control_turns:
            out["opd/control_turns"] = float(self.control_turns)
            out["opd/control_gap"] = self.control_sum / self.control_n if self.control_n else nan
        for reason, count in sorted(self.unscored.items()):
            out[f"opd/unscored/{reason}"] = float(count)
        return out
