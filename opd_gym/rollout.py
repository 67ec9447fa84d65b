"""The rollout job: play episodes with a policy, score them with OPD, write them crash-safe.

Episodes are numbered 0..N-1 (episode i plays task i mod len(tasks) with seed seed+i) and
written to `trajectories.jsonl` as each finishes (fsync'd), so a killed run loses only the
episodes in flight and `resume=True` plays just the ones missing.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym

from opd_gym.env import resolve_tasks
from opd_gym.opd.metrics import OPDMetrics
from opd_gym.opd.wrapper import OPDWrapper, resolve_teacher
from opd_gym.sandboxes import make_pool
from opd_gym.wrappers.recorder import TrajectoryRecorder

TRAJECTORIES = "trajectories.jsonl"
SUMMARY = "summary.json"


def read_trajectories(path: str | Path) -> Iterator[dict[str, Any]]:
    """Episodes of a trajectories file; a torn last line (a killed writer) is skipped."""
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            try:
                yield json.loads(line)
            except json.JSONDecodeError:
                continue


def finished_episodes(path: Path) -> set[int]:
    """Episode numbers already written completely (what `resume` skips)."""
    if not path.exists():
        return set()
    return {
        int(row["episode"])
        for row in read_trajectories(path)
        if row.get("finished") and isinstance(row.get("episode"), int)
    }


def _heal_torn_tail(path: Path) -> None:
    """End the file with a newline so a torn last line cannot swallow the next record."""
    if path.exists() and path.stat().st_size:
        with open(path, "rb+") as fh:
            fh.seek(-1, 2)
            if fh.read(1) != b"\n":
                fh.write(b"\n")


@dataclass
class RunSummary:
    """What a rollout did, printed as a table and saved as summary.json."""

    episodes: int = 0
    skipped: int = 0
    passed: int = 0
    reward_sum: float = 0.0
    seconds: float = 0.0
    failures: list[str] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)
    metrics: OPDMetrics = field(default_factory=OPDMetrics)  # hints and tokens live here

    @property
    def pass_rate(self) -> float:
        return self.passed / self.episodes if self.episodes else 0.0

    @property
    def mean_reward(self) -> float:
        return self.reward_sum / self.episodes if self.episodes else 0.0

    @property
    def turns_scored(self) -> int:
        return self.metrics.scored

    @property
    def tokens_scored(self) -> int:
        return self.metrics.positions

    @property
    def hint_rate(self) -> float:
        return self.metrics.hints / self.metrics.scored if self.metrics.scored else 0.0

    def to_dict(self) -> dict[str, Any]:
        data = {k: v for k, v in vars(self).items() if k != "metrics"}
        data.update(
            pass_rate=self.pass_rate, mean_reward=self.mean_reward, hint_rate=self.hint_rate,
            turns_scored=self.turns_scored, tokens_scored=self.tokens_scored,
            opd=self.metrics.summary(),
        )
        return data

    def table(self) -> str:
        rows = [
            ("episodes", f"{self.episodes} (+{self.skipped} resumed)"),
            ("pass rate", f"{self.pass_rate:.0%}"),
            ("mean reward", f"{self.mean_reward:.3f}"),
            ("hint rate", f"{self.hint_rate:.0%} of {self.turns_scored} scored turns"),
            ("tokens scored", str(self.tokens_scored)),
            ("time", f"{self.seconds:.1f} s"),
        ]
        if self.failures:
            rows.append(("episode errors", str(len(self.failures))))
        width = max(len(k) for k, _ in rows)
        return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


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
    opd_options: dict[str, Any] = field(default_factory=dict)


def _plain_config(config: RolloutConfig) -> dict[str, Any]:
    """The rollout's settings as JSON-able data for summary.json (tasks by id, objects by a
    short repr), so the report can show what produced the run."""
    def plain(value: Any) -> Any:
        if value is None or isinstance(value, bool | int | float | str):
            return value
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
    judge: Any = "rule",
    on_episode: Callable[[dict[str, Any], dict[str, float]], None] | None = None,
    progress: bool = True,
) -> RunSummary:
    """Play `config.episodes` episodes; `make_agent(env)` builds one agent per worker."""
    out = Path(config.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / TRAJECTORIES
    if not config.resume and path.exists() and path.stat().st_size:
        raise FileExistsError(
            f"{path} already has episodes: pass resume to continue that run "
            "or choose another output directory"
        )
    _heal_torn_tail(path)
    done = finished_episodes(path)
    todo = [i for i in range(config.episodes) if i not in done]
    summary = RunSummary(skipped=config.episodes - len(todo), config=_plain_config(config))
    lock = threading.Lock()
    started = time.perf_counter()
    tasks = resolve_tasks(config.tasks)
    task_ids = config.task_ids or [t.id for t in tasks]
    pool = make_pool(config.sandbox, size=max(2, config.parallel + 1))
    if config.opd:
        teacher = resolve_teacher(teacher)  # loaded once, shared by every worker
    bar = _progress(len(todo), progress)

    def make_env() -> tuple[gym.Env, TrajectoryRecorder]:
        env = gym.make("opd_gym/Coding-v0", tasks=tasks, sandbox=pool, max_turns=config.max_turns)
        if config.opd:
            env = OPDWrapper(env, teacher=teacher, judge=judge, **config.opd_options)
        recorder = TrajectoryRecorder(env, path, fsync=True)
        return env, recorder

    def play(worker_todo: list[int]) -> None:
        env, recorder = make_env()
        agent = make_agent(env)
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
                    _count(summary, row)
                    if on_episode is not None:
                        on_episode(row, _episode_metrics(row, summary))
                    bar(row)
        finally:
            recorder.close()

    try:
        shards = [todo[w :: max(config.parallel, 1)] for w in range(max(config.parallel, 1))]
        with ThreadPoolExecutor(len(shards)) as workers:
            for future in [workers.submit(play, shard) for shard in shards if shard]:
                future.result()
    finally:
        pool.close()
    summary.seconds = time.perf_counter() - started
    (out / SUMMARY).write_text(json.dumps(summary.to_dict(), indent=2, default=str))
    return summary


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


def _count(summary: RunSummary, row: Mapping[str, Any]) -> None:
    from opd_gym.opd.record import OPDRecord

    summary.episodes += 1
    grade = row.get("grade") or {}
    summary.passed += bool(grade.get("total")) and grade.get("passed") == grade.get("total")
    summary.reward_sum += float(sum(row.get("rewards", [])))
    summary.metrics.episode(OPDRecord.from_dict(r) for r in row.get("opd") or [])


def _episode_metrics(row: Mapping[str, Any], summary: RunSummary) -> dict[str, float]:
    """Per-episode metrics under hermes-compatible and our names, plus running rates."""
    out = {k: float(v) for k, v in (row.get("opd_metrics") or {}).items()}
    grade = row.get("grade") or {}
    out["train/reward"] = float(sum(row.get("rewards", [])))
    out["train/passed"] = float(
        bool(grade.get("total")) and grade.get("passed") == grade.get("total")
    )
    out["train/pass_rate"] = summary.pass_rate
    out["train/episodes"] = float(summary.episodes)
    return out


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
