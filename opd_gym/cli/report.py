"""`opd-gym report RUN_DIR...`: one run's HTML report (like `view`), or two or more runs
compared side by side."""

from __future__ import annotations

import argparse
from pathlib import Path

from opd_gym.cli import options
from opd_gym.cli.errors import UserError
from opd_gym.cli.view import open_in_browser


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    parser.add_argument("--out", help="the HTML file to write (default: RUN_DIR/report.html "
                        "for one run, compare.html for several)")
    options.tokenizer(parser)
    options.open_flag(parser)


def run(args: argparse.Namespace) -> int:
    from opd_gym.viewer import load_tokenizer, write_compare, write_report

    for run_dir in args.run_dirs:
        if not (Path(run_dir) / "trajectories.jsonl").is_file() and not Path(run_dir).is_file():
            raise UserError(f"no run directory {run_dir!r} (no trajectories.jsonl in it)")
    if len(args.run_dirs) == 1:
        path = write_report(args.run_dirs[0], args.out,
                            tokenizer=load_tokenizer(args.tokenizer))
    else:
        if args.tokenizer:
            raise UserError("--tokenizer applies to one run's report, not a comparison")
        out = Path(args.out or "compare.html")
        if out.is_dir():
            raise UserError(f"--out {str(out)!r} is a directory; give the HTML file to write")
        path = write_compare(args.run_dirs, out)
    print(f"wrote {path}")
    if args.open:
        open_in_browser(path)
    return 0


__all__ = ["add_arguments", "run"]
