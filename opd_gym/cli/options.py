"""The flags several `opd-gym` commands share, each defined once (one type, one default, one
help), and the argparse types they use; a command adds a group with one call.

Groups: task source (`task_source`), task selection (`selection`), sandbox (`sandbox`),
limits (`limits`), verification (`verification`), OPD options (`opd_options`), and single
flags (`quiet`, `tokenizer`, `open_flag`, `ray`, `setup_cache`, `tool_format`). A flag whose
meaning is a command's own (`--out` is a run directory for rollout and an HTML file for
report) is listed in `PER_COMMAND`, with why; tests/cli/test_parsers.py checks that every other
flag reads the same wherever it appears.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from opd_gym.cli.errors import UserError

DEFAULT_TASKS = "coding"
DEFAULT_MAX_TURNS = 15  # a task source that is not a built-in suite with its own env.toml
DEFAULT_TOOL_OUTPUT = 10_000

TASKS_HELP = ("suite name, task folder, task or dataset file (JSONL/JSON/YAML/TOML in our schema "
              "or HumanEval, MBPP, APPS, CodeContests rows; SWE-bench/SWE-Gym/SWE-smith rows "
              "with --repo/--repos), a `tasks synth` manifest, hf:NAME[@SPLIT], or "
              "harbor:FOLDER (a Harbor task folder, or a folder of them)")
SCHEMA_CHOICES = ["auto", "opd_gym", "humaneval", "mbpp", "apps", "code_contests",
                  "swebench"]

# Flags whose meaning is each command's own, so their definitions may differ (and do).
PER_COMMAND = {
    "--out": "what the command writes: a run directory, an HTML report, an export file",
    "--workers": "what runs at once: Ray actors, gradings, validations",
    "--seed": "what it seeds: episodes (rollout), mutation order (synth), sampling (proxy)",
    "--port": "which server: the env server (serve) or the model proxy (proxy)",
    "--timeout": "what is timed: a grading run (check-suite) or an upstream call (proxy)",
    "--tasks": "which tasks a command plays or shows (default coding), except for `sandbox "
               "build`, where it names the tasks whose environment images to build (none "
               "by default)",
}


# --- argparse types -----------------------------------------------------------------------

def _reads(kind: str) -> Any:
    """Names what an argparse type reads (`kind`), for messages about a config file's value."""
    def mark(fn: Any) -> Any:
        fn.kind = kind
        return fn
    return mark


@_reads("positive integer")
def positive(text: str) -> int:
    """argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


@_reads("number of characters")
def output_chars(text: str) -> int:
    """argparse type: a tool-output budget in characters (0: no limit)."""
    from opd_gym.tools.executor import MIN_OUTPUT_CHARS

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of characters"
                                         ) from None
    if value != 0 and value < MIN_OUTPUT_CHARS:
        raise argparse.ArgumentTypeError(f"must be at least {MIN_OUTPUT_CHARS} characters, or 0 "
                                         f"for no limit, got {value}")
    return value


@_reads("number of seconds")
def seconds(text: str) -> float:
    """argparse type: a finite number of seconds >= 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text}")
    return value


def folder(text: str) -> str:
    """argparse type: an existing folder."""
    if not Path(text).is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is not a folder")
    return text


def id_list(text: str) -> list[str]:
    """argparse type: comma-separated ids."""
    return text.split(",")


# --- flag groups --------------------------------------------------------------------------

def task_source(parser: argparse.ArgumentParser, tasks: bool = True) -> None:
    """`--tasks`, `--schema`, `--skip-invalid`, `--repo`, `--repos`: which tasks, read how
    (`task_spec` turns them into one task spec); without `tasks` the caller defines its own
    `--tasks` (see PER_COMMAND)."""
    if tasks:
        parser.add_argument("--tasks", default=DEFAULT_TASKS,
                            help=f"{TASKS_HELP} (default {DEFAULT_TASKS})")
    parser.add_argument("--schema", choices=SCHEMA_CHOICES,
                        help="the rows' schema (default: detected from the first row)")
    parser.add_argument("--skip-invalid", action="store_true",
                        help="skip invalid task rows (how many is reported) instead of refusing "
                        "the file")
    parser.add_argument("--repo", action="append", metavar="OWNER/NAME=PATH",
                        help="SWE-bench/SWE-Gym/SWE-smith rows: the git history of a "
                        "repository they name (a clone, bare repository, bundle or tarball "
                        "with the base commits); repeatable")
    parser.add_argument("--repos", metavar="FOLDER",
                        help="SWE-bench-style rows: a folder holding each repository they "
                        "name, as owner/name, owner__name or name (optionally .git, .bundle, "
                        ".tar.gz)")


TASK_IDS_HELP = "comma-separated ids"


def selection(parser: argparse.ArgumentParser) -> None:
    """`--task-ids`, `--sample N`, `--sample-seed`: which tasks of the source a command works
    on (`select_tasks`), for suites too big to check whole."""
    parser.add_argument("--task-ids", type=id_list, help=TASK_IDS_HELP)
    parser.add_argument("--sample", type=positive, metavar="N",
                        help="N tasks drawn from the source (after --task-ids), seeded")
    parser.add_argument("--sample-seed", type=int, default=0,
                        help="the seed of --sample's draw (default 0)")


def select_tasks(args: argparse.Namespace, tasks: Any) -> list[Any]:
    """The tasks `selection`'s flags name, in the source's order: unknown ids are refused by
    name, and `--sample N` draws N of them with `--sample-seed` (all of them when N is more)."""
    import random

    chosen = list(tasks)
    if args.task_ids:
        known = {t.id for t in chosen}
        unknown = sorted(set(args.task_ids) - known)
        if unknown:
            raise UserError(f"unknown task id(s) {', '.join(unknown)}: see `opd-gym tasks list`")
        wanted = set(args.task_ids)
        chosen = [t for t in chosen if t.id in wanted]
    if args.sample is not None and args.sample < len(chosen):
        picked = set(random.Random(args.sample_seed).sample(range(len(chosen)), args.sample))
        chosen = [t for i, t in enumerate(chosen) if i in picked]
    return chosen


def sandbox(parser: argparse.ArgumentParser) -> None:
    """`--sandbox`: the backend episodes and grades run in."""
    from opd_gym import specs

    parser.add_argument("--sandbox", default="auto", choices=list(specs.KINDS["sandbox"][0]),
                        help="sandbox backend (default auto: docker, else bwrap, else local)")


def limits(parser: argparse.ArgumentParser) -> None:
    """`--max-turns`, `--max-tool-output`, `--grace`: how long an episode may go on, how much
    of a tool result the policy sees, how long a Ctrl-C waits."""
    from opd_gym.runs.interrupt import DEFAULT_GRACE_S

    parser.add_argument("--max-turns", type=positive,
                        help="assistant turns per episode (default: a built-in suite's own, "
                        f"as its env id has: 30 for repo; else {DEFAULT_MAX_TURNS})")
    parser.add_argument("--max-tool-output", type=output_chars, default=DEFAULT_TOOL_OUTPUT,
                        metavar="CHARS",
                        help=f"characters of one tool result the policy sees (default "
                        f"{DEFAULT_TOOL_OUTPUT}; 0: no limit); longer output keeps its head and "
                        "tail around a marker")
    parser.add_argument("--grace", type=seconds, default=DEFAULT_GRACE_S,
                        help="after the first Ctrl-C, seconds what is in flight (episodes, "
                        "requests) may take to finish before it is cancelled (default "
                        f"{DEFAULT_GRACE_S:g})")


def verification(parser: argparse.ArgumentParser) -> None:
    """`--skip-unverifiable`, `--no-verify`: what happens to a task no grade can vouch for."""
    parser.add_argument("--skip-unverifiable", action="store_true",
                        help="leave out the tasks no grade can vouch for (no test could earn: "
                        "every answer would score 0), saying how many, instead of refusing "
                        "them; each task is calibrated before its first episode")
    parser.add_argument("--no-verify", action="store_true",
                        help="play without calibrating the tasks first (an unverifiable task's "
                        "grades are then infra errors, left out of summaries and exports)")


def opd_options(parser: argparse.ArgumentParser) -> None:
    """The teacher, judge and scoring flags, their defaults `OPDConfig`'s own."""
    from opd_gym import specs
    from opd_gym.opd.config import OPDConfig
    from opd_gym.opd.scorer import SCOPES

    defaults = OPDConfig()
    parser.add_argument(
        "--teacher", default="auto",
        help=f"{specs.known('teacher')} (auto: smollm2 when it can be fetched, else tiny)")
    parser.add_argument("--judge", default=defaults.judge, help=specs.known("judge"))
    parser.add_argument("--topk", type=int, default=defaults.topk,
                        help=f"teacher top-K per student token (default {defaults.topk}, the "
                        "most a vLLM server returns unless started with more --max-logprobs)")
    parser.add_argument("--votes", type=int, default=defaults.votes,
                        help="LLM judge samples per turn")
    parser.add_argument("--hint-scope", choices=SCOPES, default=defaults.hint_scope,
                        help="turn: each turn scored with its own hint; episode: one teacher "
                        "pass per episode with every hint in place (records at its end)")
    parser.add_argument("--teacher-dtype",
                        help="hf:/vllm-engine: teacher dtype (default: the checkpoint's; "
                        "float64 for exactness checks with hf:)")
    parser.add_argument("--teacher-device", help="hf:/vllm-engine: teacher device")
    parser.add_argument("--teacher-max-model-len", type=int,
                        help="hf:/vllm-engine: longest teacher input")


def tool_format(parser: argparse.ArgumentParser) -> None:
    """`--tool-format`: how the policy writes tool calls."""
    parser.add_argument(
        "--tool-format", default="hermes",
        help="how the policy writes tool calls: hermes | qwen3_coder | llama3 | mistral | "
        "deepseek | auto (read from an hf: policy's chat template)")


def setup_cache(parser: argparse.ArgumentParser) -> None:
    """`--setup-cache`: what repository tasks' setup steps install from (at /opd-cache)."""
    parser.add_argument("--setup-cache", metavar="DIR", type=folder,
                        help="the folder environment images' setup steps install from, "
                        "mounted read-only at /opd-cache (default: the pinned sdists that "
                        "scripts/setup.sh keeps)")


def calibrations(parser: argparse.ArgumentParser, *, required: bool = False) -> None:
    """`--calibrations DIR`: the calibration store (grading/store.py) grades read and fill."""
    parser.add_argument("--calibrations", metavar="DIR", required=required,
                        help="a folder of calibrations made ahead (`opd-gym tasks calibrate`), "
                        "with the secret seeding their canaries: tasks calibrated there are not "
                        "calibrated again; made (0700) if missing; never give a sandbox access")


def ray(parser: argparse.ArgumentParser) -> None:
    """`--ray [ADDRESS]`: do the work on Ray (a local cluster without ADDRESS)."""
    parser.add_argument("--ray", nargs="?", const="local", default=None, metavar="ADDRESS",
                        help="run on Ray: 'auto', a cluster address (host:port, ray://...), or "
                        "(no value) a local cluster started here (extra 'ray'; docs/ray.md)")


def quiet(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quiet", action="store_true", help="no progress bar")


def tokenizer(parser: argparse.ArgumentParser, *aliases: str) -> None:
    """`--tokenizer` (and `aliases`, e.g. serve's `--student-tokenizer`): the policy's
    tokenizer, for what needs token ids read or checked."""
    parser.add_argument("--tokenizer", *aliases, dest="tokenizer",
                        help="tiny | smollm2 | hf:PATH: the policy's tokenizer "
                        "(view and report show token text with it, Atropos exports need it for "
                        "prompt ids, `serve --opd` checks clients' token ids against it, "
                        "`score-trajectories` the trajectories' ids; there `unchecked` skips "
                        "the check)")


def open_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--open", action="store_true", help="open it in a browser")


# --- what the groups mean -----------------------------------------------------------------

def task_spec(args: argparse.Namespace, source: str | None = None) -> Any:
    """The task source flags as one task spec: the plain string, or a loader mapping.

    `hf:NAME[@SPLIT]` is a Hugging Face dataset (needs the `datasets` extra); a file's schema
    is detected from its rows unless `--schema` names it (a `tasks synth` manifest by its
    fields); `--repo(s)` say where SWE-bench-style rows' repositories are.
    """
    source = source or args.tasks
    schema = getattr(args, "schema", None)
    extra: dict[str, Any] = {"skip_invalid": True} if getattr(args, "skip_invalid", False) else {}
    where = repos(args)
    if source.startswith("harbor:"):
        if where is not None or schema not in (None, "auto") or extra:
            raise UserError("--schema, --skip-invalid and --repo/--repos do not apply to "
                            "harbor: task folders")
        return source
    if where is not None:
        if source.startswith("hf:"):
            raise UserError("--repo/--repos apply to a file of SWE-bench-style rows, not to "
                            "an hf: dataset")
        extra["repos"] = where
    if source.startswith("hf:"):
        name, _, split = source[3:].partition("@")
        return {"dataset": name, "schema": schema, "split": split or "test", **extra}
    if schema in (None, "auto") and not extra:
        return source
    return {"source": source, "schema": schema, **extra}


def repos(args: argparse.Namespace) -> str | dict[str, str] | None:
    """Where SWE-bench-style rows' repositories are: `--repos FOLDER`, or the
    `--repo OWNER/NAME=PATH` pairs as a mapping (None when neither is given)."""
    pairs, where = getattr(args, "repo", None), getattr(args, "repos", None)
    if pairs and where:
        raise UserError("give --repos FOLDER or --repo OWNER/NAME=PATH flags, not both")
    if where:
        if not Path(where).is_dir():
            raise UserError(f"--repos {where!r} is not a folder (it holds one repository "
                            "per name: owner/name, owner__name or name)")
        return str(Path(where).resolve())
    if not pairs:
        return None
    found: dict[str, str] = {}
    for pair in pairs:
        name, sep, path = pair.partition("=")
        if not sep or not name.strip() or not path.strip():
            raise UserError(f"--repo {pair!r}: give OWNER/NAME=PATH (a clone, bare "
                            "repository, bundle or tarball holding the base commits)")
        if name.strip() in found:
            raise UserError(f"--repo names {name.strip()!r} twice")
        found[name.strip()] = str(Path(path.strip()).expanduser().resolve())
    return found


def suite_max_turns(spec: Any) -> int:
    """The `max_turns` of a built-in suite's env.toml (what its registered env id uses, e.g.
    30 for `repo`); DEFAULT_MAX_TURNS for any other task source."""
    from opd_gym.tasks.suite import available_suites, load_env_spec

    if isinstance(spec, str) and spec in available_suites():
        try:
            return int(load_env_spec(spec).get("max_turns", DEFAULT_MAX_TURNS))
        except FileNotFoundError:
            pass
    return DEFAULT_MAX_TURNS


def teacher_options(args: argparse.Namespace) -> dict[str, Any]:
    """The `--teacher-*` flags that were given (OPDConfig refuses them for a vllm: server)."""
    options = {"dtype": args.teacher_dtype, "device": args.teacher_device,
               "max_model_len": args.teacher_max_model_len}
    return {k: v for k, v in options.items() if v is not None}


def tool_format_name(spec: str, policy: str | None) -> str:
    """The tool format `--tool-format` names: a format, or `auto` read from an hf: policy's
    chat template (refused without one: there is nothing to read it from)."""
    from opd_gym.tools.formats import DEFAULT_FORMAT, detect_tool_format, get_tool_format

    if spec != "auto":
        try:
            return get_tool_format(spec).name
        except ValueError as exc:  # tools/formats raises a plain ValueError for a bad name
            raise UserError(str(exc)) from None
    if policy is None:
        raise UserError("--tool-format auto reads the policy's chat template, and this command "
                        "has no policy: name the format (hermes, qwen3_coder, ...)")
    from opd_gym import specs

    model = specs.local_model(policy) if policy.startswith("hf:") else None
    if model is not None:
        return detect_tool_format(specs.tokenizer(model)) or DEFAULT_FORMAT
    return DEFAULT_FORMAT


def load_tasks(spec: Any) -> Any:
    """The tasks a spec names, every loading failure one line (a UserError)."""
    import sys
    import warnings

    from opd_gym.tasks.harbor import HarborNote
    from opd_gym.tasks.resolve import resolve_tasks

    shown = spec if isinstance(spec, str) else spec.get("source") or f"hf:{spec.get('dataset')}"
    try:
        with warnings.catch_warnings():  # a Harbor task's notes: printed once, below
            warnings.filterwarnings("ignore", category=HarborNote)
            tasks = resolve_tasks(spec)
    except FileNotFoundError as exc:
        raise UserError(
            f"no task source {shown!r}: give a suite name, task file or folder ({exc})"
        ) from None
    except (ImportError, ValueError, TypeError) as exc:
        raise UserError(str(exc).splitlines()[0]) from None
    except Exception as exc:  # a dataset hub error, a corrupt file: one line, no traceback
        raise UserError(f"cannot load tasks from {shown!r}: {type(exc).__name__}: "
                        f"{str(exc).splitlines()[0] if str(exc) else ''}") from None
    for task in tasks:  # what of a Harbor task's task.toml runs otherwise than asked
        for note in task.harbor.notes if task.harbor is not None else ():
            print(f"opd-gym: task {task.id}: {note}", file=sys.stderr)
    skipped = getattr(tasks, "skipped", [])
    if skipped:
        print(f"opd-gym: skipped {len(skipped)} invalid task row(s) of {shown!r} "
              f"(first: {skipped[0]})", file=sys.stderr)
    return tasks


def budget(text: str | None, flag: str = "--budget") -> int:
    """A disk budget flag (e.g. 20g) in bytes; the default budget when not given."""
    from opd_gym.errors import OPDGymError
    from opd_gym.sandboxes.env_image import DEFAULT_BUDGET, parse_size

    try:
        return DEFAULT_BUDGET if text is None else parse_size(text)
    except OPDGymError as exc:
        raise UserError(f"{flag}: {exc}") from None


__all__ = [
    "DEFAULT_MAX_TURNS", "PER_COMMAND", "SCHEMA_CHOICES", "TASKS_HELP", "budget", "folder",
    "id_list", "limits", "load_tasks", "opd_options", "open_flag", "output_chars", "positive",
    "quiet", "ray", "repos", "sandbox", "seconds", "setup_cache", "suite_max_turns",
    "task_source", "task_spec", "teacher_options", "tokenizer", "tool_format",
    "tool_format_name", "verification",
]
