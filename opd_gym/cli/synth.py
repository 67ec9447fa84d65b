"""`opd-gym tasks synth SOURCE`: validated bug-fix tasks from a project that ships its
pytest suite, written to a manifest (the work is `opd_gym.authoring.synth`)."""

from __future__ import annotations

import argparse

from opd_gym.cli import options

SUMMARY = ("synthesize validated bug-fix tasks from a project that ships its pytest suite "
           "(see opd_gym/authoring/synth.py)")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("source", help="an sdist (.tar.gz), a pinned library name, or a folder")
    parser.add_argument("-o", "--output", help="manifest to write (default NAME-synth.json)")
    parser.add_argument("--max", type=int, default=10, help="tasks to keep (default 10)")
    parser.add_argument("--seed", type=int, default=0, help="the order mutations are tried in")
    parser.add_argument("--workers", type=options.positive, default=2,
                        help="validations run at once")
    options.sandbox(parser)
    options.ray(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from opd_gym import specs
    from opd_gym.authoring.synth_cli import synth_command

    return synth_command(args.source, args.output, args.max, args.seed,
                         specs.sandbox_backend(args.sandbox), args.workers,
                         ray=args.ray is not None,
                         address=None if args.ray in (None, "local") else args.ray)


__all__ = ["SUMMARY", "add_arguments", "run"]
