"""Which tests of a hidden suite can earn under the default Grader, read from their source.

The one question task authors and suites ask grading before any sandbox runs: a test earns
when it has a canary that compares the solution's output only with values a canary can change
(`Canary.earns`); of those, the ones with a site the host can hold (held.py) pay on their own,
the others only when there are at least `MIN_UNHELD_EARNING` of them (else a forgery passing
each failing test on a coin would be paid). A task none of whose failing tests passes this
could never be paid for a fix, whatever the answer.

The answer depends on the suite, the solution's modules and grading's own rule code, and
takes seconds per library suite, so it can be kept on disk: `cache` names a folder, and the
key covers all three (a change to the rule computes it again).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from opd_gym.grading import canary, computed, held, near, sentinel
from opd_gym.grading.canary import MIN_UNHELD_EARNING, make_canaries
from opd_gym.nodeids import base_id


@dataclass(frozen=True)
class Earning:
    """The tests of a suite whose canary may earn, and those of them the host can hold."""

    earning: frozenset[str]
    holding: frozenset[str]

    def can_verify(self, failing: Iterable[str]) -> bool:
        """Whether a fix that makes `failing` (node ids) pass could be paid: one of them
        holds a site, or at least MIN_UNHELD_EARNING of them earn."""
        tests = {base_id(i) for i in failing}
        return bool(tests & self.holding) or len(tests & self.earning) >= MIN_UNHELD_EARNING


@functools.cache
def _rule_fingerprint() -> str:
    """A digest of the code that decides earning (these modules' source)."""
    digest = hashlib.sha256()
    for module in (canary, held, computed, near, sentinel):
        digest.update(Path(module.__file__ or "").read_bytes())
    digest.update(Path(__file__).read_bytes())
    return digest.hexdigest()


def earning_tests(tests: Mapping[str, str], solution_modules: Iterable[str],
                  cache: Path | None = None) -> Earning:
    """The earning and holdable tests of the suite `tests` (path -> source) whose solution
    defines `solution_modules`; read from and written to the folder `cache` when given."""
    items = tuple(sorted(tests.items()))
    return _earning(items, frozenset(solution_modules), cache)


@functools.cache
def _earning(items: tuple[tuple[str, str], ...], modules: frozenset[str],
             cache: Path | None) -> Earning:
    cached = None
    if cache is not None:
        key = hashlib.sha256(json.dumps([_rule_fingerprint(), items, sorted(modules)])
                             .encode("utf-8")).hexdigest()
        cached = cache / f"{key}.json"
        try:
            earning, holding = json.loads(cached.read_text(encoding="utf-8"))
            return Earning(frozenset(earning), frozenset(holding))
        except (OSError, ValueError, TypeError):
            pass
    found = _compute(dict(items), modules)
    if cached is not None:
        try:
            cached.parent.mkdir(parents=True, exist_ok=True)
            partial = cached.with_suffix(f".{os.getpid()}.tmp")
            partial.write_text(json.dumps([sorted(found.earning), sorted(found.holding)]),
                               encoding="utf-8")
            partial.replace(cached)
        except OSError:
            pass  # a read-only cache: computed again next time
    return found


def _compute(sources: dict[str, str], modules: frozenset[str]) -> Earning:
    paths = [p for p in sources if p.endswith(".py")
             and (p.rpartition("/")[2].startswith("test_") or p.endswith("_test.py"))]
    canaries = make_canaries(sources, paths, 0, solution_modules=modules)
    earning = frozenset(t for t, c in canaries.canaries.items() if c.earns)
    holdable = held.candidates(sources, paths, solution=modules)
    holding = earning & frozenset(holdable)
    # a site the rewrite of the grading runs cannot hold (the data is read elsewhere...) is
    # not held in calibration either, and the Grader would refuse the task (too_few_unheld);
    # computed sites are taken as holdable here (calibration records their values)
    if holding:
        holding -= held.rewrite((sources, sources), {t: holdable[t] for t in holding},
                                ((), ()), solution=modules).unheld
    return Earning(earning, holding)


__all__ = ["Earning", "earning_tests"]
