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
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from opd_gym import specs
from opd_gym.grading import Grader
from opd_gym.opd.config import OPDConfig
from opd_gym.runs import (
    SUMMARY,  # noqa: F401  (SUMMARY, TRAJECTORIES, read_trajectories: old import paths)
    TRAJECTORIES,  # noqa: F401
    EpisodeRow,
    RunDirectory,
    RunSummary,
    read_trajectories,  # noqa: F401
)
from opd_gym.runs.config import RolloutConfig, plain_config
from opd_gym.runs.core import build_agent, build_env, mark_interrupted, play_episode, unfinished_row
from opd_gym.runs.interrupt import DEFAULT_GRACE_S, EpisodeInterrupted, Interrupt
from opd_gym.tasks.resolve import resolve_tasks

_plain_config = plain_config  # old private name (the Ray runner used it)
CANCEL_WAIT_S = 30.0  # after cancelling, how long the runner waits for episodes to return


def finished_episodes(path: Path) -> set[int]:
    """Episode numbers already played (what `resume` skips)."""
    return RunDirectory(path).done()


class _FromConfig:
    def __repr__(self) -> str:
        return "FROM_CONFIG"


FROM_CONFIG: Any = _FromConfig()  # run_rollout(judge=...) default: the OPD config's judge


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
    opd_config = _opd_config(config, teacher, judge) if config.opd else None
    run = RunDirectory(config.out_dir)
    done = run.open_for_run(resume=config.resume)
    todo = [i for i in range(config.episodes) if i not in done]
    started = time.perf_counter()
    tasks = resolve_tasks(config.tasks)
    task_ids = config.task_ids or [t.id for t in tasks]
    failures: list[str] = []
    running: set[int] = set()
    lock = threading.Lock()
    stop = Interrupt(grace, running=lambda: len(running))
    pool = specs.make_pool(config.sandbox, size=max(2, config.parallel + 1))
    grader = Grader(pool)  # one per run: each task is calibrated once, whatever the slot
    owned: list[Any] = []  # what this job built from specs; closed in the finally below
    queue = deque(todo)
    live = RunSummary()  # running metrics for on_episode (the written summary recounts)
    bar = _progress(len(todo), progress)
    setup_errors: list[BaseException] = []

    def record(row: EpisodeRow) -> None:
        with lock:
            run.append(row)
            if row.played:
                metrics = live.count(row)
                data = row.to_dict()
                if on_episode is not None:
                    on_episode(data, metrics)
                bar(data)

    def _play(recorder: Any, agent: Any, i: int) -> None:
        task_id, seed = config.plan(i, task_ids)
        try:
            row = play_episode(recorder, agent, i, task_id, seed, check=stop.check,
                               on_turn=bar.turn)
        except EpisodeInterrupted:
            partial = unfinished_row(recorder, i,
                                     why="the run was interrupted", interrupted=True)
            if partial is not None:
                record(partial)
            return
        except Exception as exc:  # one broken episode must not end the run
            why = f"{type(exc).__name__}: {exc}"
            partial = unfinished_row(recorder, i, why=why,
                                     interrupted=stop.cancelled.is_set())
            if not stop.cancelled.is_set():
                with lock:
                    failures.append(f"episode {i}: {why}")
            if partial is not None:
                record(partial)
            return
        if stop.cancelled.is_set():  # it may have ended on a closed sandbox: not a result
            row = mark_interrupted(row)
        record(row)

    def slot() -> None:
        """A worker thread: its own env stack and agent, episodes from the queue until none is
        left or the run stops."""
        recorder = agent = None
        try:
            recorder = build_env(config, tasks=tasks, pool=pool, opd_options=opd_config,
                                 grader=grader)
            agent = build_agent(recorder, make_agent)
            while not stop.stopping.is_set():
                with lock:
                    if not queue:
                        return
                    i = queue.popleft()
                    running.add(i)
                try:
                    _play(recorder, agent, i)
                finally:
                    with lock:
                        running.discard(i)
        except BaseException as exc:  # a worker that cannot start ends the run
            setup_errors.append(exc)
            stop.stopping.set()
        finally:
            if agent is not None:
                _close(agent)
            if recorder is not None:
                recorder.close()

    aborted = False
    try:
        with stop.installed():
            try:
                if opd_config is not None:  # loaded once, shared by every worker
                    built = specs.make_teacher(opd_config.teacher, **opd_config.teacher_options)
                    if built is not opd_config.teacher:
                        owned.append(built)
                    opd_config = opd_config.replace(teacher=built, teacher_options={})
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
            _close(obj)
        pool.close()
        bar.close()
    if setup_errors and not aborted:
        raise setup_errors[0]
    summary = RunSummary.of_rows(
        run.episodes(), repeat=config.repeat, skipped=len(done), failures=failures,
        config=plain_config(config),
        seconds=time.perf_counter() - started,
        interrupted=aborted or stop.deadline is not None)
    run.write_summary(summary.to_dict())
    if aborted:
        raise KeyboardInterrupt
    return summary


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


def _opd_config(config: RolloutConfig, teacher: Any, judge: Any) -> OPDConfig:
    """The run's OPD options: `config.opd_options` with `teacher`/`judge` set over them."""
    given = {name: value for name, value in (("teacher", teacher), ("judge", judge))
             if value is not None or name == "judge"}
    if judge is FROM_CONFIG:
        del given["judge"]
    options = config.opd_options
    if isinstance(options, OPDConfig):
        return options.replace(**given)
    return OPDConfig.from_kwargs(**{**options, **given})


def _close(obj: Any) -> None:
    """Close what has a `close()` (a teacher, a judge, a served policy's connections)."""
    close = getattr(obj, "close", None)
    if callable(close):
        close()


def _play_one(recorder: Any, agent: Any, episode: int, task_id: str, seed: int
              ) -> dict[str, Any]:
    """Old private entry point: one episode's row as a dict (see `runs.core.play_episode`)."""
    return play_episode(recorder, agent, episode, task_id, seed).to_dict()


class _Progress:
    """A progress bar (tqdm when installed, else a line per episode on stderr) that also
    moves per turn, so slow policies show life between episodes."""

    def __init__(self, total: int, enabled: bool) -> None:
        self.total, self.enabled, self.count = total, enabled, 0
        self.bar: Any = None
        self._last_line = 0.0
        if not enabled:
            return
        try:
            from tqdm import tqdm
        except ImportError:
            return
        self.bar = tqdm(total=total, unit="ep", dynamic_ncols=True)

    def __call__(self, row: Mapping[str, Any]) -> None:
        if not self.enabled:
            return
        self.count += 1
        reward = f"{row.get('task_id')} r={EpisodeRow.from_dict(row).reward:.2f}"
        if self.bar is None:
            print(f"[{self.count}/{self.total}] {reward}", file=sys.stderr)
            return
        self.bar.set_postfix_str(reward, refresh=False)
        self.bar.update(1)

    def turn(self, episode: int, turns: int) -> None:
        """Episode `episode` finished turn `turns`."""
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.set_postfix_str(f"episode {episode} turn {turns}")
            return
        now = time.monotonic()
        if now - self._last_line >= 5.0:  # a status line at most every 5 s
            self._last_line = now
            print(f"[{self.count}/{self.total}] episode {episode}: turn {turns}", file=sys.stderr)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def _progress(total: int, enabled: bool) -> _Progress:
    """The run's progress display (see `_Progress`)."""
    return _Progress(total, enabled)


__all__ = ["FROM_CONFIG", "RolloutConfig", "finished_episodes", "run_rollout"]
