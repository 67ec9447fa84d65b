"""The harness as a rollout `Policy`, so `opd-gym rollout` plays it like any other policy.

mini-swe-agent runs in a thread of its own and drives; each command it runs is handed to the
runner's loop as the next action (the recorded turn, token-exact) and the step's info is
handed back as the command's result. Runner slots, rows, OPD records, `--repeat`, `--ray` and
resume are the rollout runner's own, unchanged.
"""

from __future__ import annotations

import dataclasses
import queue
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from opd_gym.harness.errors import HarnessError
from opd_gym.harness.minisweagent import MiniSweAgentConfig, MiniSweAgentRunner, episode_key
from opd_gym.harness.sandbox_env import SandboxEnvironment

ABANDONED = None  # handed to the harness thread when the runner leaves the episode


class HarnessPolicy:
    """A `Policy` whose actions are mini-swe-agent's model turns, recorded by a proxy.

    With `tokenizer` (the served model's) it is a `TokenPolicy`: the OPD wrapper checks it
    against the teacher's; the recorded logprobs are vLLM's raw ones (temperature 1)."""

    logprob_temperature: float | None = 1.0

    def __init__(self, runner: MiniSweAgentRunner, proxy: Any = None, tokenizer: Any = None,
                 timeout: float = 3600.0) -> None:
        self.runner, self.timeout, self.tokenizer = runner, timeout, tokenizer
        self._proxy = proxy  # closed by close() when this policy owns it
        self._seed = 0
        self._episodes = 0
        self._thread: threading.Thread | None = None
        self._key: str | None = None
        self._actions: queue.Queue[tuple[str, Any]] = queue.Queue()
        self._infos: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._waiting = False
        self._abandoned = threading.Event()

    def seed_episode(self, seed: int) -> None:
        """The episode's seed (the harness's sampling seed is derived from it)."""
        self._seed = seed

    def reset(self, observation: str, info: Mapping[str, Any]) -> None:
        """Start mini-swe-agent on the episode's task in its own thread."""
        self._stop_thread()
        self._actions, self._infos = queue.Queue(), queue.Queue()
        self._waiting, self._abandoned = False, threading.Event()
        proxy = self.runner.proxy
        self._key = proxy.open_episode(episode_key(self._episodes, self._seed))
        self._episodes += 1
        env = SandboxEnvironment(self._handoff, proxy, self._key)
        self._thread = threading.Thread(
            target=self._play, args=(env, str(info["task_prompt"]), self._seed),
            name="opd-gym-harness", daemon=True)
        self._thread.start()

    def act(self, observation: str, info: Mapping[str, Any]) -> Any:
        """The harness's next model turn as a token-exact action (after handing it the last
        step's info)."""
        kind, value = self._next(info, f"ran no command for {self.timeout:g} s")
        if kind == "action":
            self._waiting = True
            return value
        if kind == "error":
            raise HarnessError(f"mini-swe-agent failed: {value!r:.300}") from value
        raise HarnessError(f"mini-swe-agent stopped ({value.get('exit_status')}) before the "
                           "env ended the episode")

    def _next(self, info: Mapping[str, Any], late: str) -> tuple[str, Any]:
        """Hand the harness the last step's info (if it waits for one), then take its next
        message; `late` says what it failed to do within the timeout."""
        if self._waiting:
            self._waiting = False
            self._infos.put(dict(info))
        try:
            return self._actions.get(timeout=self.timeout)
        except queue.Empty:
            raise HarnessError(f"mini-swe-agent {late}") from None

    def finish_episode(self, info: Mapping[str, Any]) -> dict[str, Any]:
        """The row's `harness` notes (exit status, model calls, per-turn notes), as the
        Python runner's rows carry them: the last step's info is handed back and the harness
        is waited for until it stops."""
        kind, value = self._next(
            info, f"did not stop within {self.timeout:g} s after the episode ended")
        if kind == "action":  # a command after the end: the env is done, it is not run
            self._stop_thread()
            return {"harness": {"name": self.runner.name, "exit_status": "EpisodeEnded",
                                "error": "a command after the episode ended was not run"}}
        if kind == "error":
            return {"harness": {"name": self.runner.name, "exit_status": type(value).__name__,
                                "error": f"{type(value).__name__}: {value}"[:500]}}
        self._thread = None  # it has returned
        return {"harness": value}

    def close(self) -> None:
        """Stop the harness thread and close the proxy this policy started."""
        self._stop_thread()
        if self._proxy is not None:
            self._proxy.stop()
            self._proxy = None

    # -- the harness thread ---------------------------------------------------------------
    def _handoff(self, action: dict[str, Any]) -> dict[str, Any]:
        """(harness thread) One env step: hand the action over, wait for the step's info."""
        if self._abandoned.is_set():
            raise HarnessError("the runner left the episode")
        self._actions.put(("action", action))
        info = self._infos.get()
        if info is ABANDONED:
            raise HarnessError("the runner left the episode")
        return info

    def _play(self, env: SandboxEnvironment, task: str, seed: int) -> None:
        try:
            self._actions.put(("done", self.runner.run(env, task, seed)))
        except BaseException as exc:  # reported to the runner by act()
            self._actions.put(("error", exc))

    def _stop_thread(self) -> None:
        thread, self._thread = self._thread, None
        if thread is not None and thread.is_alive():
            self._abandoned.set()
            self._infos.put(ABANDONED)
            thread.join(timeout=60)
        key, self._key = self._key, None
        if key is not None:
            try:
                self.runner.proxy.close_episode(key)
            except LookupError:
                pass


@dataclass
class HarnessFactory:
    """`make_agent(env)` for the rollout runner (picklable, for Ray workers): each slot gets
    its own recording proxy in front of the model server at `upstream`."""

    upstream: str
    config: MiniSweAgentConfig = field(default_factory=MiniSweAgentConfig)
    timeout: float = 600.0

    def __call__(self, env: Any) -> HarnessPolicy:
        from opd_gym.models.client import ModelClient
        from opd_gym.models.tokenizer import served_tokenizer
        from opd_gym.proxy import RecordingProxy, VLLMBackend

        with ModelClient(self.upstream, timeout=self.timeout) as client:
            served = client.served_model(self.config.model)
        tokenizer, _ = served_tokenizer(None, served)
        config = dataclasses.replace(self.config, model=str(served["id"]))
        proxy = RecordingProxy(VLLMBackend(self.upstream, timeout=self.timeout))
        proxy.start()
        try:
            return HarnessPolicy(MiniSweAgentRunner(proxy, config), proxy=proxy,
                                 tokenizer=tokenizer)
        except BaseException:
            proxy.stop()
            raise
