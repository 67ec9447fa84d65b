"""The rollout core: a run config becomes an env stack in one function, and one function plays
an episode on it and returns its `EpisodeRow`, whatever ends it. Local threads, Ray workers
and the TRL adapter all call these, so a flag means the same in each.

- `opd_config(config, teacher, judge)`: the run's validated OPD options, once;
- `load_teacher(opd)`: the teacher built once per process, shared by every env stack;
- `build_env(config, ...)`: coding env, OPD wrapper, recorder; `build_agent(recorder, make)`;
- `play(recorder, agent, ...)`: an `EpisodeOutcome` (the row, or the partial row and why).

The recorder of a stack writes nowhere (os.devnull): the runner decides what a finished
episode is (played, interrupted, failed) and appends it through `RunDirectory`.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym

from opd_gym.opd.config import OPDConfig
from opd_gym.records.policy import Policy, close, seed_episode
from opd_gym.records.rows import EpisodeRow
from opd_gym.runs.config import RolloutConfig
from opd_gym.runs.interrupt import EpisodeInterrupted

ENV_ID = "opd_gym/Coding-v0"


class _FromConfig:
    def __repr__(self) -> str:
        return "FROM_CONFIG"


FROM_CONFIG: Any = _FromConfig()  # judge=FROM_CONFIG: the run config's judge


def opd_config(config: RolloutConfig, teacher: Any = None, judge: Any = FROM_CONFIG
               ) -> OPDConfig:
    """The run's OPD options, validated once: `config.opd_options` (a mapping or an OPDConfig)
    with `teacher` (None: the config's) and `judge` (FROM_CONFIG: the config's) set over it."""
    given = {name: value for name, value in (("teacher", teacher), ("judge", judge))
             if value is not None or name == "judge"}
    if judge is FROM_CONFIG:
        del given["judge"]
    options = config.opd_options
    if isinstance(options, OPDConfig):
        return options.replace(**given)
    return OPDConfig.from_kwargs(**{**options, **given})


def load_teacher(opd: OPDConfig) -> tuple[OPDConfig, Any]:
    """`opd` with its teacher built (once, for every env stack of this process), and the
    teacher to close when the run ends (None when `opd` was given an object: its owner's)."""
    from opd_gym.opd.teachers import make_teacher

    built = make_teacher(opd.teacher, **opd.teacher_options)
    owned = None if built is opd.teacher else built
    return opd.replace(teacher=built, teacher_options={}), owned


def build_env(config: RolloutConfig, *, tasks: Sequence[Any], pool: Any,
              opd_options: Any = None, grader: Any = None) -> Any:
    """The env stack of one runner slot: the coding env (tasks, sandbox pool, turn cap,
    tool-output budget, tool-call format and whether a task is verified before its episode
    from `config`; `grader` shared by the slots of one pool), the OPD wrapper when
    `opd_options` (an OPDConfig or its kwargs) is given, and a recorder on top."""
    from opd_gym.wrappers.recorder import TrajectoryRecorder

    env = gym.make(ENV_ID, tasks=list(tasks), sandbox=pool, max_turns=config.max_turns,
                   tool_format=config.tool_format, grader=grader,
                   max_tool_output_chars=config.max_tool_output_chars,
                   setup_cache=config.setup_cache, verify_tasks=config.verify_tasks,
                   skip_unverifiable=config.skip_unverifiable)
    if opd_options is not None:
        from opd_gym.opd.wrapper import OPDWrapper

        env = (OPDWrapper(env, config=opd_options) if isinstance(opd_options, OPDConfig)
               else OPDWrapper(env, **dict(opd_options)))
    return TrajectoryRecorder(env, os.devnull, fsync=False)


def build_agent(recorder: Any, make_agent: Callable[[Any], Any]) -> Any:
    """The slot's agent: `make_agent(env)` on the stack below the recorder, bound to its OPD
    wrapper (the student's tokenizer and temperature meet the teacher's there)."""
    from opd_gym.opd.wrapper import bind_agent

    agent = make_agent(recorder.env)
    try:
        if not isinstance(agent, Policy):
            raise TypeError(f"the policy factory made a {type(agent).__name__}, which has no "
                            "reset(observation, info) and act(observation, info)")
        bind_agent(recorder.env, agent)
    except BaseException:
        close(agent)
        raise
    return agent


def play_episode(
    recorder: Any,
    agent: Policy,
    episode: int,
    task_id: str,
    seed: int,
    *,
    check: Callable[[], None] | None = None,
    on_turn: Callable[[int, int], None] | None = None,
) -> EpisodeRow:
    """Play episode `episode` (task `task_id`, seed `seed`) to its end; its row.

    `check()` is called before every turn (it raises EpisodeInterrupted to cancel); `on_turn`
    gets (episode, turns so far) after every turn, for progress.
    """
    recorder.extra = {"episode": episode}
    observation, info = recorder.reset(seed=seed, options={"task_id": task_id})
    seed_episode(agent, seed)  # sampling depends on the episode, not the worker
    agent.reset(observation, info)
    turns = 0
    while True:
        if check is not None:
            check()
        action = agent.act(observation, info)
        observation, _, terminated, truncated, info = recorder.step(action)
        turns += 1
        if on_turn is not None:
            on_turn(episode, turns)
        if terminated or truncated:
            row = recorder.last_row
            assert row is not None  # the recorder keeps every finished episode
            finish = getattr(agent, "finish_episode", None)
            if callable(finish):  # what the agent adds to its row (a harness's notes)
                row.extra.update(finish(info) or {})
            return row


@dataclass
class EpisodeOutcome:
    """How one episode ended, for the runner: its row (None when no step was taken), and
    `error` when it raised (the row is then the partial one, `finished: false`)."""

    episode: int
    row: EpisodeRow | None
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain data, to cross a process boundary (a Ray worker's answer)."""
        return {"episode": self.episode, "error": self.error,
                "row": None if self.row is None else self.row.to_dict()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EpisodeOutcome:
        row = data.get("row")
        return cls(int(data["episode"]), None if row is None else EpisodeRow.from_dict(row),
                   data.get("error"))


def play(
    recorder: Any,
    agent: Policy,
    episode: int,
    task_id: str,
    seed: int,
    *,
    check: Callable[[], None] | None = None,
    on_turn: Callable[[int, int], None] | None = None,
    cancelled: Callable[[], bool] = lambda: False,
) -> EpisodeOutcome:
    """Play episode `episode` whatever happens (one broken episode must not end a run).

    Finished: its row. Cancelled by `check` (EpisodeInterrupted): the partial row, marked
    interrupted. Raised: the partial row with the error. A row is marked interrupted when
    `cancelled()` holds by then (it may have ended on a closed sandbox: not a result), so
    resume plays it again; such an episode's error is not a failure of the run."""
    try:
        row = play_episode(recorder, agent, episode, task_id, seed, check=check,
                           on_turn=on_turn)
    except EpisodeInterrupted:
        return EpisodeOutcome(episode, unfinished_row(recorder, episode, interrupted=True,
                                                      why="the run was interrupted"))
    except Exception as exc:
        why = f"{type(exc).__name__}: {exc}"
        stopped = cancelled()
        return EpisodeOutcome(
            episode, unfinished_row(recorder, episode, why=why, interrupted=stopped),
            None if stopped else why)
    return EpisodeOutcome(episode, mark_interrupted(row) if cancelled() else row)


class RowSink:
    """Where a runner's episodes go, one at a time (thread-safe): the row appended (fsync'd)
    to the run directory; a played one counted in the live metrics and handed to
    `on_episode(row dict, metrics)` and the progress bar; an error kept in `failures`."""

    def __init__(self, run: Any, *, on_episode: Callable[[dict[str, Any], dict[str, float]],
                 None] | None = None, progress: Any = None) -> None:
        from opd_gym.runs.summary import RunSummary

        self.run, self.on_episode, self.progress = run, on_episode, progress
        self.live = RunSummary()  # running metrics for on_episode (the written summary recounts)
        self.failures: list[str] = []
        self._lock = threading.Lock()

    def __call__(self, outcome: EpisodeOutcome) -> None:
        with self._lock:
            if outcome.error is not None:
                self.failures.append(f"episode {outcome.episode}: {outcome.error}")
            row = outcome.row
            if row is None:
                return
            self.run.append(row)
            if not row.played:
                return
            metrics = self.live.count(row)
            if self.on_episode is not None:
                self.on_episode(row.to_dict(), metrics)
            if self.progress is not None:
                self.progress(row)


def unfinished_row(recorder: Any, episode: int, *, why: str,
                   interrupted: bool = False) -> EpisodeRow | None:
    """The partial row of the episode a recorder is in (None when no step was taken), marked
    `finished: false` with `error` (and `interrupted`), so resume plays it again."""
    row = recorder.row(finished=False)
    if row is None:
        return None
    row.episode = episode
    row.extra["error"] = why
    return mark_interrupted(row) if interrupted else row


def mark_interrupted(row: EpisodeRow) -> EpisodeRow:
    """`row` as an interrupted episode: not finished, so resume plays it again."""
    row.finished = False
    row.extra["interrupted"] = True
    return row


__all__ = ["ENV_ID", "FROM_CONFIG", "EpisodeInterrupted", "EpisodeOutcome", "RowSink",
           "build_agent", "build_env", "load_teacher", "mark_interrupted", "opd_config", "play",
           "play_episode", "unfinished_row"]
