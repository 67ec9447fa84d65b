"""opd_gym as a service: the env (with or without OPD) over OpenEnv's protocol.

`opd-gym serve` / `serve(ServeConfig(...))` run openenv-core's server (its wire format, its
WebSocket sessions) over `CodingEnvironment`s that share one warm sandbox pool; OpenEnv's
own `GenericEnvClient` drives it. Names load lazily: openenv-core is the `serve` extra.
"""

from __future__ import annotations

import importlib
from typing import Any

OPENENV_PIN = "openenv-core==0.3.0"  # installed with --no-deps (see docs/serving.md)

_LAZY = {
    "ServeConfig": "opd_gym.serve.config",
    "ServeError": "opd_gym.serve.errors",
    "ServeConfigError": "opd_gym.serve.errors",
    "MissingServeExtra": "opd_gym.serve.errors",
    "ServeRuntime": "opd_gym.serve.runtime",
    "CodingEnvironment": "opd_gym.serve.environment",
    "CodingAction": "opd_gym.serve.models",
    "CodingObservation": "opd_gym.serve.models",
    "CodingState": "opd_gym.serve.models",
    "ToolCall": "opd_gym.serve.models",
    "build_app": "opd_gym.serve.app",
    "ServerThread": "opd_gym.serve.server",
    "serve": "opd_gym.serve.server",
    "Sampled": "opd_gym.serve.client",
    "TurnSequence": "opd_gym.serve.client",
    "play_episode": "opd_gym.serve.client",
    "rollout_func": "opd_gym.serve.client",
}

__all__ = ["OPENENV_PIN", *_LAZY]


def __getattr__(name: str) -> Any:
    """Import the server's parts (and openenv-core) on first use."""
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'opd_gym.serve' has no attribute {name!r}")
