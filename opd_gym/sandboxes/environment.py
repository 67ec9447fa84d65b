"""The one environment a test suite sees: the agent's terminal, validation and grading share it.

A suite's outcome can turn on its environment: termcolor's tests fail under `TERM=dumb`, a
parametrize over a set orders its ids by `PYTHONHASHSEED`, a date test follows `TZ`, a help
text wraps at `COLUMNS`. So this table is the only definition, and every place that runs a
suite takes its variables from it: the agent's terminal (`sandbox/agentd.py`, handed them as
`OPD_ENV_*` variables by each sandbox backend), validation and synthesis (which run the suite
through that terminal, `opd_gym.authoring.synth.run_suite`), plain pytest, the reference the
grader is checked against (`opd_gym.grading.plain`), and the grading harness (its launch
environment and each variant's, `opd_gym.grading.launch`). A variable mapped to None is unset
in all of them. Besides these, each has only `PATH` (the image's) and `HOME`: a writable
directory of its own outside the workspace, empty at the start (`AGENT_HOME` in the agent's
terminal; a fresh one per variant in the grade, which also gets a private `TMPDIR`).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

SUITE_ENVIRONMENT: Mapping[str, str | None] = MappingProxyType({
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "TZ": "UTC",
    # unset, as under CI and `docker exec`: `TERM=dumb` turns colour off where a suite tests it
    "TERM": None,
    "COLUMNS": None,
    "LINES": None,
    "PYTHONHASHSEED": "0",  # set-ordered parametrize ids are the same in every run
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONUNBUFFERED": "1",
    "PAGER": "cat",
    "GIT_PAGER": "cat",
})

# The agent's HOME in a Docker or bubblewrap sandbox: outside the workspace, so that what tests
# write to ~ never lands in the diff, and empty at the start, as each grading run's HOME is.
AGENT_HOME = "/tmp/home"

# What sandbox/agentd.py reads: each `OPD_ENV_<NAME>` of its environment becomes NAME in the
# agent's shell (the helper itself starts isolated, `python3 -I`, so they never reach it).
HELPER_PREFIX = "OPD_ENV_"


def suite_environment() -> dict[str, str]:
    """The variables a suite runs with (the table's set ones), as a fresh dict."""
    return {key: value for key, value in SUITE_ENVIRONMENT.items() if value is not None}


def unset_variables() -> tuple[str, ...]:
    """The variables no suite run sees (the table's None entries)."""
    return tuple(key for key, value in SUITE_ENVIRONMENT.items() if value is None)


def env_assignments() -> list[str]:
    """The suite environment as `NAME=value` words (for `env -i` or `docker exec --env`)."""
    return [f"{key}={value}" for key, value in suite_environment().items()]


def helper_environment(home: str) -> dict[str, str]:
    """What the in-sandbox helper is started with so that the agent's shell gets the suite
    environment and `home` as HOME (the helper creates it, as the agent, if missing)."""
    return {"HOME": home, **{HELPER_PREFIX + key: value
                             for key, value in suite_environment().items()}}
