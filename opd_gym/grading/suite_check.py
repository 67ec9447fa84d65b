"""Check the grader against plain pytest on any project's own suite (`opd-gym tasks check-suite`).

The project (an sdist, unmodified) runs twice in the same image: once under plain
`python3 -m pytest` with its own configuration (`opd_gym.grading.plain`, which shares no code
with the grader), once graded as a task whose hidden tests are the project's suite, whose
reference solution is the project itself and whose test ids are the ones plain pytest ran.
Every id must get the same outcome. The project's pytest settings are read from whichever file
holds them (`opd_gym.tasks.pytest_config`); options the image's pytest refuses (a plugin it
lacks) are removed with a note, and an uninstalled src layout gets `pythonpath = src`.
"""

from __future__ import annotations

import re
import shlex
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Protocol

from opd_gym.errors import GradingError, OPDGymError
from opd_gym.grading.canary import module_names
from opd_gym.grading.expected import display_name, python_files
from opd_gym.grading.expected import is_test_module as test_module
from opd_gym.grading.plain import (
    PlainRun,
    container,
    exec_pytest,
    imported_by_pytest,
    put_files,
    run_plain,
)
from opd_gym.grading.report import GradeReport, TestOutcome
from opd_gym.grading.rules import BY_NAME
from opd_gym.records.task import Task
from opd_gym.tasks.pytest_config import (
    PytestConfig,
    adapt_ini,
    read_pytest_config,
    render_ini,
    runs_uninstalled,
    with_addopts,
)

AGREEMENT = 0.999
ADAPT_ROUNDS = 6


class Grades(Protocol):
    """Anything that grades a task's files (a `Grader` fits)."""

    def grade(self, task: Task, files: Mapping[str, bytes]) -> GradeReport: ...


@dataclass(frozen=True)
class IdVerdict:
    """One test id: plain pytest's outcome, the grader's, and the scoring rule's role for it
    (earns, gate or neutral: `opd_gym.grading.rules`) with the rule's name and sentence."""

    nodeid: str
    plain: str
    grader: str
    role: str = ""
    rule: str = ""
    why: str = ""

    def to_dict(self) -> dict[str, str]:
        return {"id": self.nodeid, "plain": self.plain, "grader": self.grader,
                "agree": self.plain == self.grader, "role": self.role, "rule": self.rule,
                "why": self.why}


@dataclass(frozen=True)
class SuiteCheck:
    """One project's verdicts under plain pytest and under the grader, compared id by id.

    `score` is the unmodified code's grade (None where no grade ran): an honest suite must
    get 1.0 with at least one earning test, or the grader would pay a correct answer less
    than it is worth (`problems` says so, and `ok` is False)."""

    name: str
    ids: int
    agree: int
    disagreements: tuple[str, ...]
    infra_error: str  # "" when the grade ran; else why it did not
    plain_s: float
    grade_s: float  # one grade after calibration (what every episode pays)
    earning: int
    shapes: tuple[str, ...]
    config: str
    notes: tuple[str, ...] = ()
    forgery: tuple[str, ...] = ()
    calibrate_s: float = 0.0  # the task's calibration, paid once per task and Grader
    score: float | None = None
    reason: str = ""  # the grade's reason where it has one (why the score is below 1.0)
    gates_failed: tuple[str, ...] = ()
    verdicts: tuple[IdVerdict, ...] = ()

    @property
    def fraction(self) -> float:
        return self.agree / self.ids if self.ids else 0.0

    @property
    def agrees(self) -> bool:
        """The grader's outcomes match plain pytest's on (at least AGREEMENT of) the ids."""
        return (self.ids > 0 and not self.infra_error and not self.forgery
                and self.agree >= AGREEMENT * self.ids)

    @property
    def problems(self) -> tuple[str, ...]:
        """Why this check fails, one sentence each (empty: it passes)."""
        found = []
        if self.ids == 0 or self.infra_error:
            found.append(f"no verdict: {self.infra_error or 'no test ran'}")
        if self.forgery:
            found.append(f"honest code flagged as a forgery: {', '.join(self.forgery[:5])}")
        if self.ids and not self.infra_error and self.agree < AGREEMENT * self.ids:
            found.append(f"{self.ids - self.agree} of {self.ids} ids disagree with plain "
                         "pytest")
        if self.score is not None and not self.infra_error:
            if self.earning == 0:
                found.append("no test could earn: every grade of this suite would be 0 (an "
                             f"unverifiable task){': ' + self.reason if self.reason else ''}")
            elif self.score < 1.0:
                why = self.reason or (f"gates failed: {', '.join(self.gates_failed[:3])}"
                                      if self.gates_failed else "")
                found.append(f"the unmodified code scores {self.score:.3f}, not 1.0"
                             f"{': ' + why if why else ''}")
        return tuple(found)

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, object]:
        """Plain JSON: the figures, the problems and every id's verdicts."""
        return {"name": self.name, "ids": self.ids, "agree": self.agree, "score": self.score,
                "earning": self.earning, "ok": self.ok, "problems": list(self.problems),
                "reason": self.reason, "infra_error": self.infra_error,
                "forgery": list(self.forgery), "gates_failed": list(self.gates_failed),
                "plain_s": self.plain_s, "grade_s": self.grade_s,
                "calibrate_s": self.calibrate_s, "config": self.config,
                "shapes": list(self.shapes), "notes": list(self.notes),
                "rules": self.rule_counts(),
                "tests": [v.to_dict() for v in self.verdicts]}

    def rule_counts(self) -> dict[str, int]:
        """How many ids each scoring rule decided (its name: count), most first."""
        counts: dict[str, int] = {}
        for verdict in self.verdicts:
            if verdict.rule:
                counts[verdict.rule] = counts.get(verdict.rule, 0) + 1
        return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


@dataclass(frozen=True)
class SuiteProject:
    """A project split for grading: its suite hidden, the rest the reference solution."""

    name: str
    files: Mapping[str, bytes]
    config: PytestConfig
    notes: tuple[str, ...] = field(default_factory=tuple)


def is_test_module(path: str, config: PytestConfig) -> bool:
    """Whether pytest collects `path` as a test module under `config` (its python_files)."""
    return PurePosixPath(path).name != "conftest.py" and test_module(
        path, python_files(config.ini))


def _src_packages(files: Mapping[str, bytes]) -> bool:
    return any(p.startswith("src/") and p.endswith(".py") for p in files)


def prepare(name: str, files: Mapping[str, bytes], image: str,
            ini: str | None = None, options: Sequence[str] = ()) -> SuiteProject:
    """Read the project's pytest settings and make them run in `image`, noting each change.

    `ini`: use this ini text instead of the project's own (a curated library record).
    `options`: pytest options the project passes elsewhere (tox's command line, CI scripts),
    added to its `addopts`.
    """
    notes: list[str] = []
    if ini is not None:
        config = PytestConfig(ini, "given ini", _options(ini))
    else:
        config = read_pytest_config(files)
        if not config.source:
            notes.append("no pytest configuration in the project")
        uninstalled = runs_uninstalled(config, files)
        if uninstalled is not config:
            config = uninstalled
            notes.append("pythonpath = src (the src layout runs uninstalled)")
        if options:
            config = with_addopts(config, list(options))
            notes.append(f"addopts + {shlex.join(options)} (given)")
        files = _with_metadata(files, notes)
        config = _adapted(files, config, image, notes)
    return SuiteProject(name, dict(files), config, tuple(notes))


def _with_metadata(files: Mapping[str, bytes], notes: list[str]) -> Mapping[str, bytes]:
    """The sdist's PKG-INFO as the metadata of an installed distribution beside its code
    (`src/` or the root): a suite that asks `importlib.metadata` for the project's version or
    metadata finds it, as after `pip install -e .`. Nothing where the sdist ships its own
    (an `.egg-info` or `.dist-info` folder there)."""
    info = files.get("PKG-INFO")
    if info is None:
        return files
    fields = dict(re.findall(r"^(Name|Version): *(.+?) *$", info.decode("utf-8", "replace"),
                             re.M))
    if "Name" not in fields or "Version" not in fields:
        return files
    root = "src/" if _src_packages(files) else ""
    if any(re.fullmatch(rf"{re.escape(root)}[^/]+\.(egg|dist)-info/.+", p) for p in files):
        return files
    name = re.sub(r"[-_.]+", "_", fields["Name"]).lower()
    path = f"{root}{name}-{fields['Version']}.dist-info/METADATA"
    notes.append(f"{path} from PKG-INFO (the suite runs uninstalled; importlib.metadata finds "
                 "it as after an editable install)")
    return {**files, path: info}


def _options(ini: str) -> dict[str, str]:
    import configparser

    parser = configparser.ConfigParser(interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(ini)
    return dict(parser.items("pytest")) if parser.has_section("pytest") else {}


def _adapted(files: Mapping[str, bytes], config: PytestConfig, image: str,
             notes: list[str]) -> PytestConfig:
    """Collect once in `image`; drop what its pytest refuses (usage errors), until it runs."""
    with container(image) as name:
        shadowed = sorted(module_names(p for p in files if not is_test_module(p, config))
                          & imported_by_pytest(name))
        if shadowed:  # pytest loads its own copy first: the suite never imports the project's
            notes.append(f"pytest itself imports the image's {', '.join(shadowed)} before the "
                         "suite runs, so the suite tests that copy, not this project's (no "
                         "test can earn)")
        put_files(name, dict(files))
        for _ in range(ADAPT_ROUNDS):
            put_files(name, {"pytest.ini": config.ini.encode()})
            code, _, output = exec_pytest(name, ["--collect-only", "-q", "-p",
                                                 "no:cacheprovider"], timeout=300)
            if code != 4:  # 4: a usage error (an unknown option, a newer minversion)
                return config
            adapted = adapt_ini(config, output)
            if adapted is None:
                return config
            config, note = adapted
            notes.append(note)
    return config


def hidden_files(project: SuiteProject, ids: Sequence[str],
                 test_dirs: Sequence[str] | None = None) -> dict[str, str]:
    """The suite to hide: folders of the collected test modules, conftest files, text doctests.

    A test module's folder is its top-level folder (`tests/`) unless that folder also holds
    the project's own code (tests inside the package: then the module's own folder). Doctest
    ids in package modules are not hidden files: the grader takes their examples from the
    pristine module and runs them against the agent's code.
    """
    config, files = project.config, project.files
    paths = {i.split("::", 1)[0] for i in ids}
    roots: set[str] = set(test_dirs or ())
    singles: set[str] = set()
    if test_dirs is None:
        test_folders = {str(PurePosixPath(p).parent) for p in paths if is_test_module(p, config)}
        for path in paths:
            parts = PurePosixPath(path).parts
            if not path.endswith(".py"):
                singles.add(path)  # a text doctest file (README.rst, docs/*.rst)
            elif not is_test_module(path, config):
                continue  # a package module's doctests
            elif len(parts) == 1:
                singles.add(path)
            else:
                top = parts[0]
                roots.add(top if not _holds_code(files, top, config, test_folders, paths)
                          else str(PurePosixPath(path).parent))
    hidden: dict[str, str] = {}
    for path, data in files.items():
        pure = PurePosixPath(path)
        inside = path in singles or any(pure.is_relative_to(r) for r in roots)
        if inside or pure.name == "conftest.py":
            try:
                hidden[path] = data.decode("utf-8")
            except UnicodeDecodeError:
                continue  # binary data files stay in the workspace, where tests read them
    return hidden


def _holds_code(files: Mapping[str, bytes], top: str, config: PytestConfig,
                test_folders: set[str], ids_paths: set[str]) -> bool:
    for path in files:
        pure = PurePosixPath(path)
        if not (path.endswith(".py") and pure.is_relative_to(top)):
            continue
        if path in ids_paths and not is_test_module(path, config):
            return True  # doctests of package code live here
        if is_test_module(path, config) or pure.name in ("conftest.py", "__init__.py"):
            continue
        if str(pure.parent) not in test_folders and not any(
                pure.is_relative_to(f) for f in test_folders):
            return True
    return False


TEXT_DOCTEST_SUFFIXES = (".txt", ".rst", ".md", ".doctest")


def _doctest_globs(config: PytestConfig) -> list[str]:
    """The `--doctest-glob` patterns of the suite's addopts (pytest's default: test*.txt)."""
    args = shlex.split(config.options.get("addopts", ""))
    found = [a.split("=", 1)[1] for a in args if a.startswith("--doctest-glob=")]
    found += [b for a, b in zip(args, args[1:], strict=False) if a == "--doctest-glob"]
    return found or ["test*.txt"]


def _text_doctest(path: str, globs: Sequence[str]) -> bool:
    """Whether a non-Python test file is doctest text (by suffix or a --doctest-glob), not a
    custom collector's file."""
    pure = PurePosixPath(path)
    return pure.suffix in TEXT_DOCTEST_SUFFIXES or any(pure.match(g) for g in globs)


def shapes(project: SuiteProject, ids: Sequence[str], hidden: Mapping[str, str]) -> list[str]:
    """What makes this suite's shape: doctests, layout, stdlib names, conftest, config."""
    config, files = project.config, project.files
    found: list[str] = []
    paths = {i.split("::", 1)[0] for i in ids}
    if any(p.endswith(".py") and not is_test_module(p, config) for p in paths):
        found.append("doctest-modules")
    texts = [p for p in paths if not p.endswith(".py")]
    globs = _doctest_globs(config)
    if any(_text_doctest(p, globs) for p in texts):
        found.append("text doctests")
    if any(not _text_doctest(p, globs) for p in texts):
        found.append("custom collector")  # a conftest's pytest_collect_file (YAML cases...)
    if _src_packages(files):
        found.append("src layout")
    code = [p for p in files if p.endswith(".py") and p not in hidden]
    stdlib = sorted({PurePosixPath(p).stem for p in code if len(PurePosixPath(p).parts) > 1
                     and PurePosixPath(p).stem in sys.stdlib_module_names})
    if stdlib:
        found.append("stdlib-named modules (" + ", ".join(stdlib[:3]) + ")")
    if any(PurePosixPath(p).name == "conftest.py" for p in hidden):
        found.append("conftest")
    package_dirs = {str(PurePosixPath(p).parent) for p in code if "/" in p}
    namespace = sorted(d for d in package_dirs if f"{d}/__init__.py" not in files
                       and not d.startswith(("docs", "doc", "examples", "scripts", "benchmarks"))
                       and d not in ("src",))
    if namespace:
        found.append("namespace packages")
    args = shlex.split(config.options.get("addopts", ""))
    if "--import-mode=importlib" in args:
        found.append("importlib mode")
    if config.options.get("python_files"):
        found.append("own python_files")
    return found


def suite_task(project: SuiteProject, reference: PlainRun, hidden: Mapping[str, str],
               timeout: float) -> Task:
    """The project as a task: its suite hidden, its own code the reference solution, its
    binary files (data the suite reads or makes tests from) the task's assets."""
    solution: dict[str, str] = {}
    assets: dict[str, bytes] = {}
    for path, data in project.files.items():
        if path in hidden or path == "pytest.ini":
            continue
        try:
            solution[path] = data.decode("utf-8")
        except UnicodeDecodeError:
            assets[path] = data  # in every calibration run too, as in the grade's workspace
    tests = dict(hidden)
    if not tests:  # doctests in package modules only: their pristine texts are the tests
        for nodeid in reference.outcomes:  # (run against the agent's modules, never laid over)
            path = nodeid.split("::", 1)[0]
            if path in solution and path.endswith(".py") \
                    and not is_test_module(path, project.config):
                tests[path] = solution[path]
    return Task(id=f"suite-{project.name}", prompt=f"{project.name} against its own tests",
                files={}, tests=tests, solution=solution, timeout=timeout,
                pytest_ini=project.config.ini, test_ids=tuple(sorted(reference.outcomes)),
                assets=assets)


def check_project(project: SuiteProject, grader: Grades, image: str, *,
                  test_dirs: Sequence[str] | None = None, timeout: float = 300.0) -> SuiteCheck:
    """Plain pytest's verdict and the grader's on `project`, compared id by id."""
    files = {p: d for p, d in project.files.items() if p != "pytest.ini"}
    reference = run_plain(image, files, project.config.ini)
    base = dict(name=project.name, config=project.config.source or "none",
                notes=project.notes, plain_s=reference.wall)
    if not reference.outcomes or reference.collect_errors:
        errors = "; ".join(f"{k}: {v.splitlines()[-1] if v else ''}"
                           for k, v in list(reference.collect_errors.items())[:3])
        missing = sorted({m.group(1) for v in [*reference.collect_errors.values(),
                                               "" if reference.outcomes else reference.output]
                          for m in re.finditer(r"No module named '([^']+)'", v or "")})
        if missing:
            needs = f"missing module(s) {', '.join(missing)}: install them with --setup"
        elif reference.collect_errors:  # the suite's own doing, or a dependency's
            needs = ("its collection fails (a dependency --setup installs, or an option "
                     "--pytest-options gives, may fix it)")
        elif reference.exit_code == 5:
            needs = ("it collects no tests: name the suite's files, e.g. "
                     "--pytest-options='-o python_files=tests.py'")
        else:
            last = next((line for line in reversed(reference.output.splitlines())
                         if line.strip() and not line.startswith("=")), "")
            needs = "it needs what the image lacks (install it with --setup)" + (
                f"; pytest said: {last.strip()[:300]}" if last else "")
        why = (f"plain pytest cannot run this suite in the image; {needs} (exit "
               f"{reference.exit_code}{': ' + errors if errors else ''})")
        return SuiteCheck(ids=len(reference.outcomes), agree=0, disagreements=(),
                          infra_error=why, grade_s=0.0, earning=0, shapes=(), **base)
    hidden = hidden_files(project, list(reference.outcomes), test_dirs)
    try:
        task = suite_task(project, reference, hidden, timeout)
    except OPDGymError as exc:  # this project's row says why; the other sdists still run
        return SuiteCheck(ids=len(reference.outcomes), agree=0, disagreements=(),
                          infra_error=f"no task could be made of the suite: {exc}", grade_s=0.0,
                          earning=0, shapes=(), **base)
    workspace = {p: d for p, d in files.items() if p not in hidden}
    started = time.perf_counter()
    calibrate = getattr(grader, "calibration", None)
    if callable(calibrate):  # paid once per task: timed apart from the grade itself
        try:
            calibrate(task)
        except GradingError:
            pass  # the grade below fails the same way and reports why
    calibrate_s = time.perf_counter() - started
    started = time.perf_counter()
    report = grader.grade(task, workspace)
    grade_s = time.perf_counter() - started
    graded = {t.name: t for t in report.tests}
    verdicts = tuple(_verdict(nodeid, want, graded.get(display_name(nodeid)))
                     for nodeid, want in sorted(reference.outcomes.items()))
    wrong = tuple(f"{v.nodeid}: plain={v.plain} grader={v.grader}" for v in verdicts
                  if v.plain != v.grader)
    # an unverifiable grade is flagged an infra error, but it is the suite's verdict: shown
    # as the score and "no test could earn", not as a failure of the machinery
    infra = report.reason if report.infra_error and not report.unverifiable else ""
    return SuiteCheck(ids=len(reference.outcomes), agree=len(reference.outcomes) - len(wrong),
                      disagreements=wrong, infra_error=infra, grade_s=grade_s,
                      calibrate_s=calibrate_s,
                      earning=report.earning,
                      shapes=tuple(shapes(project, list(reference.outcomes), hidden)),
                      forgery=tuple(report.forgery), score=report.score,
                      reason=report.reason, gates_failed=tuple(report.gates_failed),
                      verdicts=verdicts, **base)


def _verdict(nodeid: str, plain: str, graded: TestOutcome | None) -> IdVerdict:
    if graded is None:
        return IdVerdict(nodeid, plain, "missing")
    rule = BY_NAME.get(graded.rule)
    role = rule.role if rule is not None else (
        "earns" if graded.earns else "neutral" if graded.neutral else "gate")
    return IdVerdict(nodeid, plain, graded.outcome, role, graded.rule,
                     rule.says if rule is not None else "")


HEADER = ("suite", "ids", "agree", "score", "earning", "plain s", "grade s", "x plain",
          "calibrate s", "config", "shapes")


def table(checks: Sequence[SuiteCheck]) -> str:
    """The agreement table, one row per suite, then each suite's notes and disagreements."""
    rows = [HEADER]
    for c in checks:
        agree = f"{c.agree} ({100 * c.fraction:.1f}%)" if not c.infra_error else "no verdict"
        ratio = f"{c.grade_s / c.plain_s:.2f}" if c.plain_s > 0 and c.grade_s > 0 else "-"
        score = "-" if c.score is None or c.infra_error else f"{c.score:.3f}"
        rows.append((c.name, str(c.ids), agree, score, str(c.earning), f"{c.plain_s:.1f}",
                     f"{c.grade_s:.1f}", ratio, f"{c.calibrate_s:.1f}", c.config,
                     ", ".join(c.shapes) or "-"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(HEADER) - 1)]
    lines = []
    for n, row in enumerate(rows):
        lines.append("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=False))
                     + "  " + row[-1])
        if n == 0:
            lines.append("-" * len(lines[0]))
    for c in checks:
        for note in c.notes:
            lines.append(f"{c.name}: note: {note}")
        if c.verdicts and not c.infra_error:
            rules = ", ".join(f"{name} {n}" for name, n in c.rule_counts().items())
            lines.append(f"{c.name}: rules: {rules}")
        for problem in c.problems:
            if not problem.endswith("disagree with plain pytest"):
                lines.append(f"{c.name}: {problem}")
        for line in c.disagreements[:10]:
            lines.append(f"{c.name}: {line}")
        if len(c.disagreements) > 10:
            lines.append(f"{c.name}: ... {len(c.disagreements) - 10} more disagreements")
    return "\n".join(lines)


__all__ = ["AGREEMENT", "IdVerdict", "SuiteCheck", "SuiteProject", "check_project", "hidden_files",
           "is_test_module", "prepare", "render_ini", "shapes", "suite_task", "table"]
