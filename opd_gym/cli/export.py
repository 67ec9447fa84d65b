"""`opd-gym export RUN_DIR --to FORMAT`: a run in a trainer's format, as Harbor ATIF
trajectories (a folder), or its repository-task diffs as SWE-bench predictions."""

from __future__ import annotations

import argparse
from pathlib import Path

from opd_gym.cli import options
from opd_gym.cli.errors import UserError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from opd_gym.exports.run import FORMATS

    parser.add_argument("run_dir")
    parser.add_argument("--to", required=True, choices=FORMATS)
    parser.add_argument("--out", help="output file (atif: output folder, one "
                        "<trial>/agent/trajectory.json per episode)")
    options.tokenizer(parser)
    parser.add_argument("--model-name", help="swebench-predictions: model_name_or_path "
                        "(default: the run's policy, from its config.json)")
    inexact = parser.add_mutually_exclusive_group()
    inexact.add_argument("--allow-reconstructed", action="store_true", help="also write turns "
                         "scored on a context rebuilt from the transcript (no prompt ids were "
                         "recorded), marked \"reconstructed\": true (default: refuse them)")
    inexact.add_argument("--drop-reconstructed", action="store_true", help="leave those turns "
                         "out and say how many")


def run(args: argparse.Namespace) -> int:
    from opd_gym.exports import export_run
    from opd_gym.viewer import load_tokenizer

    if not Path(args.run_dir).exists():
        raise UserError(f"no run directory {args.run_dir!r}")
    if args.to == "swebench-predictions":  # counts what it left out, and why
        from opd_gym.exports.predictions import export_predictions

        print(export_predictions(args.run_dir, args.out, model_name=args.model_name).summary())
        return 0
    if args.model_name:
        raise UserError("--model-name applies to --to swebench-predictions")
    tokenizer = load_tokenizer(args.tokenizer) if args.tokenizer else None
    mode = "allow" if args.allow_reconstructed else "drop" if args.drop_reconstructed \
        else "refuse"
    path = export_run(args.run_dir, args.to, args.out, tokenizer=tokenizer, reconstructed=mode,
                      note=print)
    print(f"wrote {path}")
    return 0


__all__ = ["add_arguments", "run"]
