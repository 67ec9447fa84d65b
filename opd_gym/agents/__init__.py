"""Policies that drive CodingEnv without a model: scripted agents for tests and benchmarks."""

from opd_gym.agents.scripted import (
    MalformedAgent,
    ReferenceAgent,
    ScriptedAgent,
    WrongAgent,
    reference_script,
    run_episode,
)

__all__ = [
    "MalformedAgent",
    "ReferenceAgent",
    "ScriptedAgent",
    "WrongAgent",
    "reference_script",
    "run_episode",
]
