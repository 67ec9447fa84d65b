"""Before a run's first episode: the tasks it will play, each checked for a grade that can vouch
for an answer (`Grader.unverifiable`). A task no test of which can earn pays every answer 0, so
a run refuses it up front, naming it and why, or plays without it when the user asks
(`skip_unverifiable`), saying how many it left out."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from opd_gym.errors import UnverifiableTaskError
from opd_gym.runs.config import RolloutConfig

SKIP_HINT = " (--skip-unverifiable plays the run without them)"


def verified_task_ids(config: RolloutConfig, tasks: Sequence[Any], task_ids: list[str],
                      episodes: Sequence[int], *, pool: Any, grader: Any,
                      say: Callable[[str], None] = lambda _: None) -> list[str]:
    """`task_ids` as the run plays them (`config.plan`): unchanged when every task the
    `episodes` would play can be verified; refused (UnverifiableTaskError) when one cannot;
    with `config.skip_unverifiable`, without those tasks (planned again, the new ones checked
    too), `say` told how many. Each task is calibrated once, as its first grade would be, on
    `pool` with `grader` (the run's own, so the episodes reuse those calibrations)."""
    from opd_gym.env import CodingEnv

    env = CodingEnv(tasks=list(tasks), sandbox=pool, grader=grader,
                    setup_cache=config.setup_cache)
    checked: dict[str, str] = {}
    ids = list(task_ids)
    try:
        while ids:
            planned = list(dict.fromkeys(config.plan(i, ids)[0] for i in episodes))
            fresh = [t for t in planned if t not in checked]
            if not fresh:
                break
            checked.update(_check(env, fresh, max(1, config.parallel)))
            bad = {t: checked[t] for t in planned if checked[t]}
            if not bad:
                break
            if not config.skip_unverifiable:
                raise UnverifiableTaskError(bad, total=len(planned), hint=SKIP_HINT)
            ids = [t for t in ids if not checked.get(t)]
    finally:
        env.close()
    skipped = {t: why for t, why in checked.items() if why}
    if skipped and not ids:
        raise UnverifiableTaskError(skipped, total=len(task_ids))
    if skipped:
        say(f"skipping {len(skipped)} of {len(task_ids)} task(s) that cannot be verified "
            f"(--skip-unverifiable): {', '.join(sorted(skipped)[:5])}"
            f"{' ...' if len(skipped) > 5 else ''}")
    return ids


def _check(env: Any, task_ids: list[str], workers: int) -> dict[str, str]:
    """{task id: why it cannot be verified, or ""}: calibrations in `workers` threads (the
    Grader is thread-safe; an environment image is built under the env's lock)."""
    with ThreadPoolExecutor(min(workers, len(task_ids))) as pool:
        found = pool.map(lambda t: env.verify([t]).get(t, ""), task_ids)
        return dict(zip(task_ids, found, strict=True))


def calibrated_line(calibrations: str, tasks: list[Any], task_ids: list[str]) -> str:
    """What the run says up front about its store: how many of the tasks it plays are
    calibrated there, and that the others calibrate on first use."""
    from opd_gym.grading.store import CalibrationStore

    wanted = set(task_ids)
    chosen = [t for t in tasks if t.id in wanted]
    done = CalibrationStore.open(calibrations).count(chosen)
    line = f"{done} of {len(chosen)} tasks calibrated in {calibrations}"
    if done < len(chosen):
        line += ("; the others calibrate before their first episode or at their first grade "
                 "(minutes on some repo tasks): `opd-gym tasks calibrate` does it ahead")
    return line


__all__ = ["calibrated_line", "verified_task_ids"]
