"""Grading: hidden tests and their canary twins run with the agent's code; see grader.py.

Layout: `report` (GradeReport, TestOutcome), `expected` (which tests the hidden files define),
`canary` (the perturbed twins and the two variants), `launch` (starting the in-sandbox
harness), `verdict` (checking and merging what it returns), `grader`, `store` (calibrations
kept in a folder with their secret, made ahead by `opd-gym tasks calibrate`).
"""

from opd_gym.errors import CalibrationError
from opd_gym.grading.canary import CanarySet, Variants, build_variants, make_canaries
from opd_gym.grading.expected import expected_tests, test_paths
from opd_gym.grading.grader import GRADE_DIR, Grader, SandboxSource, select_files, task_key
from opd_gym.grading.launch import run_harness_here
from opd_gym.grading.report import GradeReport, TestOutcome
from opd_gym.grading.store import CalibrationStore, make_grader
from opd_gym.grading.verdict import (
    Calibration,
    Merged,
    VerdictError,
    build_report,
    merge,
    parse_verdict,
)

__all__ = [
    "GRADE_DIR",
    "Calibration",
    "CalibrationError",
    "CalibrationStore",
    "CanarySet",
    "GradeReport",
    "Grader",
    "Merged",
    "SandboxSource",
    "TestOutcome",
    "Variants",
    "VerdictError",
    "build_report",
    "build_variants",
    "expected_tests",
    "make_canaries",
    "make_grader",
    "merge",
    "parse_verdict",
    "run_harness_here",
    "select_files",
    "task_key",
    "test_paths",
]
