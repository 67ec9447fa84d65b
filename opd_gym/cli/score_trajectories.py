"""`opd-gym score-trajectories FILE... --out OUT`: Harbor ATIF trajectories scored by the
teacher, one OPD record per agent step (JSONL), the inverse of `export --to atif`."""

from __future__ import annotations

import argparse

from opd_gym.cli import options


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="+", metavar="FILE",
                        help="a trajectory.json, an index.jsonl (as `export --to atif` writes) "
                        "or a folder of trials (*/agent/trajectory.json)")
    parser.add_argument("--out", required=True,
                        help="the JSONL file of OPD records, one line per agent step")
    options.opd_options(parser)
    options.tokenizer(parser)
    parser.add_argument("--student-temperature", type=float, metavar="T",
                        help="the temperature the trajectories' logprobs were sampled at, "
                        "recorded in each record (default: not known, recorded as null)")
    parser.add_argument("--reconstruct", action="store_true",
                        help="score agent steps without the student's token ids on the "
                        "teacher's tokenization of their text (records marked \"retokenized\" "
                        "/ \"reconstructed\"); default: refuse them")


def run(args: argparse.Namespace) -> int:
    from opd_gym import specs
    from opd_gym.exports.atif_in import score_trajectories
    from opd_gym.opd.config import OPDConfig

    teacher = specs.resolve_model(args.teacher)
    config = OPDConfig(teacher=teacher, judge=args.judge, topk=args.topk, votes=args.votes,
                       hint_scope=args.hint_scope, student_tokenizer=args.tokenizer,
                       teacher_options=options.teacher_options(args))
    specs.validate("teacher", teacher)
    specs.validate("judge", args.judge)
    out, count, checks = score_trajectories(args.files, args.out, config,
                                            reconstruct=args.reconstruct,
                                            student_temperature=args.student_temperature)
    print(f"scored {count} agent step(s) (ATIF checked with {checks}); wrote {out}")
    return 0


__all__ = ["add_arguments", "run"]
