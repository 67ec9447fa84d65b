"""Shared by the security modules: one Grader over one Docker pool for the session.

A Grader calibrates each task once (per content hash), so modules that grade the same tasks
(the built-in suite, the dataset fixtures) share those calibrations instead of repeating them.
"""

from __future__ import annotations

import pytest

from opd_gym.grading import Grader
from opd_gym.sandboxes import make_pool


@pytest.fixture(scope="session")
def docker_grader():
    pool = make_pool("docker", size=3, workers=3)
    yield Grader(pool)
    pool.close()
