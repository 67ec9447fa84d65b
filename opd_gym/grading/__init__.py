"""Grading: the hidden tests run in a harness the agent's code cannot reach; see grader.py.

Layout: `report` (GradeReport, TestOutcome), `expected` (which tests the hidden files define),
`launch` (starting the in-sandbox harness), `verdict` (checking what it returns), `grader`.
"""

from opd_gym.grading.expected import expected_tests, test_paths
from opd_gym.grading.grader import GRADE_DIR, Grader, SandboxSource, select_files
from opd_gym.grading.launch import run_harness_here
from opd_gym.grading.report import GradeReport, TestOutcome
from opd_gym.grading.verdict import VerdictError, build_report, parse_verdict

__all__ = [
    "GRADE_DIR",
    "GradeReport",
    "Grader",
    "SandboxSource",
    "TestOutcome",
    "VerdictError",
    "build_report",
    "expected_tests",
    "parse_verdict",
    "run_harness_here",
    "select_files",
    "test_paths",
]
