"""The rollout core: a run config becomes an env stack in one function, and one function plays
an episode on it and returns its `EpisodeRow`. Local threads and Ray workers both call these.

The recorder of a stack writes nowhere (os.devnull): the runner decides what a finished
episode is (played, interrupted, failed) and appends it through `RunDirectory`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym

from opd_gym.runs.config import RolloutConfig
from opd_gym.runs.interrupt import EpisodeInterrupted
from opd_gym.runs.schema import EpisodeRow

ENV_ID = "opd_gym/Coding-v0"


def build_env(config: RolloutConfig, *, tasks: Sequence[Any], pool: Any,
              opd_options: Any = None, grader: Any = None) -> Any:
    """The env stack of one runner slot: the coding env (tasks, sandbox pool, turn cap and
    tool-call format from `config`; `grader` shared by the slots of one pool), the OPD wrapper
    when `opd_options` (an OPDConfig or its kwargs) is given, and a recorder on top."""
    from opd_gym.wrappers.recorder import TrajectoryRecorder

    env = gym.make(ENV_ID, tasks=list(tasks), sandbox=pool, max_turns=config.max_turns,
                   tool_format=config.tool_format, grader=grader)
    if opd_options is not None:
        from opd_gym.opd.config import OPDConfig
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
        bind_agent(recorder.env, agent)
    except BaseException:
        close = getattr(agent, "close", None)
        if callable(close):
            close()
        raise
    return agent


def play_episode(
    recorder: Any,
    agent: Any,
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
    if hasattr(agent, "seed_episode"):  # sampling depends on the episode, not the worker
        agent.seed_episode(seed)
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
            return EpisodeRow.from_dict(recorder.last_record)


def unfinished_row(recorder: Any, episode: int, *, why: str,
                   interrupted: bool = False) -> EpisodeRow | None:
    """The partial row of the episode a recorder is in (None when no step was taken), marked
    `finished: false` with `error` (and `interrupted`), so resume plays it again."""
    if getattr(recorder, "_episode", None) is None or not recorder._episode.get("rewards"):
        return None
    data = recorder.record(finished=False)
    data["episode"] = episode
    data["error"] = why
    if interrupted:
        data["interrupted"] = True
    return EpisodeRow.from_dict(data)


def mark_interrupted(row: EpisodeRow) -> EpisodeRow:
    """`row` as an interrupted episode: not finished, so resume plays it again."""
    row.finished = False
    row.extra["interrupted"] = True
    return row


__all__ = ["ENV_ID", "EpisodeInterrupted", "build_agent", "build_env", "mark_interrupted",
           "play_episode", "unfinished_row"]
