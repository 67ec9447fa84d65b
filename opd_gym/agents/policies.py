"""Policies built from spec strings: `make_policy(spec, tasks)` gives the `make(env) -> agent`
factory a runner calls once per worker (scripted, replayed, local transformers, served). The
replay agent and the OpenAI-compatible chat policy live here too."""

from __future__ import annotations

import itertools
from collections import defaultdict, deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from opd_gym.actions import TokenText
from opd_gym.agents.scripted import SUBMIT_CALL
from opd_gym.errors import ConfigError, DatasetError, ModelError
from opd_gym.models.client import ModelUnavailable
from opd_gym.records.rows import EpisodeRow  # the row format (records layer, below agents)
from opd_gym.records.task import Task
from opd_gym.transcript import RAW

POLICY_HELP = (
    "demo (scripted, with a planted mistake), reference, replay:FILE.jsonl, smollm2, hf:MODEL_DIR, "
    "openai:http://host:port/v1 (any chat endpoint), vllm:http://host:port"
)


class ReplayAgent:
    """Replays the assistant turns of a recorded trajectories file, token ids included.

    Agents built with the same `queues` (see `replay_queues`) share them, so parallel workers
    each take a different recorded episode of a task, never the same one twice.
    """

    def __init__(self, queues: Mapping[str, deque]) -> None:
        self._by_task = queues
        self._turns: deque = deque()

    @classmethod
    def from_file(cls, path: str) -> ReplayAgent:
        from opd_gym.runs.directory import RunDirectory

        return cls(replay_queues(list(RunDirectory(path).require().rows())))

    def reset(self, observation: str, info: Mapping[str, Any]) -> None:
        try:
            self._turns = deque(self._by_task[info["task_id"]].popleft())
        except (KeyError, IndexError):
            raise DatasetError(
                f"the replay file has no (more) episodes of task {info['task_id']!r}"
            ) from None

    def act(self, observation: str, info: Mapping[str, Any]) -> str:
        if not self._turns:
            return SUBMIT_CALL
        turn = self._turns.popleft()
        return TokenText(
            turn["text"], turn.get("token_ids"), turn.get("logprobs"), turn.get("prompt_ids")
        )


def replay_queues(rows: Sequence[EpisodeRow | Mapping[str, Any]]) -> dict[str, deque]:
    """Recorded turn lists per task id, in file order (deque.popleft is thread-safe)."""
    queues: dict[str, deque] = defaultdict(deque)
    for row in rows:
        row = row if isinstance(row, EpisodeRow) else EpisodeRow.from_dict(row)
        if row.turns:
            queues[row.task_id].append(row.turns)
    return dict(queues)


class OpenAIChatPolicy:
    """Any OpenAI-compatible chat endpoint, given the tools schema; returns its message.

    Requests go through the shared `ModelClient` (retries with backoff on connect errors,
    timeouts, 429 and 5xx; the model is discovered from `/models` when not named)."""

    def __init__(
        self,
        base_url: str,
        *,
        model: str | None = None,
        api_key: str | None = None,
        temperature: float = 0.7,
        max_tokens: int = 1024,
        top_p: float | None = None,
        seed: int | None = None,
        timeout: float = 120.0,
        retries: int = 2,
        backoff: float = 0.5,
    ) -> None:
        from opd_gym.models.client import ModelClient

        if max_tokens < 1:
            raise ConfigError(f"max_tokens must be >= 1, got {max_tokens}")
        self.client = ModelClient(base_url, api_key=api_key, timeout=timeout, retries=retries,
                                  backoff=backoff, api_root=True)
        self.model = model
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.top_p = top_p
        self.seed = seed
        self._turn = 0

    def reset(self, observation: str, info: Mapping[str, Any]) -> None:
        """Stateless: every turn sends the env's full message list."""

    def seed_episode(self, seed: int) -> None:
        """Seed this episode's requests from `seed` (when the policy is seeded at all)."""
        if self.seed is not None:
            self.seed, self._turn = int(seed), 0

    def act(self, observation: str, info: Mapping[str, Any]) -> Mapping[str, Any]:
        from opd_gym.models.client import ModelUnavailable

        self.model = self.client.model_id(self.model)
        payload = {
            "model": self.model,
            # the standard chat form: the server's template renders content + tool_calls
            "messages": [{k: v for k, v in m.items() if k != RAW} for m in info["messages"]],
            "tools": info["tools"],
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
        }
        if self.top_p is not None:
            payload["top_p"] = self.top_p
        if self.seed is not None:
            payload["seed"] = (self.seed * 1_000_003 + self._turn) % 2**31
            self._turn += 1
        answer = self.client.call("POST", "chat/completions", payload)
        try:
            message = answer["choices"][0]["message"]
        except (KeyError, IndexError, TypeError) as exc:
            raise ModelUnavailable(f"{self.client.api}/chat/completions answered without a "
                                   f"message ({type(exc).__name__}: {exc})") from None
        return {
            "role": "assistant",
            "content": message.get("content") or "",
            "tool_calls": message.get("tool_calls") or [],
        }

    def close(self) -> None:
        """Close the connections to the server."""
        self.client.close()


def check_server(base_url: str, path: str = "/models", timeout: float = 10.0) -> None:
    """Fail early, in one sentence, when a policy's server does not answer its model list."""
    from opd_gym.models.client import ModelClient

    with ModelClient(base_url, timeout=timeout, retries=0, api_root=path == "/models") as client:
        try:
            client.models()
        except ModelError as exc:
            raise ModelUnavailable(f"cannot reach the policy server at {base_url} ({exc}); "
                                   "is it running, and is the URL right?") from None


SAMPLING = ("max_new_tokens", "temperature", "top_p", "seed")
MODEL = ("dtype", "device", "max_model_len")


Factory = Callable[[Any], Any]  # make(env) -> agent


def _demo(target: str, tasks: Sequence[Task], options: dict[str, Any]) -> Factory:
    from opd_gym.agents.demo import DemoAgent

    return lambda env: DemoAgent(tasks)


def _reference(target: str, tasks: Sequence[Task], options: dict[str, Any]) -> Factory:
    from opd_gym.agents.scripted import ReferenceAgent

    return lambda env: ReferenceAgent(tasks)


def _replay(target: str, tasks: Sequence[Task], options: dict[str, Any]) -> Factory:
    from opd_gym.runs.directory import read_trajectories

    queues = replay_queues(list(read_trajectories(target)))
    return lambda env: ReplayAgent(queues)


def _transformers(target: str, tasks: Sequence[Task], options: dict[str, Any]) -> Factory:
    from opd_gym.agents.hf import TransformersPolicy

    seed = int(options.pop("seed", 0))
    workers = itertools.count()
    shared = TransformersPolicy(target, seed=seed, **options)  # one model for all workers
    return lambda env: shared.fork(seed + next(workers))


def _served(client: str) -> Callable[[str, Sequence[Task], dict[str, Any]], Factory]:
    """A policy sampled from a server: an OpenAI API root (`openai`) or a vLLM server."""
    def build(target: str, tasks: Sequence[Task], options: dict[str, Any]) -> Factory:
        seed = int(options.pop("seed", 0))
        workers = itertools.count()
        if "max_new_tokens" in options:
            options["max_tokens"] = options.pop("max_new_tokens")
        if client == "openai":
            check_server(target)
            return lambda env: OpenAIChatPolicy(target, seed=seed + next(workers), **options)
        from opd_gym.agents.vllm import VLLMPolicy

        check_server(target, "/v1/models")
        return lambda env: VLLMPolicy(target, seed=seed + next(workers), **options)
    return build


# scheme (or name) -> how its agent factory is built from (target, tasks, options): the one
# table policies are built from; "tiny" and "smollm2" are resolved to hf: first
BUILDERS: dict[str, Callable[[str, Sequence[Task], dict[str, Any]], Factory]] = {
    "demo": _demo,
    "reference": _reference,
    "replay": _replay,
    "hf": _transformers,
    "openai": _served("openai"),
    "vllm": _served("vllm"),
}


def make_policy(spec: str, tasks: Sequence[Task], **options: Any) -> Callable[[Any], Any]:
    """`make(env) -> agent` for a policy spec: one agent per rollout worker.

    `options` (None values are ignored): sampling `max_new_tokens`, `temperature`, `top_p`,
    `seed` (each worker's agent gets its own generator, seeded `seed + worker`; the rollout
    then reseeds it per episode), and for `hf:` the model's `dtype` (default: the
    checkpoint's), `device` and `max_model_len`. Scripted policies take none of them. The spec
    is parsed once, then built from `BUILDERS`.
    """
    from opd_gym import specs

    parsed = specs.parse("policy", spec)
    options = {k: v for k, v in options.items() if v is not None}
    unknown = sorted(set(options) - set(SAMPLING) - set(MODEL))
    if unknown:
        raise ConfigError(f"unknown policy option(s) {unknown}; known: {SAMPLING + MODEL}")
    model_options = sorted(set(options) & set(MODEL))
    if parsed.scheme in ("openai", "vllm") and model_options:
        raise ConfigError(f"{model_options} are set where the {parsed.scheme}: server is "
                          "started, not by the policy (e.g. vllm serve --dtype float32 "
                          "--max-model-len N)")
    scheme, target = parsed.scheme, parsed.target
    if scheme in specs.MODEL_NAMES:  # a local model built or fetched on first use
        scheme, target = "hf", specs.model_path(scheme)
    return BUILDERS[scheme](target, tasks, options)


make_agent_factory = make_policy  # the name runners and docs have used
