"""pytest node ids as the package shows them: without parametrization, and as report names.

Pure string functions, used by the grader (which ids a run must report) and by task records
(which graded names are FAIL_TO_PASS or PASS_TO_PASS) alike.
"""

from __future__ import annotations

import re

_PARAMS = re.compile(r"\[.*\]$", re.S)


def base_id(nodeid: str) -> str:
    """A pytest node id without its parametrization suffix."""
    return _PARAMS.sub("", nodeid)


def display_name(nodeid: str) -> str:
    """The short name reports show (`module::test`, classes dotted into the module part)."""
    path, _, rest = nodeid.partition("::")
    module = path[:-3] if path.endswith(".py") else path
    parts = [module.replace("/", "."), *rest.split("::")] if rest else [module]
    if len(parts) == 1:
        return parts[0]
    return ".".join(parts[:-1]) + "::" + parts[-1]


__all__ = ["base_id", "display_name"]
