"""Fidelity on code nobody here wrote: each pinned library, unmodified, graded against its own
test suite gets plain pytest's verdict test id by test id (issue 22 point 1, issue 29 point 3).

The libraries are chosen for the shapes of their suites (see each `Library.note` and the
shapes column `opd-gym tasks check-suite` prints): doctests in package modules, text doctests,
src layouts run uninstalled, `--import-mode=importlib`, tests inside the package, conftest
fixtures and data files, settings in pytest.ini, .pytest.ini, pyproject, tox.ini or setup.cfg.
The reference is `opd_gym.grading.plain` (`python3 -m pytest` in a container of the same image,
outcomes from pytest's own report log; it shares no code with the grader). The comparison is
the one `opd-gym tasks check-suite` makes, so a user gets the same table on their own sdist.
"""

from __future__ import annotations

import pytest

from opd_gym.grading import Grader
from opd_gym.grading.suite_check import check_project, prepare, table
from opd_gym.sandboxes import make_pool
from opd_gym.sandboxes.image import DEFAULT_IMAGE
from opd_gym.tasks.libraries import LIBRARIES, library, unpack

pytestmark = [pytest.mark.docker, pytest.mark.slow]


@pytest.fixture(scope="module")
def grader():
    pool = make_pool("docker", size=2)
    yield Grader(pool)
    pool.close()


@pytest.mark.parametrize("name", [lib.name for lib in LIBRARIES])
def test_grader_agrees_with_plain_pytest(name, grader):
    lib = library(name)
    source = unpack(lib)
    files = {**source.workspace, **{p: t.encode() for p, t in source.tests.items()}}
    project = prepare(lib.name, files, DEFAULT_IMAGE, ini=lib.ini)
    check = check_project(project, grader, DEFAULT_IMAGE,
                          test_dirs=lib.test_dirs if lib.ini is not None else None)
    print(table([check]))
    assert check.ids >= 100, table([check])  # the pin runs its suite under plain pytest
    assert not check.infra_error, table([check])
    assert not check.forgery, table([check])
    assert check.agrees, table([check])  # every id gets plain pytest's verdict
    if any(note.startswith("pytest itself imports") for note in check.notes):
        # the suite tests the image's copy, loaded by pytest before the suite (pluggy): no
        # test can earn, and check-suite says so instead of printing "agree"
        assert not check.ok and "no test could earn" in " ".join(check.problems), table([check])
    else:  # the unmodified code, graded, is paid in full
        assert check.ok and check.score == 1.0 and check.earning > 0, table([check])
