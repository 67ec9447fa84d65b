"""The `opd_grading` module as the grading harness installs it in the sandbox, for host tests."""

from __future__ import annotations

import importlib.util
from pathlib import Path


def opd_grading() -> dict[str, object]:
    """The namespace of `opd_grading` (`grade_harness.OPD_GRADING_SOURCE`, executed here)."""
    path = Path(__file__).resolve().parents[2] / "sandbox" / "grade_harness.py"
    spec = importlib.util.spec_from_file_location("grade_harness_for_tests", path)
    harness = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(harness)  # type: ignore[union-attr]
    namespace: dict[str, object] = {"__name__": "opd_grading"}
    exec(compile(harness.OPD_GRADING_SOURCE, "opd_grading", "exec"), namespace)
    return namespace
