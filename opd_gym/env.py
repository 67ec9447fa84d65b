"""CodingEnv: the Gymnasium adapter over `Episode` (one coding task per episode).

`reset` picks a task (`opd_gym.tasks.resolve`), takes a started sandbox from a warm pool and
starts an `Episode`; `step` plays one turn of it. The rules (parsing, tool calls, end reasons,
grading, reward) live in `opd_gym.episode`; everything a wrapper needs travels in `info`.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym

from opd_gym.episode import (  # noqa: F401  (end reasons, re-exported for old imports)
    DEFAULT_TOOL_OUTPUT_CHARS,
    FORMAT_ERRORS,
    MAX_TURNS,
    SANDBOX_DIED,
    SUBMITTED,
    Episode,
    EpisodeSettings,
)
from opd_gym.errors import CalibrationError, ConfigError, UnverifiableTaskError
from opd_gym.grading import Grader, GradeReport
from opd_gym.records.task import Task
from opd_gym.rewards import RewardBreakdown
from opd_gym.sandboxes import Sandbox, SandboxPool, make_pool
from opd_gym.sandboxes.env_image import (
    DEFAULT_BUDGET,
    DockerfileSpec,
    EnvironmentSpec,
    ImageCache,
    parse_size,
)
from opd_gym.spaces import ModelOutput, UnicodeText
from opd_gym.tasks.repo import environment
from opd_gym.tasks.resolve import DEFAULT_SUITE, pick_task, resolve_tasks  # noqa: F401
from opd_gym.tools.executor import ToolResult
from opd_gym.tools.formats import ToolFormat
from opd_gym.transcript import Message, Turn, render_messages


def harbor_options(task: Task) -> dict[str, Any]:
    """The sandbox settings a Harbor task's task.toml asks for (`DockerConfig` fields): the
    agent works in its workdir, with its cpus, memory and storage (the workdir's size)."""
    info = task.harbor
    assert info is not None
    options: dict[str, Any] = {"workspace": info.workdir}
    if info.cpus is not None:
        options["cpus"] = info.cpus
    if info.memory_mb is not None:
        options["mem_limit"] = f"{info.memory_mb}m"
    if info.storage_mb is not None:
        options["workspace_size"] = f"{info.storage_mb}m"
    return options


VERIFY_TRIES = 2  # a calibration that cannot finish is tried again before it names a task


class CodingEnv(gym.Env[str, Any]):
    """Multi-turn coding episodes: text in (model output), text out (tool results).

    Reward: 0 until the last step, then, with c = fraction of hidden tests passed (or 0/1 with
    `binary_correctness`), T = turns used, M = `max_turns`:
    `w_c * c + w_e * c * (1 - (T - 1) / M) + w_u * tool_use` (see `opd_gym.rewards`).

    Args:
        tasks: suite name (default "coding"), task file or folder, `harbor:FOLDER` (Harbor
            task folders, docs/harbor.md), list of task ids of the built-in suite, list of
            Tasks/rows, or a loader mapping (see `resolve_tasks`).
        sandbox: backend "docker" (default), "bwrap", "local", "auto", a mapping
            {"backend": ..., **options}, or a `SandboxPool` to share (not closed by the env).
        pool_size: warm sandboxes kept ready (each episode uses one, grading another).
        max_turns: assistant turns before the episode is truncated (and graded).
        max_format_errors: consecutive turns without a valid tool call before truncation.
        tool_timeout: default seconds for a terminal command; max_tool_timeout caps requests.
        max_calls_per_turn: tool calls run per turn; the rest are answered with an error.
        step_time_budget: seconds one step may spend running tool calls in total (None: no
            budget); commands are cut to what is left, later calls answered with an error.
        parse_bash_blocks: also read fenced ```bash blocks as terminal calls.
        reward_weights: {"correctness", "efficiency", "tool_use"} (default 0.7/0.15/0.15).
        binary_correctness: correctness is 1 only if every hidden test passes.
        system_prompt: replaces the default system prompt.
        tools: the tool names offered (a subset of the five; must include "submit").
        render_mode: "ansi" (render returns the transcript) or "human" (prints it).
        tool_format: how calls are written: "hermes" (default), "qwen3_coder", "llama3",
            "mistral", "deepseek" (`opd_gym.tools.formats`), or a tokenizer that decides.
        grader: the `Grader` to use (share one between envs on one pool so each task is
            calibrated once); default: one of this env's own, made with its pool.
        image_budget: disk kept for repository tasks' environment images (bytes or "20g");
            least recently used images beyond it are removed after a build.
        max_tool_output_chars: characters of one tool result the agent sees (default 10,000;
            0 or None: no limit); longer output keeps its head and tail (half the budget
            each) around a marker naming the characters elided and how to see more.
        setup_cache: the folder mounted read-only at `/opd-cache` while a repository task's
            setup steps build its environment image offline (sdists, wheels); default: the
            pinned sdists `scripts/setup.sh` keeps (`$OPD_GYM_SDISTS`, else
            `~/.cache/opd_gym/sdists`).
        verify_tasks: calibrate each task before its first episode (as its first grade would)
            and refuse one no grade can vouch for (no test could earn, or its calibration
            fails) with `UnverifiableTaskError`, instead of playing an episode every answer of
            which scores 0. Off by default: such a grade is then an infra error
            (`GradeReport.unverifiable`), masked in rows, summaries and exports.
        skip_unverifiable: with `verify_tasks`, draw another task instead of refusing
            (`unverifiable` maps each task skipped to why); a task asked for by id is still
            refused.
    """

    metadata = {"render_modes": ["ansi", "human"], "render_fps": 4}

    def __init__(
        self,
        tasks: Any = DEFAULT_SUITE,
        sandbox: str | Mapping[str, Any] | SandboxPool = "docker",
        pool_size: int = 2,
        max_turns: int = 15,
        max_format_errors: int = 3,
        tool_timeout: float = 60.0,
        max_tool_timeout: float = 600.0,
        max_calls_per_turn: int = 16,
        step_time_budget: float | None = 600.0,
        parse_bash_blocks: bool = False,
        reward_weights: Mapping[str, float] | None = None,
        binary_correctness: bool = False,
        system_prompt: str | None = None,
        tools: Sequence[str] | None = None,
        render_mode: str | None = None,
        tool_format: Any = "hermes",
        grader: Grader | None = None,
        image_budget: int | str = DEFAULT_BUDGET,
        max_tool_output_chars: int | None = DEFAULT_TOOL_OUTPUT_CHARS,
        setup_cache: str | os.PathLike[str] | None = None,
        verify_tasks: bool = False,
        skip_unverifiable: bool = False,
    ) -> None:
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ConfigError(f"render_mode must be one of {self.metadata['render_modes']} "
                              "or None")
        self.settings = EpisodeSettings(
            max_turns, max_format_errors, tool_timeout, max_tool_timeout, max_calls_per_turn,
            step_time_budget, parse_bash_blocks, reward_weights, binary_correctness,
            tools if tools is not None else EpisodeSettings.tool_names, tool_format,
            system_prompt or "", max_tool_output_chars=max_tool_output_chars)
        self.tasks = resolve_tasks(tasks)
        self.sandbox_spec, self.pool_size, self.render_mode = sandbox, pool_size, render_mode
        self.observation_space, self.action_space = UnicodeText(), ModelOutput()
        self.pool: SandboxPool | None = sandbox if isinstance(sandbox, SandboxPool) else None
        self._owns_pool = self.pool is None
        self.grader = grader
        self.image_budget = parse_size(image_budget)
        self.setup_cache = None if setup_cache is None else Path(setup_cache)
        if self.setup_cache is not None and not self.setup_cache.is_dir():
            raise ConfigError(f"setup_cache {str(setup_cache)!r} is not a folder (it holds "
                              "what setup steps install from, mounted at /opd-cache)")
        self.verify_tasks, self.skip_unverifiable = bool(verify_tasks), bool(skip_unverifiable)
        self.unverifiable: dict[str, str] = {}  # task id -> why (verify_tasks), once checked
        self._verified: set[str] = set()
        self._setup_lock = threading.Lock()
        self._images: ImageCache | None = None
        self._built: dict[EnvironmentSpec | DockerfileSpec, str] = {}  # spec -> tag, once here
        self.episode: Episode | None = None
        self._printed = 0
        self._closed = False

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        if self._closed:
            raise RuntimeError("this environment is closed")
        self._end_episode()
        task = self._verified_task(options or {})
        pool, grader = self._pool_for(task)
        self.episode = Episode(task, pool, self.settings, grader)
        self._printed = 0
        if self.render_mode == "human":
            self.render()
        return self.episode.prompt, self.episode.info()

    def step(self, action: Any) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self.episode is None or self.episode.done:
            raise RuntimeError("the episode is over: call reset() before step()")
        turn = self.episode.play(action)
        info = self.episode.info(turn)
        if self.render_mode == "human":
            self.render()
        terminated = turn.end_reason == SUBMITTED
        truncated = bool(turn.end_reason) and not terminated
        return turn.observation, float(self.episode.reward), terminated, truncated, info

    def render(self) -> str | None:
        """`ansi`: the whole transcript; `human`: print the messages not printed yet."""
        if self.render_mode == "ansi":
            return render_messages(self.messages)
        if self.render_mode == "human" and self._printed < len(self.messages):
            print(render_messages(self.messages[self._printed:]), end="", flush=True)
            self._printed = len(self.messages)
        return None

    def close(self) -> None:
        """Release the sandbox and close the pool the env created; safe to call twice."""
        if self._closed:
            return
        self._closed = True
        self._end_episode()
        if self.pool is not None and self._owns_pool:
            self.pool.close()
        self.pool = None
        super().close()

    def verify(self, task_ids: Sequence[str] | None = None) -> dict[str, str]:
        """Which of the tasks (all, or those of `task_ids`) no grade can vouch for, and why:
        {task id: reason}, empty when every one can. Each task is calibrated once (its
        environment image built where it has one), the work its first grade would do.
        A task whose calibration could not finish (a sandbox failed, a run timed out) is
        reported with that reason too (after a second try: a busy host's timeout is not the
        task's fault), but not remembered: the next check tries again."""
        wanted = None if task_ids is None else set(task_ids)
        found: dict[str, str] = {}
        for task in self.tasks:
            if wanted is None or task.id in wanted:
                why = ""
                for _ in range(VERIFY_TRIES):
                    try:
                        why = self._unverifiable(task)
                        break
                    except CalibrationError as failed:
                        why = f"its calibration failed: {failed.reason or 'no reason given'}"
                if why:
                    found[task.id] = why
        return found

    def _unverifiable(self, task: Task) -> str:
        """Why `task` cannot be verified ("": it can), calibrated once (thread-safe: a run
        checks its tasks in threads; pools and images are made under the env's lock).
        Raises CalibrationError, remembering nothing, where the calibration could not finish."""
        if task.harbor is not None:  # no calibration (its verifier is its own test.sh): what
            with self._setup_lock:  # can be checked first is that its image builds
                self._pool_for(task)
            return ""
        if task.id not in self._verified:
            with self._setup_lock:
                grader = self._pool_for(task)[1]
            why = grader.unverifiable(task)
            with self._setup_lock:
                self._verified.add(task.id)
                if why:
                    self.unverifiable[task.id] = why
        return self.unverifiable.get(task.id, "")

    def _refused(self, task: Task) -> str:
        """At reset: why `task` is refused ("": it plays). A calibration that could not finish
        now refuses nothing: the episode plays and its grade calibrates again, an infra error
        (masked in rows, summaries and exports) if that fails too, so a sandbox lost to a busy
        or failing host never costs an episode."""
        try:
            return self._unverifiable(task)
        except CalibrationError:
            return ""

    def _verified_task(self, options: Mapping[str, Any]) -> Task:
        """The episode's task (`pick_task`); with `verify_tasks`, one a grade can vouch for:
        an unverifiable one is refused, or with `skip_unverifiable` another one drawn."""
        task = pick_task(self.tasks, options, self.np_random)
        if not self.verify_tasks:
            return task
        named = options.get("task") is not None or options.get("task_id") is not None
        while self._refused(task):
            if named or not self.skip_unverifiable:
                raise UnverifiableTaskError(
                    {task.id: self.unverifiable[task.id]},
                    hint="" if named else " (skip_unverifiable=True draws another task)")
            left = [t for t in self.tasks if t.id not in self.unverifiable]
            if not left:
                raise UnverifiableTaskError(dict(self.unverifiable), total=len(self.tasks))
            task = pick_task(left, {}, self.np_random)
        return task

    def _pool_for(self, task: Task) -> tuple[SandboxPool, Grader]:
        """The warm pool and grader of the image `task` runs in (its own environment image,
        built on first use, for a repository task with one; else the env's pool). The pools
        and the env's grader are made here on first use (not in __init__: a vector env's
        throwaway copy starts nothing)."""
        if self.pool is None:
            self.pool = make_pool(self.sandbox_spec, size=self.pool_size)
        if self.grader is None:
            self.grader = Grader(self.pool)
        options: dict[str, Any] = {}
        if task.harbor is not None:  # its Dockerfile's image, its limits, its workdir
            if self.pool.factory_for_image is None:
                raise ConfigError(f"task {task.id!r} is a Harbor task: it plays only on the "
                                  "docker sandbox backend (its environment is an image)")
            where: str | EnvironmentSpec | DockerfileSpec | None = DockerfileSpec(
                Path(task.harbor.environment), task.harbor.build_timeout)
            options = harbor_options(task)
        else:
            where = environment(task, self.setup_cache)
        if where is None:
            return self.pool, self.grader
        if isinstance(where, EnvironmentSpec | DockerfileSpec):
            tag = self._built.get(where)
            if tag is None:
                if self._images is None:
                    from opd_gym.sandboxes.docker import DockerEngine

                    self._images = ImageCache(DockerEngine(), self.image_budget)
                tag = self._built[where] = self._images.ensure(where).tag
        else:
            tag = where
        pool = self.pool.with_image(tag, **options)
        # the image pool's grader derives from the env's (a run's, shared by its slots): one
        # calibration per task, whichever env plays it
        return pool, self.grader.for_sandboxes(pool)

    def _end_episode(self) -> None:
        if self.episode is not None:
            self.episode.release()

    # -- read-only views of the current episode and the settings (for agents and tests) ---
    task: Task | None = property(lambda self: self.episode.task if self.episode else None)
    sandbox: Sandbox | None = property(lambda self: self.episode and self.episode.sandbox)
    messages: list[Message] = property(lambda self: self.episode.messages if self.episode
                                       else [])
    turns: list[Turn] = property(lambda self: self.episode.turns if self.episode else [])
    results: list[ToolResult] = property(lambda self: self.episode.results if self.episode
                                         else [])
    grade: GradeReport | None = property(lambda self: self.episode and self.episode.grade)
    reward_breakdown: RewardBreakdown | None = property(
        lambda self: self.episode and self.episode.reward_breakdown)
    tools: list[dict[str, Any]] = property(lambda self: self.settings.tools)
    tool_names: tuple[str, ...] = property(lambda self: self.settings.tool_names)
    tool_format: ToolFormat = property(lambda self: self.settings.tool_format)
    system_prompt: str = property(lambda self: self.settings.system_prompt)
    max_turns: int = property(lambda self: self.settings.max_turns)
