"""A TRL `GRPOTrainer(environment_factory=...)` environment over `CodingEnv`.

TRL builds one instance per rollout, calls ``reset(**row)`` with the dataset row, exposes the
public typed methods below as the model's tools (their docstrings become the schemas), and
calls ``get_reward()`` once the rollout is over. Every tool call is played as one turn of a
real `CodingEnv` episode (one Hermes call per `step`), so it runs in the env's sandbox,
counts against the env's turn limit and is graded by the env: the reward is the env's own
(`opd_gym.rewards`), computed from the hidden-test grade.

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
from opd_gym.tasks.model import Task
from opd_gym.tools.parsing import format_tool_call


def reference_hint(task: Task) -> str | None:
    """Privileged context for SDFT/SDPO: the task's reference files, when it ships them."""
    if not task.solution:
        return None
    parts = [f"Reference solution, {path}:\n{text}" for path, text in sorted(task.solution.items())]
    return "\n\n".join(parts)


class CodingToolEnv:
    """One rollout's coding episode for TRL's GRPOTrainer: tools map to the env's tools."""

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
        self.calls_run = 0  # tool calls played in the sandbox, over this instance's life
        self._last_reward = 0.0
        self._done = True

    def reset(self, **row: Any) -> str | None:
        """Start the episode of the row's ``task_id`` (or a random task); adds nothing to the
        prompt (the dataset row's prompt already holds the task)."""
        options = {"task_id": row["task_id"]} if row.get("task_id") else {}
        self.env.reset(options=options)
        self._done, self._last_reward = False, 0.0
        task = self.env.task
        self.privileged_context = self.hint_fn(task) if self.hint_fn and task else None
        return None

    def _play(self, name: str, arguments: dict[str, Any]) -> str:
        """Play one Hermes tool call as an env turn; the tool's output is the observation."""
        if self._done:
            return "The episode is over: no more tool calls are run."
        args = {k: v for k, v in arguments.items() if v is not None}
        observation, reward, terminated, truncated, _ = self.env.step(format_tool_call(name, args))
        self.calls_run += 1
        if terminated or truncated:
            self._done, self._last_reward = True, float(reward)
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
        if not self._done and self.env.episode is not None:
            self._play("submit", {})
        return self._last_reward

    @property
    def grade(self) -> Any:
        """The env's GradeReport of the episode (None before it is graded)."""
        return self.env.grade

    # No public `close`: TRL would offer every public method to the model as a tool. The
    # factory's shared pool is closed with ``factory.pool.close()``.


def environment_factory(
    tasks: Any = "coding",
    *,
    sandbox: Any = "docker",
    max_turns: int = 4,
    hint_fn: Callable[[Task], str | None] | None = reference_hint,
    pool_size: int = 2,
    **env_kwargs: Any,
) -> Callable[[], CodingToolEnv]:
    """A zero-argument factory for ``GRPOTrainer(environment_factory=...)``.

    Every instance shares one sandbox pool (started once); ``factory.instances`` lists the
    environments TRL created, e.g. to count the tool calls that reached the sandbox.
    """
    from opd_gym.env import CodingEnv
    from opd_gym.sandboxes import SandboxPool, make_pool

    if max_turns < 1:
        raise ConfigError("environment_factory: max_turns must be >= 1")
    pool = sandbox if isinstance(sandbox, SandboxPool) else make_pool(sandbox, size=pool_size)
    instances: list[CodingToolEnv] = []

    def factory() -> CodingToolEnv:
        env = CodingEnv(tasks=tasks, sandbox=pool, max_turns=max_turns, **env_kwargs)
        instance = CodingToolEnv(env, hint_fn=hint_fn)
        instances.append(instance)
        return instance

    factory.instances = instances  # type: ignore[attr-defined]
    factory.pool = pool  # type: ignore[attr-defined]
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
