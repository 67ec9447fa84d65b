"""Inherited test methods given bodies of their own (grading/inherited.py): plain pytest
collects the same ids in the same order with the same outcomes from the materialized module
as from the original, and a suite repeating its tests across TestCase subclasses pays the
reference (each id its own canary and held site) while an always-equal answer earns 0."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from opd_gym.grading import Grader
from opd_gym.grading.canary import make_canaries
from opd_gym.grading.inherited import materialize_module
from opd_gym.tasks import Task

SUITE = '''\
import unittest

from shapes import area, perim


class Checks:
    """Tests shared by the TestCase classes below (a mixin: never collected itself)."""

    @unittest.skipIf(False, "never")
    def test_area(self):
        self.assertEqual(area(2, 3), 6)

    def test_perim(self):
        self.assertEqual(perim(2, 3), 10)


class TestShapes(Checks, unittest.TestCase):
    """The mixin's tests as they are."""


class TestMore(TestShapes):
    def test_square(self):
        self.assertEqual(area(4, 4), 16)

    test_perim = None  # disabled here: never copied over


class TestSuper(Checks, unittest.TestCase):
    def setUp(self):
        super().setUp()

    def test_area(self):  # its own: kept as it is
        self.assertEqual(area(1, 1), 1)


class TestPlain(unittest.TestCase):
    def test_zero(self):
        self.assertEqual(area(0, 9), 0)


class TestDerived(TestPlain):
    pass
'''
STARTER = "def area(w, h):\n    raise NotImplementedError\n\n\ndef perim(w, h):\n    return 0\n"
REFERENCE = "def area(w, h):\n    return w * h\n\n\ndef perim(w, h):\n    return 2 * (w + h)\n"
ALWAYS_EQUAL = ("class _Any(int):\n    def __eq__(self, other):\n        return True\n\n"
                "    __hash__ = int.__hash__\n\n\n"
                "def area(w, h):\n    return _Any(0)\n\n\ndef perim(w, h):\n    return _Any(0)\n")


def _collect_and_run(folder: Path, suite: str, shapes: str) -> list[str]:
    """Plain pytest's report lines (`id PASSED/FAILED`, in run order) for `suite`."""
    (folder / "test_shapes.py").write_text(suite)
    (folder / "shapes.py").write_text(shapes)
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider",
                           "-p", "no:randomly", "test_shapes.py"], cwd=folder, text=True,
                          capture_output=True, timeout=120)
    return [line for line in done.stdout.splitlines()
            if line.startswith(("PASSED ", "FAILED ", "SKIPPED ", "ERROR "))]


def test_plain_pytest_sees_the_same_ids_order_and_outcomes(tmp_path):
    materialized = materialize_module(SUITE)
    assert materialized != SUITE
    tree = ast.parse(materialized)
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    own = {name: [f.name for f in node.body if isinstance(f, ast.FunctionDef)]
           for name, node in classes.items()}
    assert own["TestShapes"] == ["test_area", "test_perim"]  # after the docstring
    assert ast.get_docstring(classes["TestShapes"]) == "The mixin's tests as they are."
    assert own["TestMore"] == ["test_area", "test_square"]  # test_perim = None stays
    assert own["TestSuper"] == ["test_perim", "setUp", "test_area"]  # its own test_area kept
    assert own["TestDerived"] == ["test_zero"]
    for shapes in (REFERENCE, STARTER, ALWAYS_EQUAL):
        original = _collect_and_run(tmp_path, SUITE, shapes)
        assert original and _collect_and_run(tmp_path, materialized, shapes) == original
    assert materialize_module(materialized) == materialized  # nothing left to copy


def test_a_copy_is_never_made_where_it_would_bind_another_class():
    text = ("import unittest\n\n\nclass Base(unittest.TestCase):\n"
            "    def test_a(self):\n        super().setUp()\n\n\nclass TestB(Base):\n"
            "    x = 1\n")
    assert materialize_module(text) == text
    mangled = text.replace("super().setUp()", "self.__hidden = 1")
    assert materialize_module(mangled) == mangled  # `self.__hidden` is `_Base__hidden` there
    assert materialize_module("class T(\n") == "class T(\n"  # no parse: as it is


def test_every_id_of_an_inherited_method_gets_a_canary_of_its_own():
    """Before, a method run under several ids got no canary (an edit would change them all);
    materialized, each id has its own function and its own canary."""
    sources = {"test_shapes.py": materialize_module(SUITE)}
    canaries = make_canaries(sources, ["test_shapes.py"], seed=1, solution_modules=["shapes"])
    assert {"test_shapes.py::TestShapes::test_area", "test_shapes.py::TestMore::test_area",
            "test_shapes.py::TestSuper::test_perim", "test_shapes.py::TestPlain::test_zero",
            "test_shapes.py::TestDerived::test_zero"} <= set(canaries.canaries)
    before = make_canaries({"test_shapes.py": SUITE}, ["test_shapes.py"], seed=1,
                           solution_modules=["shapes"])
    assert "test_shapes.py::TestShapes::test_area" not in before.canaries


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the local backend's warning
def test_a_suite_repeating_its_tests_across_testcase_classes_pays_the_reference(local_pool):
    task = Task(id="inherited", prompt="Implement area and perim in shapes.py.",
                files={"shapes.py": STARTER}, solution={"shapes.py": REFERENCE},
                tests={"test_shapes.py": SUITE}, timeout=60.0)
    grader = Grader(local_pool)
    assert grader.unverifiable(task) == ""
    reference = grader.grade(task, {"shapes.py": REFERENCE.encode()})
    assert reference.score == 1.0 and reference.all_passed, reference.reason
    earning = {t.name for t in reference.tests if t.earns}
    assert {"test_shapes.TestShapes::test_area", "test_shapes.TestMore::test_area",
            "test_shapes.TestSuper::test_perim", "test_shapes.TestDerived::test_zero",
            "test_shapes.TestPlain::test_zero"} <= earning, \
        sorted((t.name, t.rule) for t in reference.tests)
    for source in (STARTER, ALWAYS_EQUAL, REFERENCE.replace("2 * (w + h)", "w + h")):
        report = grader.grade(task, {"shapes.py": source.encode()})
        assert report.score < 1.0 and not report.infra_error, (source, report.reason)
    assert grader.grade(task, {"shapes.py": STARTER.encode()}).score == 0.0


# A mixin of tests in the package's __init__.py and one in a module beside the tests, as
# cachetools and many unittest suites share them: each method reads names only its own
# module has (`LIMIT`, `helper`), so a plain copy into the test module would fail.
PACKAGE_INIT = '''\
import math

from shapes import area

LIMIT = 3


def helper(w):
    return area(w, LIMIT)


class AreaMixin:
    def test_area(self):
        self.assertEqual(helper(2), 6)

    def test_root(self) -> None:
        self.assertEqual(math.isqrt(area(4, 4)), 4)
'''
BASE_MODULE = '''\
from shapes import perim

SIDE = 2


class Deeper:
    def test_perim(self):
        assert perim(SIDE, SIDE) == 8


class PerimChecks(Deeper):
    def test_perim_wide(self):
        assert perim(SIDE, 10) == 24
'''
PACKAGE_TESTS = '''\
import unittest

from . import AreaMixin

SETTING = 1  # a module-level assignment (a name a base could be bound to)
from .base import PerimChecks
from tests import base


class TestAreas(unittest.TestCase, AreaMixin):
    """Area, as unittest runs it."""


class TestWide(AreaMixin, unittest.TestCase):
    LIMIT = 99  # a class attribute of this class: the mixin reads its module's LIMIT


class TestPerims(PerimChecks):
    pass


class TestAgain(base.PerimChecks):
    def test_perim(self):  # its own: kept
        assert True
'''


def _package(folder: Path, tests: str, shapes: str) -> list[str]:
    (folder / "tests").mkdir(exist_ok=True)
    (folder / "tests" / "__init__.py").write_text(PACKAGE_INIT)
    (folder / "tests" / "base.py").write_text(BASE_MODULE)
    (folder / "tests" / "test_package.py").write_text(tests)
    (folder / "shapes.py").write_text(shapes)
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider",
                           "-p", "no:randomly", "tests/test_package.py"], cwd=folder, text=True,
                          capture_output=True, timeout=120)
    # (status, id, the exception's type): the copies' asserts are rewritten, their messages
    # more detailed than the inherited ones'
    lines = [line for line in done.stdout.splitlines()
             if line.startswith(("PASSED ", "FAILED ", "SKIPPED ", "ERROR "))]
    return [" ".join(line.split()[:2]) + " " + (
        "AssertionError" if line.partition(" - ")[2].startswith("assert ")
        else line.partition(" - ")[2].partition(":")[0]) for line in lines]


def _sources(tests: str = PACKAGE_TESTS) -> dict[str, str]:
    return {"tests/__init__.py": PACKAGE_INIT, "tests/base.py": BASE_MODULE,
            "tests/test_package.py": tests}


def test_mixins_of_other_hidden_files_get_bodies_that_run_in_their_own_module(tmp_path):
    """Bases from the package's __init__ (`from . import`), a sibling (`from .base import`)
    and an absolute import (`from tests import base`, `base.PerimChecks`) are copied in, each
    copy run with its own module's globals: plain pytest collects the same ids and gives the
    same outcomes, for the reference, the starter and an always-equal answer."""
    from opd_gym.grading.inherited import materialize

    sources = _sources()
    out = materialize(sources, ["tests/test_package.py"])["tests/test_package.py"]
    classes = {n.name: n for n in ast.parse(out).body if isinstance(n, ast.ClassDef)}
    own = {name: [f.name for f in node.body if isinstance(f, ast.FunctionDef)]
           for name, node in classes.items()}
    assert own["TestAreas"] == ["test_area", "test_root"]
    assert own["TestWide"] == ["test_area", "test_root"]
    assert own["TestPerims"] == ["test_perim", "test_perim_wide"]
    assert own["TestAgain"] == ["test_perim_wide", "test_perim"]
    for shapes in (REFERENCE, STARTER, ALWAYS_EQUAL):
        original = _package(tmp_path, PACKAGE_TESTS, shapes)
        assert len(original) == 8 and _package(tmp_path, out, shapes) == original, shapes
    canaries = make_canaries({**sources, "tests/test_package.py": out},
                             ["tests/test_package.py"], seed=1, solution_modules=["shapes"])
    assert {"tests/test_package.py::TestAreas::test_area",
            "tests/test_package.py::TestWide::test_area",
            "tests/test_package.py::TestPerims::test_perim",
            "tests/test_package.py::TestAgain::test_perim_wide"} <= set(canaries.canaries)


def test_a_copy_from_a_file_python_did_not_import_is_put_back(tmp_path):
    """Where the text was copied from another file than the one Python imported (a name
    resolved wrongly), the rebinding decorator puts the inherited method back: the outcomes
    stay plain pytest's, and only the copy's canary is lost."""
    from opd_gym.grading.inherited import Foreign

    wrong = BASE_MODULE.replace("== 8", "== 9").replace("== 24", "== 25")
    out = materialize_module(PACKAGE_TESTS, (Foreign(".base.PerimChecks"[1:], "tests/other.py",
                                                     wrong, "PerimChecks"),
                                             Foreign("PerimChecks", "tests/other.py", wrong,
                                                     "PerimChecks")))
    assert "== 9" in out  # the wrong text was copied in
    assert _package(tmp_path, out, REFERENCE) == _package(tmp_path, PACKAGE_TESTS, REFERENCE)


def test_methods_whose_definition_reads_their_module_are_not_copied():
    """A decorator, a default value or an annotation would be evaluated in the module the
    copy is placed in, where its names may not exist: such a mixin stays inherited."""
    from opd_gym.grading.inherited import materialize

    for line in ("    @unittest.skip('x')\n    def test_area(self):",
                 "    def test_area(self, w=LIMIT):", "    def test_area(self) -> int:"):
        init = PACKAGE_INIT.replace("    def test_area(self):", line)
        sources = {**_sources(), "tests/__init__.py": init}
        out = materialize(sources, ["tests/test_package.py"])["tests/test_package.py"]
        assert "AreaMixin, 'test_area'" not in out, line


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the local backend's warning
def test_a_suite_sharing_mixins_across_modules_pays_the_reference(local_pool):
    task = Task(id="mixins", prompt="Implement area and perim in shapes.py.",
                files={"shapes.py": STARTER}, solution={"shapes.py": REFERENCE},
                tests=_sources(), test_ids=None, timeout=60.0)
    grader = Grader(local_pool)
    assert grader.unverifiable(task) == ""
    reference = grader.grade(task, {"shapes.py": REFERENCE.encode()})
    assert reference.score == 1.0 and reference.all_passed, reference.reason
    earning = {t.name for t in reference.tests if t.earns}
    assert {"tests.test_package.TestAreas::test_area", "tests.test_package.TestWide::test_area",
            "tests.test_package.TestPerims::test_perim",
            "tests.test_package.TestAgain::test_perim_wide"} <= earning, \
        sorted((t.name, t.rule) for t in reference.tests)
    for source in (STARTER, ALWAYS_EQUAL, REFERENCE.replace("2 * (w + h)", "w + h")):
        report = grader.grade(task, {"shapes.py": source.encode()})
        assert report.score < 1.0 and not report.infra_error, (source, report.reason)
