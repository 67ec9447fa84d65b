"""The rollout job: play episodes with a policy, score them with OPD, write them crash-safe.

Episodes are numbered 0..N-1 (episode i plays task i mod len(tasks) with seed seed+i) and
written to `trajectories.jsonl` as each finishes (fsync'd), so a killed run loses only the
episodes in flight and `resume=True` plays just the ones not played (missing, unfinished,
interrupted, or graded with an infra error).

Ctrl-C (see `opd_gym.runs.interrupt`): the first stops new episodes and gives running ones
`grace` seconds, then cancels them; their rows are marked interrupted. The summary is written
either way, computed from every row of the run.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from opd_gym import specs
from opd_gym.grading.store import make_grader
from opd_gym.records.policy import close
from opd_gym.rollout_core import (
    FROM_CONFIG,
    RowSink,
    build_agent,
    build_env,
    load_teacher,
    opd_config,
    play,
)
from opd_gym.runs import (
    SUMMARY,  # noqa: F401  (SUMMARY, TRAJECTORIES, read_trajectories: the runner's old names)
    TRAJECTORIES,  # noqa: F401
    RunDirectory,
    RunSummary,
    read_trajectories,  # noqa: F401
)
from opd_gym.runs.config import RolloutConfig, plain_config
from opd_gym.runs.interrupt import DEFAULT_GRACE_S, Interrupt
from opd_gym.runs.progress import Progress
from opd_gym.runs.verify import calibrated_line, verified_task_ids
from opd_gym.tasks.resolve import resolve_tasks

CANCEL_WAIT_S = 30.0  # after cancelling, how long the runner waits for episodes to return


def finished_episodes(path: Path) -> set[int]:
    """Episode numbers already played (what `resume` skips)."""
    return RunDirectory(path).done()


def run_rollout(
    config: RolloutConfig,
    make_agent: Callable[[Any], Any],
    *,
    teacher: Any = None,
    judge: Any = FROM_CONFIG,
    on_episode: Callable[[dict[str, Any], dict[str, float]], None] | None = None,
    progress: bool = True,
    grace: float = DEFAULT_GRACE_S,
) -> RunSummary:
    """Play `config.episodes` episodes; `make_agent(env)` builds one agent per worker.

    The OPD options are `config.opd_options` (a mapping or an OPDConfig), with `teacher`
    and `judge` set over them when given (teacher None or judge FROM_CONFIG: the config's,
    whose defaults are the tiny teacher and the rule judge). They are validated
    before anything starts; a teacher built here from a spec is loaded once, shared by every
    worker and closed at the end; agents with a `close()` are closed by their worker.
    Returns the summary of every row of the run (`.interrupted` when Ctrl-C stopped it); a
    second Ctrl-C raises KeyboardInterrupt after writing that summary.
    """
    opd = opd_config(config, teacher, judge) if config.opd else None
    run = RunDirectory(config.out_dir)
    done = run.open_for_run(resume=config.resume)
    todo = [i for i in range(config.episodes) if i not in done]
    started = time.perf_counter()
    tasks = resolve_tasks(config.tasks)
    task_ids = config.task_ids or [t.id for t in tasks]
    running: set[int] = set()
    lock = threading.Lock()
    stop = Interrupt(grace, running=lambda: len(running))
    pool = specs.make_pool(config.sandbox, size=max(2, config.parallel + 1))
    try:  # one per run: each task is calibrated once, whatever the slot
        grader = make_grader(pool, config.calibrations)
        if config.calibrations is not None and todo:
            _say(calibrated_line(config.calibrations, tasks, task_ids))
    except BaseException:
        pool.close()
        raise
    if config.verify_tasks and todo:  # before the first episode: no task that pays every 0
        try:
            task_ids = verified_task_ids(config, tasks, task_ids, todo, pool=pool,
                                         grader=grader, say=_say)
        except BaseException:
            pool.close()
            raise
    owned: list[Any] = []  # what this job built from specs; closed in the finally below
    queue = deque(todo)
    bar = Progress(len(todo), progress)
    sink = RowSink(run, on_episode=on_episode, progress=bar)
    setup_errors: list[BaseException] = []

    def slot() -> None:
        """A worker thread: its own env stack and agent, episodes from the queue until none is
        left or the run stops."""
        recorder = agent = None
        try:
            recorder = build_env(config, tasks=tasks, pool=pool, opd_options=opd,
                                 grader=grader)
            agent = build_agent(recorder, make_agent)
            while not stop.stopping.is_set():
                with lock:
                    if not queue:
                        return
                    i = queue.popleft()
                    running.add(i)
                try:
                    task_id, seed = config.plan(i, task_ids)
                    sink(play(recorder, agent, i, task_id, seed, check=stop.check,
                              on_turn=bar.turn, cancelled=stop.cancelled.is_set))
                finally:
                    with lock:
                        running.discard(i)
        except BaseException as exc:  # a worker that cannot start ends the run
            setup_errors.append(exc)
            stop.stopping.set()
        finally:
            if agent is not None:
                close(agent)
            if recorder is not None:
                recorder.close()

    aborted = False
    try:
        with stop.installed():
            try:
                if opd is not None:  # loaded once, shared by every worker
                    opd, teacher_built = load_teacher(opd)
                    owned.append(teacher_built)
                threads = [threading.Thread(target=slot, name=f"opd-gym-episodes-{w}",
                                            daemon=True)  # daemon: an abort does not wait
                           for w in range(min(max(config.parallel, 1), len(todo)))]
                for thread in threads:
                    thread.start()
                _wait(threads, stop, pool)
            except KeyboardInterrupt:  # the second Ctrl-C: abort now
                aborted = True
                stop.cancel()
    finally:
        for obj in owned:
            close(obj)
        pool.close()
        bar.close()
    if setup_errors and not aborted:
        raise setup_errors[0]
    summary = RunSummary.of_rows(
        run.episodes(), repeat=config.repeat, skipped=len(done), failures=sink.failures,
        config=plain_config(config),
        seconds=time.perf_counter() - started,
        interrupted=aborted or stop.deadline is not None)
    run.write_summary(summary.to_dict())
    if aborted:
        raise KeyboardInterrupt
    return summary


def _say(message: str) -> None:
    print(f"opd-gym rollout: {message}", file=sys.stderr, flush=True)


def _wait(threads: list[threading.Thread], stop: Interrupt, pool: Any) -> None:
    """Wait for the worker threads in the main thread (so Ctrl-C reaches the handler). After
    the grace period cancel the running episodes: each stops before its next turn, and closing
    the pool makes its grading fail at once; wait at most CANCEL_WAIT_S more for them."""
    give_up: float | None = None
    while any(t.is_alive() for t in threads):
        time.sleep(0.1)
        if stop.overdue() and not stop.cancelled.is_set():
            stop.say("grace period over: cancelling the running episodes")
            stop.cancel()
            give_up = time.monotonic() + CANCEL_WAIT_S
            pool.close()
        if give_up is not None and time.monotonic() > give_up:
            stop.say(f"{sum(t.is_alive() for t in threads)} episode(s) did not return after "
                     "cancelling; leaving them")
            return


__all__ = ["FROM_CONFIG", "RolloutConfig", "finished_episodes", "run_rollout"]
