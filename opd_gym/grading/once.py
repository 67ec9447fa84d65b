"""Tests that run in one grading variant only: those whose second run tells the grade nothing.

Each hidden test runs in both variants (the real test in one, its canary in the other), which
makes a grade cost about two plain pytest runs. For some tests the second run is read by
nothing, or judges nothing a forgery could win:

- a test without a canary: both variants hold the same real test, and only the outcome of
  the variant `real_in` names is ever read (the other only had to be reported);
- a test whose canary calibration found invalid on every node id (the reference passes it):
  its outcome is never judged;
- a test whose canary sits on a held site (held.py: the host holds the canary's changed value
  in that run, the sandbox never sees it): passing that canary takes a value nothing in the
  sandbox knows, so it catches nothing the held real test does not.

Such a test runs once, in the variant `real_in` names (drawn per grade from the OS's
randomness), and the other variant deselects it (`Variants.skip`). A test a sentinel may be
cloned from (any of calibration's sentinel sites, not only the grade's draw) keeps both runs:
a clone is judged beside its test in each run, and which tests run once, hence which
canary outcomes a report shows, is then the same in every grade of a task.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from opd_gym.grading.canary import CanarySet
from opd_gym.grading.held import HeldRuns
from opd_gym.grading.sentinel import SentinelSite
from opd_gym.nodeids import base_id

Skip = tuple[frozenset[str], frozenset[str]]


def _held_canary(test: str, nodeids: Iterable[str], real: int, runs: HeldRuns) -> bool:
    """Every node id of `test` is held in both runs, and the canary run holds other values
    (the canary's edit is a held literal)."""
    for nodeid in nodeids:
        key = nodeid if nodeid in runs.expect[0] or nodeid in runs.expect[1] else test
        held, canary = runs.expect[real].get(key), runs.expect[1 - real].get(key)
        if not held or not canary or held == canary or -1 in held or -1 in canary:
            return False
    return True


def _cloned(test: str, sites: Iterable[SentinelSite]) -> bool:
    """A clone of one of `sites` could pair with `test` (same file, same function name)."""
    path, _, rest = test.partition("::")
    return any(s.path == path and s.name == rest.rpartition("::")[2] for s in sites)


def run_once(canaries: CanarySet, real_in: Mapping[str, int], sites: Iterable[SentinelSite],
             reference_ids: Iterable[str] = (), invalid: frozenset[str] = frozenset(),
             runs: HeldRuns | None = None) -> Skip:
    """The base ids each variant leaves out; `sites`: every sentinel site the grades of the
    task draw from. Without `reference_ids` (a calibration's own runs) only tests without a
    canary run once; with them (a grade: the node ids the reference reported, calibration's
    `invalid`, the grade's held `runs`) also tests whose canary is invalid everywhere or
    held."""
    sites = tuple(sites)
    nodes: dict[str, list[str]] = {}
    for nodeid in reference_ids:
        nodes.setdefault(base_id(nodeid), []).append(nodeid)
    once = set()
    for test in canaries.tests:
        if test not in real_in or _cloned(test, sites):
            continue
        if test not in canaries.canaries:
            once.add(test)
            continue
        ids = nodes.get(test)
        if ids and (all(i in invalid for i in ids)
                    or runs is not None and _held_canary(test, ids, real_in[test], runs)):
            once.add(test)
    return (frozenset(t for t in once if real_in[t] != 0),
            frozenset(t for t in once if real_in[t] != 1))


__all__ = ["Skip", "run_once"]
