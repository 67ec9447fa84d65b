"""The `opd-gym` commands: each one's module and summary, a table read before any module is
imported, so `opd-gym --help` loads none of them and a command loads only its own.

A command module has `add_arguments(parser)` and `run(args) -> int`; a command with
subcommands (tasks, sandbox) sets each subparser's `func` itself.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType


@dataclass(frozen=True)
class Command:
    module: str
    summary: str

    def load(self) -> ModuleType:
        return importlib.import_module(self.module)


COMMANDS: dict[str, Command] = {
    "rollout": Command("opd_gym.cli.rollout",
                       "play episodes and write OPD-scored trajectories"),
    "tasks": Command("opd_gym.cli.tasks", "list, show, validate, synthesize and check tasks"),
    "view": Command("opd_gym.cli.view", "write (and open) the HTML report of a run"),
    "report": Command("opd_gym.cli.report",
                      "one run's HTML report, or two or more runs compared side by side"),
    "export": Command("opd_gym.cli.export", "export a run to a trainer format, or its "
                      "repository-task diffs as SWE-bench predictions"),
    "score-trajectories": Command("opd_gym.cli.score_trajectories", "score Harbor ATIF "
                                  "trajectories' agent steps with the teacher: one OPD record "
                                  "per step (the inverse of export --to atif)"),
    "sandbox": Command("opd_gym.cli.sandbox", "build, check and clean the sandbox"),
    "serve": Command("opd_gym.cli.serve", "serve the env (with or without OPD) over OpenEnv's "
                     "protocol to remote clients (extra 'serve'; see docs/serving.md)"),
    "proxy": Command("opd_gym.cli.proxy", "serve a recording OpenAI-compatible model proxy on "
                     "loopback (exact ids and logprobs of each call, per episode)"),
}

__all__ = ["COMMANDS", "Command"]
