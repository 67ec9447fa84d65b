"""Register the Gymnasium ids: `opd_gym/Coding-v0` plus one id per env folder under `envs/`.

Each `envs/<name>/env.toml` becomes `opd_gym/<Name>-v0` (or its `id` key) with its plain
settings (`max_turns`, `tools`, `[reward]` weights) as default kwargs of `CodingEnv`. Only
data files are read here: importing the env module waits until `gym.make`.
"""

from __future__ import annotations

import warnings
from typing import Any

import gymnasium as gym

ENTRY_POINT = "opd_gym.env:CodingEnv"
NAMESPACE = "opd_gym"
DEFAULT_ID = f"{NAMESPACE}/Coding-v0"


def env_id(name: str, spec: dict[str, Any]) -> str:
    """The id for env folder `name`: its `id` key, else CamelCase of the name plus `-v0`."""
    given = spec.get("id")
    if given:
        return given if "/" in given else f"{NAMESPACE}/{given}"
    return f"{NAMESPACE}/{''.join(part.capitalize() for part in name.split('_'))}-v0"


def env_kwargs(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    """Default `CodingEnv` kwargs from an env.toml (all plain, JSON-able values)."""
    kwargs: dict[str, Any] = {"tasks": name}
    if "max_turns" in spec:
        kwargs["max_turns"] = int(spec["max_turns"])
    if "tools" in spec:
        kwargs["tools"] = list(spec["tools"])
    if "reward" in spec:
        kwargs["reward_weights"] = {k: float(v) for k, v in spec["reward"].items()}
    return kwargs


def _specs() -> dict[str, dict[str, Any]]:
    from opd_gym.tasks.suite import available_suites, load_env_spec

    specs: dict[str, dict[str, Any]] = {}
    for name in available_suites():
        try:
            specs[name] = load_env_spec(name)
        except FileNotFoundError:
            specs[name] = {}
        except Exception as exc:  # a broken data folder must not break `import opd_gym`
            warnings.warn(f"opd_gym: skipping env folder {name!r}: {exc}", stacklevel=2)
    return specs


def register_envs() -> list[str]:
    """Register every env id that is not registered yet; returns all opd_gym ids."""
    entries = {env_id(name, spec): env_kwargs(name, spec) for name, spec in _specs().items()}
    entries.setdefault(DEFAULT_ID, {"tasks": "coding"})
    for id_, kwargs in entries.items():
        if id_ not in gym.registry:
            gym.register(id=id_, entry_point=ENTRY_POINT, nondeterministic=True, kwargs=kwargs)
    return sorted(entries)
