"""Play opd_gym episodes with mini-swe-agent: its prompts, parsing, loop and limits.

The harness's model calls go to the recording proxy's URL for the episode (litellm's
OpenAI-compatible route); its commands run through `SandboxEnvironment`, so every model turn
becomes a token-exact env step. The env's turn cap is the harness's step limit and its
format-error cap the harness's, so the env ends (and grades) where the harness stops.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from opd_gym.harness.errors import HarnessError
from opd_gym.harness.loading import MINI_SWE_AGENT_VERSION, load_minisweagent
from opd_gym.harness.sandbox_env import SandboxEnvironment

CONFIG = "mini_textbased"  # mini-swe-agent's own bash-block (```mswea_bash_command) config


@dataclass
class MiniSweAgentConfig:
    """How mini-swe-agent plays: its step limit and the sampling it asks the model for."""

    step_limit: int = 15          # model calls per episode (the env's max_turns matches it)
    max_tokens: int | None = None  # per model call (None: the server's default)
    temperature: float = 1.0
    seed: int | None = None        # per call: seed + episode seed + call number
    model: str | None = None       # the served model's name (None: the proxy's listing)
    config: str = CONFIG           # a built-in mini-swe-agent config name or a yaml path
    model_kwargs: dict[str, Any] = field(default_factory=dict)  # more litellm arguments


class MiniSweAgentRunner:
    """Plays one episode of an env stack (recorder on top) with mini-swe-agent via a proxy."""

    name = "mini-swe-agent"

    def __init__(self, proxy: Any, config: MiniSweAgentConfig | None = None) -> None:
        load_minisweagent()
        self.proxy = proxy
        self.config = config or MiniSweAgentConfig()
        self._model_name = self.config.model

    def model_name(self) -> str:
        """The served model's name (asked of the server behind the proxy once)."""
        if self._model_name is None:
            import httpx

            key = self.proxy.open_episode()
            try:
                listing = httpx.get(f"{self.proxy.base_url(key)}/models", timeout=60).json()
                self._model_name = str(listing["data"][0]["id"])
            except Exception as exc:
                raise HarnessError(f"could not read the served model's name: {exc}") from exc
            finally:
                self.proxy.close_episode(key)
        return self._model_name

    def agent_config(self) -> dict[str, Any]:
        """mini-swe-agent's agent settings from its config, with our step limit."""
        import yaml
        from minisweagent.config import get_config_path

        loaded = yaml.safe_load(get_config_path(self.config.config).read_text())
        agent = dict(loaded.get("agent", {}))
        agent.update(step_limit=self.config.step_limit, cost_limit=0.0, output_path=None)
        agent.pop("mode", None)
        return {"agent": agent, "model": dict(loaded.get("model", {}))}

    def make_model(self, key: str, seed: int) -> Any:
        """mini-swe-agent's own text-based litellm model, pointed at the proxy's episode."""
        from minisweagent.models.litellm_textbased_model import LitellmTextbasedModel

        model_settings = self.agent_config()["model"]
        sampling: dict[str, Any] = {"temperature": self.config.temperature}
        if self.config.max_tokens is not None:
            sampling["max_tokens"] = self.config.max_tokens
        if self.config.seed is not None:
            sampling["seed"] = self.config.seed + seed
        return LitellmTextbasedModel(
            model_name=f"openai/{self.model_name()}",
            model_kwargs={**model_settings.get("model_kwargs", {}), **sampling,
                          **self.config.model_kwargs,
                          "api_base": self.proxy.base_url(key), "api_key": "opd-gym"},
            cost_tracking="ignore_errors",
            **{k: v for k, v in model_settings.items() if k != "model_kwargs"})

    def run(self, env: SandboxEnvironment, task: str, seed: int) -> dict[str, Any]:
        """Run mini-swe-agent on `task` until it stops, then step the turns it left unrun;
        what it did (exit status, model calls, error) for the row."""
        from minisweagent.agents.default import DefaultAgent

        agent = DefaultAgent(self.make_model(env.key, seed), env, **self.agent_config()["agent"])
        harness: dict[str, Any] = {"name": self.name, "version": MINI_SWE_AGENT_VERSION,
                                   "proxy_episode": env.key}
        try:
            harness["exit_status"] = agent.run(task).get("exit_status", "")
        except Exception as exc:  # the harness stopped on an error: grade what is left
            harness["exit_status"] = type(exc).__name__
            harness["error"] = f"{type(exc).__name__}: {exc}"[:500]
        harness["model_calls"] = agent.n_calls
        env.flush()
        harness["turns"] = list(env.turn_notes)
        return harness

    def play(self, recorder: Any, episode: int, task_id: str, seed: int) -> Any:
        """Play episode `episode` (task `task_id`, seed `seed`) on a recorder-topped env stack
        in this thread; its row (with a `harness` entry: exit status and per-turn notes)."""
        recorder.extra = {"episode": episode}
        _, info = recorder.reset(seed=seed, options={"task_id": task_id})
        key = self.proxy.open_episode(episode_key(episode, seed))
        env = SandboxEnvironment(lambda action: recorder.step(action)[4], self.proxy, key)
        try:
            harness = self.run(env, info["task_prompt"], seed)
        finally:
            self.proxy.close_episode(key)
        if not env.done:
            raise HarnessError(f"mini-swe-agent stopped ({harness.get('exit_status')}) before "
                               "the env ended the episode")
        row = recorder.last_row
        row.extra["harness"] = harness
        return row


def episode_key(episode: int, seed: int) -> str:
    """A proxy episode key unique to this process and episode."""
    import uuid

    return f"ep{episode}-s{seed}-{uuid.uuid4().hex[:12]}"
