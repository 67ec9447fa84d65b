"""`opd-gym`'s entry: the parser built from the command table, and how errors are shown."""

from __future__ import annotations

import argparse
import os
import sys
import threading
from collections.abc import Sequence

from opd_gym.cli.commands import COMMANDS
from opd_gym.errors import OPDGymError

DESCRIPTION = "The `opd-gym` command line: rollout, tasks, view, report, export, " \
              "score-trajectories, sandbox, serve and proxy."


class Parser(argparse.ArgumentParser):
    """argparse that reports a bad flag in one line (plus where to look) instead of usage."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole parser; with `only`, just that command's flags are built (its module the only
    one imported; "" builds none), the others listed by their summaries."""
    parser = Parser(prog="opd-gym", description=DESCRIPTION)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    for name, command in COMMANDS.items():
        child = sub.add_parser(name, help=command.summary, description=command.summary)
        if only is None or only == name:
            module = command.load()
            module.add_arguments(child)
            child.set_defaults(func=module.run)
    return parser


def with_config_file(parser: argparse.ArgumentParser, argv: Sequence[str] | None,
                     path: str) -> argparse.Namespace:
    """The rollout's flags with FILE's values as defaults: a flag given on the command line
    wins, a bad key or value in FILE is refused naming it (`opd_gym.runs.config`)."""
    from opd_gym.runs.config import read_config_file

    roll = next(action for action in parser._actions
                if isinstance(action, argparse._SubParsersAction)).choices["rollout"]
    roll.set_defaults(**read_config_file(path, roll._actions))
    return parser.parse_args(argv)


THIRD_PARTY_BARS = {  # read when those libraries are imported, which the CLI does later
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",  # also transformers' own bars
    "HF_DATASETS_DISABLE_PROGRESS_BARS": "1",
    "TRANSFORMERS_VERBOSITY": "error",
}


def quiet_third_party() -> None:
    """Only opd-gym's own progress bar shows: silence the HF libraries' bars and chatter."""
    for key, value in THIRD_PARTY_BARS.items():
        os.environ.setdefault(key, value)
    if "transformers" in sys.modules:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()


def _command(argv: Sequence[str]) -> str:
    """The command argv names (its first word that is not a flag), "" if it names none."""
    word = next((w for w in argv if not w.startswith("-")), "")
    return word if word in COMMANDS else ""


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command: exit 2 with one line for a user error (an OPDGymError, a bad flag),
    a traceback and exit 1 for anything else (a bug)."""
    words = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(only=_command(words))
    args = parser.parse_args(words)
    quiet_third_party()
    try:
        if getattr(args, "config", None) is not None:
            args = with_config_file(parser, words, args.config)
        return args.func(args)
    except OPDGymError as exc:
        print(f"opd-gym: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def run() -> None:
    """The `opd-gym` command: `main`'s exit code. After an interrupted run whose cancelled
    episode threads are still alive (a second Ctrl-C abandons them mid-call), the process
    exits without the interpreter's teardown: its files are written and closed by then, and
    joining those threads, or a native runtime tearing them down, would hang or abort
    ("terminate called without an active exception", SIGABRT instead of 130)."""
    code = main()
    if code == 130 and any(t.is_alive() for t in threading.enumerate()
                           if t is not threading.main_thread()):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(130)
    sys.exit(code)


__all__ = ["Parser", "build_parser", "main", "run", "with_config_file"]
