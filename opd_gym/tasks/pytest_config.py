"""A project's pytest configuration, in whichever file it ships, as one ini text.

pytest reads its settings from the first of these files in the project root that holds them
(pytest 9 order): `pytest.toml`, `.pytest.toml` (`[pytest]` tables), `pytest.ini`,
`.pytest.ini`, `pyproject.toml` (`[tool.pytest]`, pytest 9's native table, else
`[tool.pytest.ini_options]`), `tox.ini` (`[pytest]`) and `setup.cfg` (`[tool:pytest]`). The
grader and the reference hand pytest one ini file with `-c`, so `read_pytest_config` turns any
of these into ini text with the same meaning; `adapt_ini` then removes, with a note, what the
installed pytest refuses (options of plugins the environment lacks, a newer `minversion`).
"""

from __future__ import annotations

import configparser
import functools
import re
import shlex
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from opd_gym.errors import DatasetError

# (file, section or table) in the order pytest looks for them; the first that has one wins
_INI_FILES = (("pytest.ini", "pytest"), (".pytest.ini", "pytest"), ("tox.ini", "pytest"),
              ("setup.cfg", "tool:pytest"))
_ARGS_KEYS = {"addopts"}  # options that are one shell-split string in ini form


@dataclass(frozen=True)
class PytestConfig:
    """The project's pytest settings as ini text, and where they came from."""

    ini: str
    source: str  # e.g. "pyproject.toml [tool.pytest]"; "" when the project has none
    options: Mapping[str, str]

    @property
    def addopts(self) -> list[str]:
        return shlex.split(self.options.get("addopts", ""))


def _text(data: bytes | str, path: str) -> str:
    if isinstance(data, str):
        return data
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DatasetError(f"{path} is not UTF-8 text") from exc


def _ini_value(key: str, value: object, path: str) -> str:
    """A TOML value as pytest's ini form: lists one per line (addopts: shell-joined)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        if key in _ARGS_KEYS:
            return shlex.join(value)
        return "\n".join(value)
    raise DatasetError(f"{path}: pytest option {key!r} has a value pytest cannot read: "
                       f"{value!r}")


def render_ini(options: Mapping[str, str]) -> str:
    """`[pytest]` ini text for `options` (multi-line values indented as ini continuations)."""
    lines = ["[pytest]"]
    for key, value in options.items():
        parts = str(value).split("\n")
        if len(parts) == 1:
            lines.append(f"{key} = {parts[0]}")
        else:
            lines.append(f"{key} =")
            lines.extend(f"    {part}" for part in parts if part.strip())
    return "\n".join(lines) + "\n"


def _from_toml(table: Mapping[str, object], path: str) -> dict[str, str]:
    return {str(k): _ini_value(str(k), v, path) for k, v in table.items()}


def _from_ini(text: str, section: str, path: str) -> dict[str, str] | None:
    parser = configparser.ConfigParser(interpolation=None, strict=False,
                                       comment_prefixes=("#", ";"), inline_comment_prefixes=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # keys keep their case
    try:
        parser.read_string(text, source=path)
    except configparser.Error as exc:
        raise DatasetError(f"{path} cannot be read as an ini file: {exc}") from exc
    if not parser.has_section(section):
        return None
    return {k: v.strip("\n") for k, v in parser.items(section)}


_CONFIG_FILES = ("pytest.toml", ".pytest.toml", "pyproject.toml", *(n for n, _ in _INI_FILES))


def read_pytest_config(files: Mapping[str, bytes | str]) -> PytestConfig:
    """The pytest settings of a project root (`files`: relative path -> content). Read once
    per content of its config files: every task of a repository suite asks again, and
    parsing pyproject.toml is most of the cost of loading one."""
    config = _read_config(tuple((n, files[n]) for n in _CONFIG_FILES if n in files))
    return PytestConfig(config.ini, config.source, MappingProxyType(dict(config.options)))


@functools.lru_cache(maxsize=256)
def _read_config(found: tuple[tuple[str, bytes | str], ...]) -> PytestConfig:
    files = dict(found)
    for name in ("pytest.toml", ".pytest.toml"):
        if name in files:
            data = tomllib.loads(_text(files[name], name))
            table = data.get("pytest")
            if isinstance(table, dict):
                options = _from_toml(table, name)
                return PytestConfig(render_ini(options), f"{name} [pytest]", options)
    found: list[tuple[str, str]] = []
    for name, section in _INI_FILES[:2]:
        if name in files:
            found.append((name, section))
            break
    if not found and "pyproject.toml" in files:
        try:
            data = tomllib.loads(_text(files["pyproject.toml"], "pyproject.toml"))
        except tomllib.TOMLDecodeError as exc:
            raise DatasetError(f"pyproject.toml cannot be read: {exc}") from exc
        tool = data.get("tool", {}).get("pytest")
        if isinstance(tool, dict):
            native = {k: v for k, v in tool.items() if k != "ini_options"}
            if native:
                options = _from_toml(native, "pyproject.toml")
                return PytestConfig(render_ini(options), "pyproject.toml [tool.pytest]",
                                    options)
            legacy = tool.get("ini_options")
            if isinstance(legacy, dict):
                options = _from_toml(legacy, "pyproject.toml")
                return PytestConfig(render_ini(options),
                                    "pyproject.toml [tool.pytest.ini_options]", options)
    if not found:
        found = [(n, s) for n, s in _INI_FILES[2:] if n in files]
    for name, section in found:
        options = _from_ini(_text(files[name], name), section, name)
        if options is not None:
            return PytestConfig(render_ini(options), f"{name} [{section}]", options)
        if name.endswith("pytest.ini"):  # pytest.ini is the config even when empty
            return PytestConfig("[pytest]\n", f"{name} (empty)", {})
    return PytestConfig("[pytest]\n", "", {})


_UNRECOGNIZED = re.compile(r"unrecognized arguments: (.+)")
_MINVERSION = re.compile(r"requires pytest-[\w.]+, actual pytest-")
_REQUIRED = re.compile(r"Missing required plugins: ")


def adapt_ini(config: PytestConfig, refusal: str) -> tuple[PytestConfig, str] | None:
    """Drop what the installed pytest refused (its usage error text), with a note saying what.

    Handles unknown command-line options in `addopts` (a plugin the environment lacks, such
    as pytest-cov's `--cov`), a `minversion` newer than the installed pytest and
    `required_plugins`. None when the refusal is none of these (nothing to adapt).
    """
    options = dict(config.options)
    match = _UNRECOGNIZED.search(refusal)
    if match:
        refused = set(shlex.split(match.group(1).strip()))
        kept = [a for a in shlex.split(options.get("addopts", "")) if a not in refused]
        if len(kept) == len(config.addopts):
            return None  # refused on the command line, not in the config
        options["addopts"] = shlex.join(kept)
        note = "addopts without " + " ".join(sorted(refused)) + " (no such plugin installed)"
    elif _MINVERSION.search(refusal) and "minversion" in options:
        note = f"minversion {options.pop('minversion')} dropped (the installed pytest is older)"
    elif _REQUIRED.search(refusal) and "required_plugins" in options:
        note = f"required_plugins {options.pop('required_plugins')!r} dropped (not installed)"
    else:
        return None
    return PytestConfig(render_ini(options), config.source, options), note


def with_pythonpath(config: PytestConfig, folder: str) -> PytestConfig:
    """`config` with `folder` added to `pythonpath` (a src layout run uninstalled)."""
    options = dict(config.options)
    paths = options.get("pythonpath", "").split()
    if folder in paths:
        return config
    options["pythonpath"] = " ".join([*paths, folder])
    return PytestConfig(render_ini(options), config.source, options)


def runs_uninstalled(config: PytestConfig, files: Mapping[str, bytes | str]) -> PytestConfig:
    """`config` with `pythonpath = src` added where `files` hold a src layout, which the
    sandbox runs uninstalled (as `pip install -e .` would put it on the path)."""
    if any(p.startswith("src/") and p.endswith(".py") for p in files):
        return with_pythonpath(config, "src")
    return config


def _overrides(extra: list[str]) -> tuple[dict[str, str], list[str]]:
    """`-o NAME=VALUE` / `--override-ini NAME=VALUE` of `extra` as ini settings, and the rest
    (pytest reads ini overrides from its command line only, never from `addopts`)."""
    settings: dict[str, str] = {}
    rest: list[str] = []
    words = iter(extra)
    for word in words:
        value = None
        if word in ("-o", "--override-ini"):
            value = next(words, "")
        elif word.startswith("--override-ini="):
            value = word[len("--override-ini="):]
        elif word.startswith("-o") and "=" in word:
            value = word[2:]
        if value is None:
            rest.append(word)
            continue
        name, equal, setting = value.partition("=")
        if not equal or not name.strip():
            raise DatasetError(f"pytest option {word!r} {value!r}: an ini override is "
                               "NAME=VALUE (-o python_files=tests.py)")
        settings[name.strip()] = setting
    return settings, rest


def with_addopts(config: PytestConfig, extra: list[str]) -> PytestConfig:
    """`config` with `extra` appended to its `addopts` (a row's or repository's own options);
    an ini override among them (`-o python_files=tests.py`) becomes that ini setting."""
    if not extra:
        return config
    settings, extra = _overrides(list(extra))
    options = {**config.options, **settings}
    if extra:
        options["addopts"] = shlex.join([*config.addopts, *extra])
    return PytestConfig(render_ini(options), config.source or "the task's pytest options",
                        options)


# How SWE-bench's per-repository specs start a pytest run; anything else is not graded here.
_PYTEST_STARTS = (("pytest",), ("py.test",), ("python", "-m", "pytest"),
                  ("python3", "-m", "pytest"))
# Options whose value is the next word (so that word is not a test path).
_TAKES_VALUE = frozenset({"-p", "-c", "-o", "-W", "-r", "--tb", "--rootdir", "--confcutdir",
                          "--basetemp", "--import-mode", "--ignore", "--ignore-glob",
                          "--override-ini", "--pythonwarnings", "--log-level", "--durations",
                          "--doctest-glob", "--cache-dir"})
# Options that leave tests without an outcome: a grade needs the outcome of every test.
_HIDES_OUTCOMES = ("-x", "--exitfirst", "--maxfail", "--lf", "--last-failed", "--sw",
                   "--stepwise", "--co", "--collect-only", "-k", "-m", "--deselect")


def _hides(arg: str) -> bool:
    """Whether `arg` stops early or deselects (`-x`, `--maxfail=2`, `-vx`, `-kfoo`)."""
    if arg.startswith("--"):
        return arg.split("=", 1)[0] in _HIDES_OUTCOMES
    for letter in arg[1:]:  # a cluster of short flags; the rest after a value flag is its value
        if letter in "xkm":
            return True
        if letter in "rpcoWn":
            return False
    return False


def command_options(command: str | list[str], what: str = "test_cmd") -> list[str]:
    """The pytest options of a test command (`pytest -rA -p no:cacheprovider tests/`), as
    SWE-bench's per-repository specs give it: leading `VAR=value` words and test paths are
    left out (the task's test ids say what runs). DatasetError for a command that is not
    pytest, or an option that would leave a test without an outcome (`-x`, `-k`, `--lf`...)."""
    try:
        words = shlex.split(command) if isinstance(command, str) else list(command)
    except ValueError as exc:
        raise DatasetError(f"{what}: cannot split {command!r} into words ({exc})") from None
    if not all(isinstance(w, str) for w in words):
        raise DatasetError(f"{what} must be a command string or a list of words")
    while words and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[0]):
        words.pop(0)  # environment assignments before the command
    start = next((s for s in _PYTEST_STARTS if tuple(words[:len(s)]) == s), None)
    if start is None:
        raise DatasetError(f"{what} {command!r} does not run pytest: only pytest suites are "
                           "graded (give `pytest OPTIONS`, or the options as pytest_options)")
    return options_only(words[len(start):], what)


def options_only(args: list[str], what: str = "pytest_options") -> list[str]:
    """`args` without test paths, refusing options that would hide a test's outcome."""
    kept: list[str] = []
    value_next = False
    for arg in args:
        if value_next:
            kept.append(arg)
            value_next = False
        elif arg.startswith("-"):
            if _hides(arg):
                raise DatasetError(f"{what}: {arg!r} would leave tests without an outcome; "
                                   "a grade runs every test it scores (remove it)")
            kept.append(arg)
            value_next = arg in _TAKES_VALUE
        # else: a test path or node id; the task's own test ids say what runs
    return kept


__all__ = ["PytestConfig", "adapt_ini", "command_options", "options_only", "read_pytest_config",
           "render_ini", "with_addopts", "with_pythonpath"]
