"""Agent harnesses that drive opd_gym episodes through the recording proxy (issue 31, point 2).

A harness (mini-swe-agent) runs its own prompts, parsing, loop and limits against the proxy;
each command it runs becomes one token-exact env step built from the proxy's recorded turn.
"""

from opd_gym.harness.errors import HarnessError, HarnessNotInstalled
from opd_gym.harness.minisweagent import MiniSweAgentConfig, MiniSweAgentRunner
from opd_gym.harness.sandbox_env import SandboxEnvironment

HARNESSES = ("mini-swe-agent",)

__all__ = ["HARNESSES", "HarnessError", "HarnessNotInstalled", "MiniSweAgentConfig",
           "MiniSweAgentRunner", "SandboxEnvironment"]
