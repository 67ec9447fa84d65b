"""Policies by spec string, for the CLI: demo, reference, replay:FILE, hf:PATH, openai:URL,
vllm:URL. Each spec gives a factory `make(env) -> agent` (one agent per rollout worker)."""

from __future__ import annotations

import itertools
from collections import defaultdict, deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from opd_gym.actions import TokenText
from opd_gym.agents.demo import DemoAgent
from opd_gym.agents.scripted import SUBMIT_CALL, ReferenceAgent
from opd_gym.runs.schema import EpisodeRow
from opd_gym.tasks.model import Task
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
        from opd_gym.runs import RunDirectory

        return cls(replay_queues(list(RunDirectory(path).require().rows())))

    def reset(self, observation: str, info: Mapping[str, Any]) -> None:
        try:
            self._turns = deque(self._by_task[info["task_id"]].popleft())
        except (KeyError, IndexError):
            raise ValueError(
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
    """Any OpenAI-compatible chat endpoint, given the tools schema; returns its message."""

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
    ) -> None:
        try:
            import httpx
        except ImportError as exc:
            raise ImportError("the openai policy needs httpx: pip install 'opd_gym[llm]'") from exc
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.Client(base_url=base_url.rstrip("/"), timeout=timeout, headers=headers)
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
        if self.model is None:
            self.model = self._http.get("/models").raise_for_status().json()["data"][0]["id"]
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
        response = self._http.post("/chat/completions", json=payload).raise_for_status()
        message = response.json()["choices"][0]["message"]
        return {
            "role": "assistant",
            "content": message.get("content") or "",
            "tool_calls": message.get("tool_calls") or [],
        }


def check_server(base_url: str, path: str = "/models", timeout: float = 10.0) -> None:
    """Fail early, in one sentence, when a policy's server does not answer."""
    import httpx

    try:
        httpx.get(base_url.rstrip("/") + path, timeout=timeout).raise_for_status()
    except httpx.HTTPError as exc:
        raise ConnectionError(
            f"cannot reach the policy server at {base_url} ({exc}); "
            "is it running, and is the URL right?"
        ) from None


SAMPLING = ("max_new_tokens", "temperature", "top_p", "seed")
MODEL = ("dtype", "device", "max_model_len")


def make_agent_factory(spec: str, tasks: Sequence[Task], **options: Any) -> Callable[[Any], Any]:
    """`make(env) -> agent` for a policy spec (see POLICY_HELP); raises ValueError if unknown.

    `options` (None values are ignored): sampling `max_new_tokens`, `temperature`, `top_p`,
    `seed` (each worker's agent gets its own generator, seeded `seed + worker`; the rollout
    then reseeds it per episode), and for `hf:` the model's `dtype` (default: the
    checkpoint's), `device` and `max_model_len`. Scripted policies take none of them.
    """
    from opd_gym.models.smollm2 import resolve_model_spec

    spec = resolve_model_spec(spec)  # "smollm2" -> hf:PATH (fetched and converted once)
    options = {k: v for k, v in options.items() if v is not None}
    unknown = sorted(set(options) - set(SAMPLING) - set(MODEL))
    if unknown:
        raise ValueError(f"unknown policy option(s) {unknown}; known: {SAMPLING + MODEL}")
    scheme, _, target = spec.partition(":")
    served = scheme in ("openai", "vllm") and target
    model_options = sorted(set(options) & set(MODEL))
    if served and model_options:
        raise ValueError(f"{model_options} are set where the {scheme}: server is started, not "
                         "by the policy (e.g. vllm serve --dtype float32 --max-model-len N)")
    if spec == "demo":
        return lambda env: DemoAgent(tasks)
    if spec == "reference":
        return lambda env: ReferenceAgent(tasks)
    if scheme == "replay" and target:
        from opd_gym.runs import RunDirectory

        queues = replay_queues(list(RunDirectory(target).require().rows()))
        return lambda env: ReplayAgent(queues)
    seed = int(options.pop("seed", 0))
    workers = itertools.count()
    if scheme == "hf" and target:
        from opd_gym.agents.hf import TransformersPolicy

        shared = TransformersPolicy(target, seed=seed, **options)  # one model for all workers
        return lambda env: shared.fork(seed + next(workers))
    if "max_new_tokens" in options:
        options["max_tokens"] = options.pop("max_new_tokens")
    if scheme == "openai" and target:
        check_server(target)
        return lambda env: OpenAIChatPolicy(target, seed=seed + next(workers), **options)
    if scheme == "vllm" and target:
        from opd_gym.agents.vllm import VLLMPolicy

        check_server(target, "/v1/models")

        return lambda env: VLLMPolicy(target, seed=seed + next(workers), **options)
    raise ValueError(f"unknown policy {spec!r}; use one of: {POLICY_HELP}")
