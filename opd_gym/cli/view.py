"""`opd-gym view RUN_DIR`: write (and open) the HTML report of a run."""

from __future__ import annotations

import argparse
from pathlib import Path

from opd_gym.cli import options
from opd_gym.cli.errors import UserError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir")
    options.tokenizer(parser)
    options.open_flag(parser)


def run(args: argparse.Namespace) -> int:
    from opd_gym.viewer import load_tokenizer, write_report

    if not Path(args.run_dir).exists():
        raise UserError(f"no run directory {args.run_dir!r}")
    path = write_report(args.run_dir, tokenizer=load_tokenizer(args.tokenizer))
    print(f"wrote {path}")
    if args.open:
        open_in_browser(path)
    return 0


def open_in_browser(path: Path) -> None:
    import webbrowser

    webbrowser.open(path.resolve().as_uri())


__all__ = ["add_arguments", "open_in_browser", "run"]
