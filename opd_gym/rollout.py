"""The rollout job: play episodes with a policy, score them with OPD, write them crash-safe.

Episodes are numbered 0..N-1 (episode i plays task i mod len(tasks) with seed seed+i) and
written to `trajectories.jsonl` as each finishes (fsync'd), so a killed run loses only the
episodes in flight and `resume=True` plays just the ones missing.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym

from opd_gym import specs
from opd_gym.opd.config import OPDConfig
from opd_gym.opd.wrapper import OPDWrapper
from opd_gym.runs import (
    SUMMARY,  # noqa: F401  (SUMMARY, TRAJECTORIES, read_trajectories: old import paths)
    TRAJECTORIES,  # noqa: F401
    EpisodeRow,
    RunDirectory,
    RunSummary,
    read_trajectories,  # noqa: F401
)
from opd_gym.tasks.resolve import resolve_tasks
from opd_gym.wrappers.recorder import TrajectoryRecorder


def finished_episodes(path: Path) -> set[int]:
    """Episode numbers already written completely (what `resume` skips)."""
    return RunDirectory(path).done()


class _FromConfig:
    def __repr__(self) -> str:
        return "FROM_CONFIG"


FROM_CONFIG: Any = _FromConfig()  # run_rollout(judge=...) default: the OPD config's judge


@dataclass
class RolloutConfig:
    """Everything a rollout needs; plain data so it can be saved beside the results."""

    out_dir: str
    episodes: int = 8
    tasks: Any = "coding"
    task_ids: list[str] | None = None
    sandbox: Any = "docker"
    parallel: int = 1
    seed: int = 0
    max_turns: int = 15
    resume: bool = False
    opd: bool = True
    opd_options: Mapping[str, Any] | OPDConfig = field(default_factory=dict)


def _plain_config(config: RolloutConfig) -> dict[str, Any]:
    """The rollout's settings as JSON-able data for summary.json (tasks by id, objects by a
    short repr), so the report can show what produced the run."""
    def plain(value: Any) -> Any:
        if value is None or isinstance(value, bool | int | float | str):
            return value
        if isinstance(value, OPDConfig):
            value = value.to_kwargs()
        if isinstance(value, Mapping):
            return {str(k): plain(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [plain(v) for v in value]
        ident = getattr(value, "id", None)  # a Task by its id, never its files
        return ident if isinstance(ident, str) else repr(value)[:200]

    return {name: plain(getattr(config, name)) for name in config.__dataclass_fields__}


def run_rollout(
    config: RolloutConfig,
    make_agent: Callable[[Any], Any],
    *,
    teacher: Any = None,
    judge: Any = FROM_CONFIG,
    on_episode: Callable[[dict[str, Any], dict[str, float]], None] | None = None,
    progress: bool = True,
) -> RunSummary:
    """Play `config.episodes` episodes; `make_agent(env)` builds one agent per worker.

    The OPD options are `config.opd_options` (a mapping or an OPDConfig), with `teacher`
    and `judge` set over them when given (teacher None or judge FROM_CONFIG: the config's,
    whose defaults are the tiny teacher and the rule judge). They are validated
    before anything starts; a teacher built here from a spec is loaded once, shared by every
    worker and closed at the end; agents with a `close()` are closed by their worker.
    """
    opd_config = _opd_config(config, teacher, judge) if config.opd else None
    run = RunDirectory(config.out_dir)
    done = run.open_for_run(resume=config.resume)
    todo = [i for i in range(config.episodes) if i not in done]
    summary = RunSummary(skipped=config.episodes - len(todo), config=_plain_config(config))
    lock = threading.Lock()
    started = time.perf_counter()
    tasks = resolve_tasks(config.tasks)
    task_ids = config.task_ids or [t.id for t in tasks]
    pool = specs.make_pool(config.sandbox, size=max(2, config.parallel + 1))
    owned: list[Any] = []  # what this job built from specs; closed in the finally below
    bar = _progress(len(todo), progress)

    def make_env() -> tuple[gym.Env, TrajectoryRecorder]:
        env = gym.make("opd_gym/Coding-v0", tasks=tasks, sandbox=pool, max_turns=config.max_turns)
        if opd_config is not None:
            env = OPDWrapper(env, config=opd_config)
        recorder = run.recorder(env)
        return env, recorder

    def play(worker_todo: list[int]) -> None:
        env, recorder = make_env()
        try:
            agent = make_agent(env)
        except BaseException:
            recorder.close()
            raise
        try:
            for i in worker_todo:
                try:
                    row = _play_one(
                        recorder, agent, i, task_ids[i % len(task_ids)], config.seed + i
                    )
                except Exception as exc:  # one broken episode must not end the run
                    with lock:
                        summary.failures.append(f"episode {i}: {type(exc).__name__}: {exc}")
                    continue
                with lock:
                    metrics = summary.count(EpisodeRow.from_dict(row))
                    if on_episode is not None:
                        on_episode(row, metrics)
                    bar(row)
        finally:
            _close(agent)
            recorder.close()

    try:
        if opd_config is not None:  # loaded once, shared by every worker
            built = specs.make_teacher(opd_config.teacher, **opd_config.teacher_options)
            if built is not opd_config.teacher:
                owned.append(built)
            opd_config = opd_config.replace(teacher=built, teacher_options={})
        shards = [todo[w :: max(config.parallel, 1)] for w in range(max(config.parallel, 1))]
        with ThreadPoolExecutor(len(shards)) as workers:
            for future in [workers.submit(play, shard) for shard in shards if shard]:
                future.result()
    finally:
        for obj in owned:
            _close(obj)
        pool.close()
    summary.seconds = time.perf_counter() - started
    run.write_summary(summary.to_dict())
    return summary


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


def _play_one(
    recorder: TrajectoryRecorder, agent: Any, episode: int, task_id: str, seed: int
) -> dict[str, Any]:
    recorder.extra = {"episode": episode}
    observation, info = recorder.reset(seed=seed, options={"task_id": task_id})
    if hasattr(agent, "seed_episode"):  # sampling depends on the episode, not the worker
        agent.seed_episode(seed)
    agent.reset(observation, info)
    while True:
        action = agent.act(observation, info)
        observation, _, terminated, truncated, info = recorder.step(action)
        if terminated or truncated:
            return recorder.last_record


def _progress(total: int, enabled: bool) -> Callable[[Mapping[str, Any]], None]:
    """A progress bar (tqdm when installed, else one line per episode on stderr)."""
    import sys

    if not enabled:
        return lambda row: None
    try:
        from tqdm import tqdm
    except ImportError:
        count = [0]

        def line(row: Mapping[str, Any]) -> None:
            count[0] += 1
            print(
                f"[{count[0]}/{total}] {row.get('task_id')}: reward "
                f"{sum(row.get('rewards', [])):.2f}",
                file=sys.stderr,
            )

        return line
    bar = tqdm(total=total, unit="ep", dynamic_ncols=True)

    def update(row: Mapping[str, Any]) -> None:
        bar.set_postfix_str(f"{row.get('task_id')} r={sum(row.get('rewards', [])):.2f}")
        bar.update(1)
        if bar.n >= total:
            bar.close()

    return update
