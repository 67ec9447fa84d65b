"""The CLI package: every parser built from the command table, shared flags defined once, and
`opd-gym --help` light (no model, engine or cluster library imported)."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

from opd_gym.cli import build_parser
from opd_gym.cli.commands import COMMANDS
from opd_gym.cli.options import PER_COMMAND

HEAVY = ("torch", "transformers", "vllm", "ray", "datasets", "docker")


def _parsers(parser: argparse.ArgumentParser, path: str = "opd-gym"):
    """Every (command path, parser) under `parser`, subcommands included."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from _parsers(child, f"{path} {name}")


def _definition(action: argparse.Action) -> tuple:
    return (type(action).__name__, action.dest, action.type, action.default,
            tuple(action.choices) if action.choices is not None else None, action.nargs,
            action.const, action.metavar, action.help)


def _definitions() -> dict[str, dict[tuple, list[str]]]:
    """Each flag: its distinct definitions, and the commands that have each."""
    found: dict[str, dict[tuple, list[str]]] = {}
    for path, parser in _parsers(build_parser()):
        for action in parser._actions:
            for flag in action.option_strings:
                if flag.startswith("--") and flag != "--help":
                    found.setdefault(flag, {}).setdefault(_definition(action), []).append(path)
    return found


def test_a_flag_shared_by_two_commands_has_one_definition():
    """Type, default, choices and help agree wherever a flag appears, unless its meaning is
    each command's own (PER_COMMAND, which says why)."""
    found = _definitions()
    differing = {flag: list(defs.values()) for flag, defs in found.items()
                 if len(defs) > 1 and flag not in PER_COMMAND}
    assert not differing, differing
    shared = {flag for flag, defs in found.items() if sum(map(len, defs.values())) > 1}
    assert {"--tasks", "--schema", "--repo", "--sandbox", "--max-turns", "--grace", "--teacher",
            "--hint-scope", "--skip-unverifiable", "--tokenizer", "--ray"} <= shared
    assert len(found["--max-turns"]) == len(found["--grace"]) == len(found["--teacher"]) == 1


def test_every_per_command_flag_really_differs():
    """PER_COMMAND lists only flags that do have several definitions (the list cannot hide a
    flag that should have been shared)."""
    found = _definitions()
    assert all(len(found.get(flag, {})) > 1 for flag in PER_COMMAND), \
        {flag: len(found.get(flag, {})) for flag in PER_COMMAND}


def test_every_command_of_the_table_parses_and_dispatches():
    parser = build_parser()
    assert set(next(a for a in parser._actions
                    if isinstance(a, argparse._SubParsersAction)).choices) == set(COMMANDS)
    for argv in (["rollout"], ["tasks", "list"], ["view", "run"], ["report", "a", "b"],
                 ["export", "run", "--to", "trl"], ["sandbox", "prune"], ["serve"],
                 ["proxy", "--model", "tiny"], ["tasks", "check-suite", "x.tar.gz"],
                 ["tasks", "synth", "toolz"], ["score-trajectories", "t.json", "--out", "r"]):
        args = parser.parse_args(argv)
        assert callable(args.func) and args.func.__module__.startswith("opd_gym.cli."), argv


def test_help_imports_no_heavy_module_and_a_command_only_its_own():
    script = (
        "import sys, json\n"
        "from opd_gym.cli import main\n"
        "for argv in (['--help'], ['rollout', '--help']):\n"
        "    try:\n"
        "        main(argv)\n"
        "    except SystemExit:\n"
        "        pass\n"
        "    print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
        f"{HEAVY!r} or m.startswith('opd_gym.cli.'))))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    at_help, at_rollout = (json.loads(line) for line in done.stdout.splitlines()
                           if line.startswith("["))
    assert not [m for m in at_help if m.split(".")[0] in HEAVY], at_help
    assert set(at_help) <= {"opd_gym.cli.main", "opd_gym.cli.commands", "opd_gym.cli.errors"}
    assert not [m for m in at_rollout if m.split(".")[0] in HEAVY], at_rollout
    assert "opd_gym.cli.rollout" in at_rollout
    assert not {"opd_gym.cli.serve", "opd_gym.cli.proxy", "opd_gym.cli.export"} & set(at_rollout)


def test_parsing_never_rewrites_the_flags(tmp_path):
    """A rollout's plan (config, run config) is built from the flags; `args` stays as parsed."""
    from opd_gym.cli.rollout import plan

    args = build_parser().parse_args(["rollout", "--no-opd", "--sandbox", "local", "--out",
                                      str(tmp_path / "run"), "--task-ids", "fizzbuzz"])
    before = dict(vars(args))
    planned = plan(args)
    assert vars(args) == before
    assert planned.config.episodes == 8 and planned.config.max_turns == 15
    assert planned.run_config["tasks"] == "coding" and planned.run_config["func"] is None
    assert "config" not in planned.run_config


def test_old_import_paths_keep_working():
    from opd_gym.proxy.cli import add_arguments as proxy_flags
    from opd_gym.serve.command import add_arguments as serve_flags
    from opd_gym.serve.command import config_from

    from opd_gym.cli import _suite_max_turns, _tool_format_name, cmd_rollout
    from opd_gym.cli.rollout import run

    assert cmd_rollout is run and _suite_max_turns("repo") == 30
    assert _tool_format_name("hermes", "demo") == "hermes"
    assert callable(proxy_flags) and callable(serve_flags) and callable(config_from)


def test_a_selection_keeps_the_sources_order_and_a_sample_is_seeded():
    """`--task-ids` keeps the named tasks in the source's order; `--sample N` draws N with
    `--sample-seed` (the same draw each time, another seed another draw, all when N is more)."""
    from types import SimpleNamespace

    from opd_gym.cli.options import select_tasks

    tasks = [SimpleNamespace(id=f"t{i}") for i in range(20)]

    def ids(task_ids=None, sample=None, seed=0):
        args = SimpleNamespace(task_ids=task_ids, sample=sample, sample_seed=seed)
        return [t.id for t in select_tasks(args, tasks)]

    assert ids() == [t.id for t in tasks]
    assert ids(["t9", "t2"]) == ["t2", "t9"]
    drawn = ids(sample=5)
    assert len(drawn) == 5 and drawn == ids(sample=5) and drawn == sorted(drawn, key=ids().index)
    assert any(ids(sample=5, seed=s) != drawn for s in range(1, 5))
    assert ids(["t1", "t3"], sample=9) == ["t1", "t3"]
