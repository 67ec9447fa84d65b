"""The one place old import paths live: modules and names that moved, and where they went.

A module that moved (`opd_gym.opd.exporters`) is served by an import hook as the module it
became; a name that moved out of a module (`opd_gym.specs.make_teacher`) is looked up in its
new home on first access. The modules left behind know nothing of this (no forwarders, no
import back up through the layers): the package installs it when it is imported.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
from types import ModuleType
from typing import Any

# old module -> the module that replaced it
MOVED_MODULES: dict[str, str] = {
    "opd_gym.opd.exporters": "opd_gym.exports.formats",
    "opd_gym.serve.command": "opd_gym.cli.serve",
    "opd_gym.proxy.cli": "opd_gym.cli.proxy",
    # the records several layers share moved to the ground floor (opd_gym.records)
    "opd_gym.tasks.model": "opd_gym.records.task",
    "opd_gym.agents.base": "opd_gym.records.policy",
    "opd_gym.runs.schema": "opd_gym.records.rows",
    "opd_gym.opd.record": "opd_gym.records.opd_record",
    # the rollout core has a home of its own beside runs/ (the run-directory package)
    "opd_gym.runs.core": "opd_gym.rollout_core",
    # task authoring moved apart from task loading (opd_gym.authoring)
    "opd_gym.tasks.synth": "opd_gym.authoring.synth",
    "opd_gym.tasks.synth_cli": "opd_gym.authoring.synth_cli",
    "opd_gym.tasks.synth_workers": "opd_gym.authoring.synth_workers",
    "opd_gym.tasks.statements": "opd_gym.authoring.statements",
    "opd_gym.tasks.restate": "opd_gym.authoring.restate",
    "opd_gym.tasks.validate": "opd_gym.authoring.validate",
}

# module -> {old name: (new module, new name)}
MOVED_NAMES: dict[str, dict[str, tuple[str, str]]] = {
    "opd_gym.specs": {
        "make_teacher": ("opd_gym.opd.teachers", "make_teacher"),
        "make_judge": ("opd_gym.opd.judges", "make_judge"),
        "make_policy": ("opd_gym.agents.policies", "make_policy"),
        "check_tokenizers": ("opd_gym.opd.chat", "check_tokenizers"),
    },
    "opd_gym.cli": {  # cli.py became a package of one module per command
        "_tool_format_name": ("opd_gym.cli.options", "tool_format_name"),
        "_suite_max_turns": ("opd_gym.cli.options", "suite_max_turns"),
        "_tasks_spec": ("opd_gym.cli.options", "task_spec"),
        "_load_tasks": ("opd_gym.cli.options", "load_tasks"),
        "_build_environments": ("opd_gym.cli.sandbox", "build_environments"),
        "_validate": ("opd_gym.cli.tasks", "validate"),
        "cmd_rollout": ("opd_gym.cli.rollout", "run"),
        "cmd_tasks": ("opd_gym.cli.tasks", "run"),
        "cmd_check_suite": ("opd_gym.cli.check_suite", "run"),
        "cmd_view": ("opd_gym.cli.view", "run"),
        "cmd_report": ("opd_gym.cli.report", "run"),
        "cmd_export": ("opd_gym.cli.export", "run"),
        "cmd_build": ("opd_gym.cli.sandbox", "run_build"),
        "cmd_doctor": ("opd_gym.cli.sandbox", "run_doctor"),
        "cmd_images": ("opd_gym.cli.sandbox", "run_images"),
        "cmd_prune": ("opd_gym.cli.sandbox", "run_prune"),
    },
    "opd_gym.models.tokenizer": {
        "prompt_ids": ("opd_gym.transcript", "prompt_ids"),
    },
}


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports of a moved module get the module it became (the same object, not a copy)."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name not in MOVED_MODULES:
            return None
        return importlib.util.spec_from_loader(name, self)

    def create_module(self, spec: Any) -> ModuleType:
        return importlib.import_module(MOVED_MODULES[spec.name])

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the new module was executed when it was imported."""


def _moved_names(module: str, before: Any = None) -> Any:
    """A module `__getattr__` resolving the names that left `module` (PEP 562), in front of
    the module's own `__getattr__` (`before`) if it has one."""
    moved = MOVED_NAMES[module]

    def __getattr__(name: str) -> Any:
        if name in moved:
            where, new = moved[name]
            return getattr(importlib.import_module(where), new)
        if before is not None:
            return before(name)
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    __getattr__.moved = True  # type: ignore[attr-defined]

    return __getattr__


def install() -> None:
    """Serve the old paths (idempotent; `import opd_gym` calls it)."""
    if not any(isinstance(f, _MovedModules) for f in sys.meta_path):
        sys.meta_path.append(_MovedModules())
    for module in MOVED_NAMES:
        target = importlib.import_module(module)
        before = vars(target).get("__getattr__")
        if not getattr(before, "moved", False):
            target.__getattr__ = _moved_names(module, before)  # type: ignore[attr-defined]


__all__ = ["MOVED_MODULES", "MOVED_NAMES", "install"]
