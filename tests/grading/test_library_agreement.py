"""Fidelity on code nobody here wrote: each pinned library, unmodified, graded against its own
test suite gets plain pytest's verdict test id by test id (issue 22, point 1).

The reference is `plain_pytest.run_plain`: `python3 -m pytest` in a container of the same
image, the project's config as its `pytest.ini`, outcomes from pytest's own report log; it
shares no code with the grader. The task's hidden tests are the suite's files, its ini the
same config text, its test ids the ones plain pytest collected; the reference solution (for
the grader's calibration) is the library itself, the starter an empty workspace.
"""

from __future__ import annotations

import pytest
from plain_pytest import PlainRun, run_plain

from opd_gym.grading import Grader
from opd_gym.grading.expected import display_name
from opd_gym.sandboxes import make_pool
from opd_gym.sandboxes.image import DEFAULT_IMAGE
from opd_gym.tasks import Task
from opd_gym.tasks.libraries import LIBRARIES, LibrarySource, library, unpack

pytestmark = [pytest.mark.docker, pytest.mark.slow]

AGREEMENT = 0.999


@pytest.fixture(scope="module")
def grader():
    pool = make_pool("docker", size=2)
    yield Grader(pool)
    pool.close()


def project_files(source: LibrarySource) -> dict[str, bytes]:
    """The whole unpacked sdist: what plain pytest runs in."""
    return {**source.workspace, **{p: t.encode() for p, t in source.tests.items()}}


def library_task(source: LibrarySource, reference: PlainRun) -> Task:
    """The library as a task: its suite hidden, its own code the reference solution."""
    text = {}
    for path, data in source.workspace.items():
        try:
            text[path] = data.decode("utf-8")
        except UnicodeDecodeError:
            continue  # e.g. a stray .pyc in docs/: graded files still carry it, as bytes
    lib = source.library
    return Task(id=f"library-{lib.name}", prompt=f"{lib.requirement} against its own tests",
                files={}, tests=dict(source.tests), solution=text, timeout=300.0,
                pytest_ini=lib.ini, test_ids=tuple(sorted(reference.outcomes)))


def disagreements(reference: PlainRun, graded: dict[str, str]) -> list[str]:
    """`node id: plain=OUTCOME grader=OUTCOME` for every id whose verdicts differ."""
    return [f"{nodeid}: plain={want} grader={graded.get(display_name(nodeid), 'missing')}"
            for nodeid, want in sorted(reference.outcomes.items())
            if graded.get(display_name(nodeid)) != want]


@pytest.mark.parametrize("name", [lib.name for lib in LIBRARIES])
def test_grader_agrees_with_plain_pytest(name, grader):
    source = unpack(library(name))
    reference = run_plain(DEFAULT_IMAGE, project_files(source), source.ini)
    # The unmodified library passes its own suite under plain pytest (else the pin is wrong).
    assert reference.exit_code == 0 and not reference.collect_errors, reference.output
    assert len(reference.outcomes) >= 100
    names = {display_name(i) for i in reference.outcomes}
    assert len(names) == len(reference.outcomes)  # report names map back to node ids 1:1

    report = grader.grade(library_task(source, reference), source.workspace)

    # A suite whose every test sits in a unittest class or a shared mixin gets no canary
    # (canary.py perturbs `Test*` classes and functions only), so it cannot earn a score:
    # its verdicts must still agree test by test.
    unverifiable = report.reason.startswith("the task cannot be verified")
    assert not report.reason or unverifiable, f"{report.reason}\n{report.output}"
    assert not report.forgery, f"honest code flagged as a forgery: {report.forgery}"
    graded = {t.name: t.outcome for t in report.tests}
    assert set(graded) == names
    wrong = disagreements(reference, graded)
    agree = len(reference.outcomes) - len(wrong)
    assert agree >= AGREEMENT * len(reference.outcomes), (
        f"{name}: {agree} of {len(reference.outcomes)} ids agree with plain pytest; "
        "disagreements:\n" + "\n".join(wrong)
    )
