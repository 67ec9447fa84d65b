"""`opd-gym tasks list|show|validate|synth|check-suite`: look at, check and make tasks."""

from __future__ import annotations

import argparse

from opd_gym.cli import options
from opd_gym.cli.errors import UserError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The `tasks` subcommands (synth and check-suite have modules of their own)."""
    from opd_gym.cli import check_suite, synth
    from opd_gym.cli.main import Parser

    sub = parser.add_subparsers(dest="tasks_command", required=True, parser_class=Parser)
    listing = sub.add_parser("list", help="the tasks of a suite or file")
    options.task_source(listing)
    listing.set_defaults(func=run_list)
    show = sub.add_parser("show", help="one task's prompt and files")
    show.add_argument("id")
    options.task_source(show)
    show.set_defaults(func=run_show)
    validate = sub.add_parser("validate", help="grade each task's starter (must score 0), "
                              "reference (1.0) and a wrong answer (below 0.5)")
    validate.add_argument("path", nargs="?", help="the task source (old form of --tasks)")
    options.task_source(validate)
    options.selection(validate)
    options.sandbox(validate)
    validate.add_argument("--workers", type=options.positive, default=4,
                          help="gradings run at once")
    validate.set_defaults(func=run_validate)
    synth.add_arguments(sub.add_parser("synth", help=synth.SUMMARY))
    check_suite.add_arguments(sub.add_parser("check-suite", help=check_suite.SUMMARY))


def run(args: argparse.Namespace) -> int:  # every subcommand sets its own func
    raise UserError("give a tasks subcommand: list, show, validate, synth or check-suite")


def run_list(args: argparse.Namespace) -> int:
    tasks = options.load_tasks(options.task_spec(args))
    width = max(len(t.id) for t in tasks)
    for task in tasks:
        first = task.prompt.strip().splitlines()[0][:80]
        print(f"{task.id:<{width}}  {task.difficulty:<6}  {first}")
    print(f"{len(tasks)} tasks")
    return 0


def run_show(args: argparse.Namespace) -> int:
    tasks = options.load_tasks(options.task_spec(args))
    task = next((t for t in tasks if t.id == args.id), None)
    if task is None:
        raise UserError(f"no task {args.id!r}: see `opd-gym tasks list`")
    print(f"# {task.id} ({task.difficulty}; {', '.join(task.tags) or 'no tags'})\n")
    print(task.prompt.strip() + "\n")
    for label, files in (("starter", task.files), ("hidden tests", task.tests),
                         ("reference", task.solution)):
        print(f"{label}: {', '.join(sorted(files)) or '(none)'}")
    return 0


def run_validate(args: argparse.Namespace) -> int:
    """`tasks validate FILE` (old form) or `--tasks FILE`: every task's checks, a table."""
    given = args.tasks != options.DEFAULT_TASKS
    if args.path and given and args.path != args.tasks:
        raise UserError("give the task source once: `--tasks SOURCE` (or the old "
                        "positional form), not both")
    tasks = options.load_tasks(options.task_spec(args, args.path if not given else None))
    chosen = options.select_tasks(args, tasks)
    harbor = [t.id for t in chosen if t.harbor is not None]
    if harbor:
        raise UserError(f"tasks validate does not apply to Harbor tasks yet ({harbor[0]}...): "
                        "their verifier is tests/test.sh; play the reference through the env "
                        "instead (opd_gym.agents.ReferenceAgent runs solution/solve.sh)")
    if len(chosen) < len(tasks):
        print(f"validating {len(chosen)} of the source's {len(tasks)} tasks")
    return validate(chosen, args.sandbox, args.workers)


def validate(tasks, sandbox: str, workers: int = 4) -> int:
    """Grade every task's untouched starter (must score 0), reference (must score 1.0) and a
    wrong answer (the reference with perturbed answers: must score below 0.5, else its tests
    check format only); print a table, rc 1 if any task fails a check."""
    from opd_gym.authoring.validate import WRONG_LIMIT, check_tasks, table_header, table_row
    from opd_gym.grading import Grader
    from opd_gym.sandboxes import make_pool

    width = max(8, *(len(t.id) for t in tasks))
    header = table_header(width)
    print(header)
    print("-" * len(header))
    bad, format_only = 0, []
    with make_pool(sandbox, size=workers) as pool:
        grader = Grader(pool)
        for check in check_tasks(tasks, grader.grade, workers=workers):
            bad += not check.ok
            if check.format_only:
                format_only.append(check.task_id)
            print(table_row(check, width), flush=True)
    if format_only:
        print(f"tests that check format only (a wrong answer scores >= {WRONG_LIMIT:g}): "
              f"{', '.join(format_only)}")
    print(f"{len(tasks) - bad}/{len(tasks)} tasks valid")
    return 1 if bad else 0


__all__ = ["add_arguments", "run", "validate"]
