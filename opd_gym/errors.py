"""The library's one error tree: catch `OPDGymError` for anything opd_gym raises on purpose.

Each family also derives from the builtin its callers caught before (RuntimeError, ValueError),
so existing `except` clauses keep working. The CLI prints one line for these and a traceback
for anything else (a bug).
"""

from __future__ import annotations


class OPDGymError(Exception):
    """Root of every error opd_gym raises on purpose."""


class ConfigError(OPDGymError, ValueError):
    """An option or a combination of options is invalid (said once, at construction)."""


class DatasetError(OPDGymError, ValueError):
    """A task file or dataset row does not fit its schema (the message names the field)."""


class GradingError(OPDGymError):
    """The grading machinery could not produce a trustworthy verdict."""


class CalibrationError(GradingError):
    """A task's calibration (its reference solution and starter run with the canaries) failed.

    `fields` holds the GradeReport fields that say why (`reason`, `infra_error`, maybe
    `output`); `reason` and `infra_error` read them. `Grader.grade` never raises this: it
    returns a report built from these fields.
    """

    def __init__(self, reason: str = "", **fields: object) -> None:
        super().__init__(reason)
        self.fields: dict[str, object] = {"reason": reason, **fields}

    @property
    def reason(self) -> str:
        return str(self.fields.get("reason", ""))

    @property
    def infra_error(self) -> bool:
        return bool(self.fields.get("infra_error", False))

    def __reduce__(self) -> tuple[object, ...]:
        """Pickled with its fields (it may cross from a Ray worker to the driver)."""
        return _calibration_error, (dict(self.fields),)


def _calibration_error(fields: dict[str, object]) -> CalibrationError:
    return CalibrationError(**fields)  # type: ignore[arg-type]


class UnverifiableTaskError(GradingError, ValueError):
    """Tasks the grader cannot vouch for (no test could earn, or their calibration fails),
    refused before an episode plays them: every grade of such a task would be a 0 that says
    nothing of the answer. `reasons` maps each task id to why."""

    def __init__(self, reasons: dict[str, str], total: int | None = None,
                 hint: str = "") -> None:
        self.reasons, self.total, self.hint = dict(reasons), total, hint
        shown = "; ".join(f"{task}: {why}" for task, why in list(self.reasons.items())[:3])
        more = f"; ... {len(self.reasons) - 3} more" if len(self.reasons) > 3 else ""
        of = f" of {total}" if total is not None else ""
        super().__init__(f"{len(self.reasons)}{of} task(s) cannot be verified, so every answer "
                         f"would score 0: {shown}{more}{hint}")

    def __reduce__(self) -> tuple[object, ...]:
        """Pickled whole (a Ray worker's refusal reaches the driver with its reasons)."""
        return type(self), (self.reasons, self.total, self.hint)


class ModelError(OPDGymError, RuntimeError):
    """A model backend (policy, judge or teacher) failed or is unavailable."""


__all__ = [
    "CalibrationError", "ConfigError", "DatasetError", "GradingError", "ModelError",
    "OPDGymError", "UnverifiableTaskError",
]
