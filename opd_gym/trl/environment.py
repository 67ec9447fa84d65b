"""A TRL `GRPOTrainer(environment_factory=...)` environment over `CodingEnv`.

TRL builds one instance per rollout, calls ``reset(**row)`` with the dataset row, exposes the
public typed methods below as the model's tools (their docstrings become the schemas), and
calls ``get_reward()`` once the rollout is over. Every tool call is played as one turn of a
real `CodingEnv` episode (one Hermes call per `step`), so it runs in the env's sandbox,
counts against the env's turn limit and is graded by the env: the reward is the env's own
(`opd_gym.rewards`), computed from the hidden-test grade.

The env stack is the one every runner builds from a run config (`opd_gym.rollout_core.build_env`:
coding env, OPD wrapper when the config turns it on, recorder), so `max_turns`, `tool_format`,
the sandbox and the OPD options mean here what they mean for `opd-gym rollout`; each tool
call is written in the config's tool-call format, and each finished episode's
`EpisodeRow` (with its OPD records) is kept as ``instance.row``.

Turns: the env's ``max_turns`` counts assistant turns, and here every turn carries one call.
Pass the same number to TRL as ``GRPOConfig(max_tool_calling_iterations=max_turns)`` so its
assistant turns are capped too (with one call per message, the usual case, the two agree;
a message with several calls uses one env turn per call). An episode the model leaves
unfinished is graded by `get_reward` the way the env grades a truncated one: it submits
the workspace as it stands.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from opd_gym.errors import ConfigError
from opd_gym.records.task import Task
from opd_gym.runs.config import RolloutConfig


def reference_hint(task: Task) -> str | None:
    """Privileged context for SDFT/SDPO: the task's reference files, when it ships them."""
    if not task.solution:
        return None
    parts = [f"Reference solution, {path}:\n{text}" for path, text in sorted(task.solution.items())]
    return "\n\n".join(parts)


class CodingToolEnv:
    """One rollout's coding episode for TRL's GRPOTrainer: tools map to the env's tools.

    `env` is an env stack (see `environment_factory`) or a bare `CodingEnv`; without one a
    `CodingEnv(**env_kwargs)` is made."""

    def __init__(
        self,
        env: Any = None,
        *,
        hint_fn: Callable[[Task], str | None] | None = reference_hint,
        **env_kwargs: Any,
    ) -> None:
        from opd_gym.env import CodingEnv

        self.env = env if env is not None else CodingEnv(**env_kwargs)
        self.hint_fn = hint_fn
        self.privileged_context: str | None = None
        self.row: Any = None  # the EpisodeRow of the last finished episode (a recorder's)
        self.calls_run = 0  # tool calls played in the sandbox, over this instance's life
        self._last_reward = 0.0
        self._done = True

    @property
    def coding_env(self) -> Any:
        """The `CodingEnv` under the stack's wrappers (its task, grade, reward breakdown)."""
        return self.env.unwrapped

    def reset(self, **row: Any) -> str | None:
        """Start the episode of the row's ``task_id`` (or a random task); adds nothing to the
        prompt (the dataset row's prompt already holds the task)."""
        options = {"task_id": row["task_id"]} if row.get("task_id") else {}
        self.env.reset(options=options)
        self._done, self._last_reward = False, 0.0
        task = self.coding_env.task
        self.privileged_context = self.hint_fn(task) if self.hint_fn and task else None
        return None

    def _play(self, name: str, arguments: dict[str, Any]) -> str:
        """Play one tool call as an env turn, written in the env's tool-call format; the tool's
        output is the observation."""
        if self._done:
            return "The episode is over: no more tool calls are run."
        args = {k: v for k, v in arguments.items() if v is not None}
        action = self.coding_env.tool_format.format_call(name, args)
        observation, reward, terminated, truncated, _ = self.env.step(action)
        self.calls_run += 1
        if terminated or truncated:
            self._done, self._last_reward = True, float(reward)
            self.row = getattr(self.env, "last_row", None)
        return observation

    def terminal(self, command: str) -> str:
        """Run a bash command in the workspace and return its output and exit code.

        Args:
            command: The bash command to run.
        """
        return self._play("terminal", {"command": command})

    def read_file(self, path: str) -> str:
        """Read a text file from the workspace.

        Args:
            path: File path, relative to the workspace root.
        """
        return self._play("read_file", {"path": path})

    def write_file(self, path: str, content: str) -> str:
        """Create or overwrite a file in the workspace with the given content.

        Args:
            path: File path, relative to the workspace root.
            content: The full new content.
        """
        return self._play("write_file", {"path": path, "content": content})

    def edit_file(self, path: str, old_text: str, new_text: str) -> str:
        """Replace one exact occurrence of old_text with new_text in a file.

        Args:
            path: File path, relative to the workspace root.
            old_text: The exact text to replace.
            new_text: The replacement text.
        """
        return self._play("edit_file", {"path": path, "old_text": old_text, "new_text": new_text})

    def submit(self) -> str:
        """Finish the task: the hidden tests grade the files in the workspace."""
        return self._play("submit", {})

    def get_reward(self) -> float:
        """The env's reward for the episode, from the hidden-test grade (submits if needed)."""
        if not self._done and self.coding_env.episode is not None:
            self._play("submit", {})
        return self._last_reward

    @property
    def grade(self) -> Any:
        """The env's GradeReport of the episode (None before it is graded)."""
        return self.coding_env.grade

    # No public `close`: TRL would offer every public method to the model as a tool. The
    # factory's shared pool is closed with ``factory.pool.close()``.


def environment_factory(
    tasks: Any = None,
    *,
    sandbox: Any = None,
    max_turns: int | None = None,
    hint_fn: Callable[[Task], str | None] | None = reference_hint,
    pool_size: int = 2,
    config: RolloutConfig | None = None,
) -> Callable[[], CodingToolEnv]:
    """A zero-argument factory for ``GRPOTrainer(environment_factory=...)``.

    Every instance is the env stack a rollout of `config` builds (`rollout_core.build_env`),
    so its tasks, sandbox, turn cap, tool-call format and OPD options hold here too; without
    a config, `tasks` (default: the built-in suite), `sandbox` (default docker, or a started
    `SandboxPool`) and `max_turns` (default 4) make one, with OPD off. Every instance shares
    one sandbox pool (started once), one grader and, with OPD, one teacher (loaded once);
    ``factory.instances`` lists the environments TRL created, e.g. to count the tool calls
    that reached the sandbox; ``factory.close()`` releases the pool and the teacher.
    """
    from opd_gym import specs
    from opd_gym.grading.store import make_grader
    from opd_gym.rollout_core import build_env, load_teacher, opd_config
    from opd_gym.sandboxes import SandboxPool
    from opd_gym.tasks.resolve import resolve_tasks

    if config is None:
        config = RolloutConfig(out_dir="", tasks="coding" if tasks is None else tasks,
                               sandbox="docker" if sandbox is None else sandbox,
                               max_turns=4 if max_turns is None else max_turns, opd=False)
    elif (tasks, sandbox, max_turns) != (None, None, None):
        raise ConfigError("environment_factory: give either config or tasks/sandbox/max_turns "
                          "(the config holds them)")
    if config.max_turns < 1:
        raise ConfigError("environment_factory: max_turns must be >= 1")
    task_list = resolve_tasks(config.tasks)
    opd, teacher = (load_teacher(opd_config(config)) if config.opd else (None, None))
    given = config.sandbox
    pool = given if isinstance(given, SandboxPool) else specs.make_pool(given, size=pool_size)
    grader = make_grader(pool, config.calibrations)  # one calibration per task for every instance
    instances: list[CodingToolEnv] = []

    def factory() -> CodingToolEnv:
        env = build_env(config, tasks=task_list, pool=pool, opd_options=opd, grader=grader)
        instance = CodingToolEnv(env, hint_fn=hint_fn)
        instances.append(instance)
        return instance

    def close() -> None:
        from opd_gym.records.policy import close as release

        for instance in instances:
            instance.env.close()
        release(teacher)
        pool.close()

    factory.instances = instances  # type: ignore[attr-defined]
    factory.pool = pool  # type: ignore[attr-defined]
    factory.config = config  # type: ignore[attr-defined]
    factory.close = close  # type: ignore[attr-defined]
    return factory


def dataset_rows(
    tasks: Iterable[Task],
    *,
    repeat: int = 1,
    system_prompt: str | None = None,
    privileged_context: bool = False,
    hint_fn: Callable[[Task], str | None] = reference_hint,
) -> list[dict[str, Any]]:
    """Rows {prompt, task_id[, privileged_context]} for GRPO (and SDFT/SDPO) datasets.

    ``prompt`` is the conversational prompt (an optional system message, then the task);
    TRL adds the tool schemas through the chat template.
    """
    rows = []
    for task in tasks:
        prompt: list[Mapping[str, str]] = []
        if system_prompt:
            prompt.append({"role": "system", "content": system_prompt})
        prompt.append({"role": "user", "content": task.prompt})
        row: dict[str, Any] = {"prompt": [dict(m) for m in prompt], "task_id": task.id}
        if privileged_context:
            hint = hint_fn(task)
            if not hint:
                continue  # SDFT/SDPO refuse a None context
            row["privileged_context"] = hint
        rows.extend(dict(row) for _ in range(repeat))
    return rows


def tool_methods(instance: CodingToolEnv) -> Sequence[Callable[..., str]]:
    """The bound methods TRL exposes as tools (public functions besides reset/get_reward)."""
    import inspect

    return [getattr(instance, name)
            for name, _ in inspect.getmembers(type(instance), predicate=inspect.isfunction)
            if name not in ("reset", "get_reward") and not name.startswith("_")]
