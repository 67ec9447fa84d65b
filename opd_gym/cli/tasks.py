"""`opd-gym tasks list|show|validate|calibrate|synth|check-suite`: look at, check, calibrate
and make tasks."""

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
    calibrate = sub.add_parser("calibrate", help="calibrate each task into a store ahead of "
                               "time (`rollout --calibrations DIR` then reads it); resumable")
    options.task_source(calibrate)
    options.calibrations(calibrate, required=True)
    options.selection(calibrate)
    options.sandbox(calibrate)
    options.setup_cache(calibrate)
    calibrate.add_argument("--workers", type=options.positive, default=2,
                           help="tasks calibrated at once (default 2)")
    options.quiet(calibrate)
    calibrate.set_defaults(func=run_calibrate)
    synth.add_arguments(sub.add_parser("synth", help=synth.SUMMARY))
    check_suite.add_arguments(sub.add_parser("check-suite", help=check_suite.SUMMARY))


def run(args: argparse.Namespace) -> int:  # every subcommand sets its own func
    raise UserError("give a tasks subcommand: list, show, validate, calibrate, synth or "
                    "check-suite")


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


def run_calibrate(args: argparse.Namespace) -> int:
    """`tasks calibrate --tasks SOURCE --calibrations DIR`: the selected tasks into the store."""
    from opd_gym.grading.store import CalibrationStore

    store = CalibrationStore.open(args.calibrations)  # refused before any task is loaded
    tasks = options.load_tasks(options.task_spec(args))
    chosen = options.select_tasks(args, tasks)
    return calibrate(chosen, store, args.sandbox, args.workers, setup_cache=args.setup_cache,
                     progress=not args.quiet)


def calibrate(tasks, store, sandbox: str, workers: int = 2, *, setup_cache: str | None = None,
              progress: bool = True) -> int:
    """Calibrate each of `tasks` not yet in `store` (a CalibrationStore), as a run's first
    grade would (its environment image built where it has one); print one summary line:
    calibrated / already there / failed, then each failure's task id and reason. A task counts
    as calibrated only when its entry is in the store afterwards; rc 1 if any failed. A task
    calibrated whose tests none could earn is named too (a rollout would refuse it)."""
    from concurrent.futures import ThreadPoolExecutor

    from opd_gym.env import CodingEnv
    from opd_gym.sandboxes import make_pool

    todo = [t for t in tasks if not store.calibrated(t)]
    there = len(tasks) - len(todo)
    failed: dict[str, str] = {}
    unverifiable: dict[str, str] = {}  # calibrated, but no test of theirs could earn
    if todo:
        bar = _bar(len(todo), progress)
        with make_pool(sandbox, size=workers) as pool:
            env = CodingEnv(tasks=todo, sandbox=pool, grader=store.grader(pool),
                            setup_cache=setup_cache)

            def one(task) -> tuple[str, bool, str]:
                """(task id, stored, why: the failure, or why a stored task is unverifiable)."""
                try:
                    why = env.verify([task.id]).get(task.id, "")
                except Exception as exc:  # noqa: BLE001 - one task's failure, said, not the run's
                    why = f"{type(exc).__name__}: {exc}"
                if store.calibrated(task):
                    return task.id, True, why
                return task.id, False, why or "no calibration was stored"

            try:
                with ThreadPoolExecutor(max(1, min(workers, len(todo))),
                                        thread_name_prefix="opd-calibrate") as threads:
                    for task_id, stored, why in threads.map(one, todo):
                        if not stored:
                            failed[task_id] = why
                        elif why:
                            unverifiable[task_id] = why
                        bar(task_id, not stored)
            finally:
                env.close()
                bar(None, False)
    print(f"{len(todo) - len(failed)} calibrated, {there} already there, {len(failed)} failed "
          f"(store {store.path})")
    for task_id, why in failed.items():
        print(f"  failed {task_id}: {why}")
    for task_id, why in unverifiable.items():
        print(f"  calibrated, but no grade can vouch for {task_id} (a rollout refuses it): {why}")
    return 1 if failed else 0


def _bar(total: int, enabled: bool):
    """A callback moving a tqdm bar per task (a line per task without tqdm; None closes)."""
    import sys

    bar = None
    if enabled:
        try:
            from tqdm import tqdm

            bar = tqdm(total=total, unit="task", desc="calibrating", dynamic_ncols=True)
        except ImportError:
            pass
    count = 0

    def moved(task_id: str | None, failed: bool) -> None:
        nonlocal count
        if task_id is None:
            if bar is not None:
                bar.close()
            return
        count += 1
        if bar is not None:
            bar.set_postfix_str(f"{task_id}{' failed' if failed else ''}", refresh=False)
            bar.update(1)
        elif enabled:
            print(f"[{count}/{total}] {task_id}{' failed' if failed else ''}", file=sys.stderr)

    return moved


__all__ = ["add_arguments", "calibrate", "run", "validate"]
