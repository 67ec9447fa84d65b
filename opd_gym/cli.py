"""The `opd-gym` command line: rollout, tasks, view, export, and sandbox management."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from opd_gym.errors import ConfigError, OPDGymError
from opd_gym.sandboxes import SandboxError, sandbox_factory


class UserError(ConfigError):
    """An error the user can fix; printed as one line, exit status 2, no traceback."""


def _check(label: str, fn: Callable[[], str]) -> tuple[str, bool, str]:
    try:
        return label, True, fn()
    except Exception as exc:  # doctor reports every failure instead of stopping
        return label, False, f"{type(exc).__name__}: {exc}".splitlines()[0][:160]


def _smoke(backend: str) -> str:
    """A short session in a fresh sandbox: persistent shell, files, timeout, no network."""
    sandbox = sandbox_factory(backend)()
    with sandbox:
        started = time.perf_counter()
        sandbox.run("mkdir -p demo && cd demo && export GREETING=hello")
        same = sandbox.run('echo "$GREETING from $(pwd)"').output.strip()
        if same != f"hello from {sandbox.workspace}/demo":
            raise SandboxError(f"persistent shell state lost: got {same!r}")
        sandbox.write_file("demo/hello.py", "print(sum(range(10)))\n")
        out = sandbox.run("python3 hello.py").output.strip()
        if out != "45":
            raise SandboxError(f"python3 in the sandbox printed {out!r}, expected 45")
        timed = sandbox.run("sleep 30", timeout=0.5)
        if not timed.timed_out or sandbox.run("echo ok").output.strip() != "ok":
            raise SandboxError("timeout did not kill the command or left the shell unusable")
        ifaces = sandbox.run("tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '").output.split()
        elapsed = (time.perf_counter() - started) * 1000
    return f"ok in {elapsed:.0f} ms (network interfaces: {', '.join(ifaces) or 'none'})"


def cmd_doctor(args: argparse.Namespace) -> int:
    from opd_gym.sandboxes.docker import DockerConfig, DockerEngine
    from opd_gym.sandboxes.image import rootfs_dir

    image = DockerConfig().image
    rows = [
        _check("docker engine", lambda: str(DockerEngine(timeout=5).client.version()["Version"])),
        _check(
            "sandbox image",
            lambda: image if DockerEngine(timeout=5).has_image(image) else _missing(image),
        ),
        _check("bubblewrap", lambda: shutil.which("bwrap") or _missing("bwrap")),
        _check(
            "offline rootfs",
            lambda: str(rootfs_dir()) if rootfs_dir().exists() else _missing("rootfs"),
        ),
    ]
    backends = args.backend or ["docker", "bwrap"]
    for backend in backends:
        rows.append(_check(f"smoke session ({backend})", lambda b=backend: _smoke(b)))
    width = max(len(r[0]) for r in rows)
    for label, ok, detail in rows:
        print(f"{label:<{width}}  {'OK ' if ok else 'NO '}  {detail}")
    failed = [label for label, ok, _ in rows if not ok and label.startswith("smoke")]
    if failed:
        print(f"\n{len(failed)} smoke session(s) failed; `opd-gym sandbox build` makes the image.")
        return 1
    print("\nThe sandbox works (a smoke run; `opd-gym rollout` runs the main job).")
    return 0


def _missing(what: str) -> str:
    raise FileNotFoundError(f"{what} is missing (run `opd-gym sandbox build`)")


def cmd_build(args: argparse.Namespace) -> int:
    from opd_gym.sandboxes.docker import DockerConfig
    from opd_gym.sandboxes.image import build_image, build_rootfs

    if args.rootfs_only:
        print(build_rootfs())
        return 0
    method = build_image(args.image or DockerConfig().image, method=args.method, force=args.force)
    print(f"sandbox image ready ({method})")
    return 0


def cmd_prune(args: argparse.Namespace) -> int:
    from opd_gym.sandboxes.docker import DockerEngine
    from opd_gym.sandboxes.reaper import prune

    report = prune(DockerEngine(timeout=10), everything=args.all)
    print(f"removed {len(report.removed)} container(s), kept {report.kept} with a live owner")
    return 0


DEMO_NOTE = (
    "pipeline demo: scripted policy with planted mistakes, rule judge, and a tiny randomly "
    "initialised model built locally as teacher (its logprobs are not from a trained model)"
)


SMOLLM2_DEMO_NOTE = (
    "pipeline demo: scripted policy with planted mistakes, rule judge, and SmolLM2-135M-Instruct "
    "(a real instruction-tuned model) as teacher"
)


def _teacher_options(args: argparse.Namespace) -> dict[str, Any]:
    """The `--teacher-*` flags that were given (OPDConfig refuses them for a vllm: server)."""
    options = {
        "dtype": args.teacher_dtype,
        "device": args.teacher_device,
        "max_model_len": args.teacher_max_model_len,
    }
    return {k: v for k, v in options.items() if v is not None}


def cmd_rollout(args: argparse.Namespace) -> int:
    from opd_gym import specs
    from opd_gym.loggers import make_logger
    from opd_gym.opd.config import OPDConfig
    from opd_gym.rollout import RolloutConfig, run_rollout

    args.tasks = _tasks_spec(args.tasks, args.schema)
    tasks = _load_tasks(args.tasks)
    if args.task_ids:
        known = {t.id for t in tasks}
        unknown = sorted(set(args.task_ids) - known)
        if unknown:
            raise UserError(f"unknown task id(s) {', '.join(unknown)}: see `opd-gym tasks list`")
    backend = specs.sandbox_backend(args.sandbox)
    if args.sandbox == "auto" and backend != "docker":
        print(
            f"notice: no Docker engine with the sandbox image here; using the {backend} "
            "backend" + (" (NO isolation)" if backend == "local" else ""),
            file=sys.stderr,
        )
    opd = None
    if not args.no_opd:  # every OPD option is checked here, before any model is loaded
        opd = OPDConfig(teacher=args.teacher, judge=args.judge, topk=args.topk,
                        votes=args.votes, hint_scope=args.hint_scope,
                        teacher_options=_teacher_options(args))
    make_agent = specs.make_policy(
        args.policy, tasks, seed=args.seed,
        max_new_tokens=args.max_new_tokens, temperature=args.temperature, top_p=args.top_p,
        dtype=args.policy_dtype, device=args.policy_device,
        max_model_len=args.policy_max_model_len,
    )
    args.policy = specs.resolve_model(args.policy)  # as config.json records it: hf:PATH
    args.teacher_name = args.teacher
    if opd is not None:
        if args.teacher == "auto":
            args.teacher_name = specs.auto_teacher()
        args.teacher = specs.resolve_model(args.teacher_name)
        opd = opd.replace(teacher=args.teacher)
    out = Path(args.out or Path("runs") / time.strftime("%Y%m%d-%H%M%S"))
    config = RolloutConfig(
        out_dir=str(out),
        episodes=args.episodes,
        tasks=args.tasks,
        task_ids=args.task_ids,
        sandbox=backend,
        parallel=args.parallel,
        seed=args.seed,
        max_turns=args.max_turns,
        resume=args.resume,
        opd=opd is not None,
        opd_options=opd if opd is not None else {},
    )
    demo = args.policy == "demo" and args.judge == "rule" and args.teacher_name in (
        "tiny", "smollm2")
    if demo and opd is not None:
        note = DEMO_NOTE if args.teacher_name == "tiny" else SMOLLM2_DEMO_NOTE
        print(f"opd-gym rollout: {note}", file=sys.stderr)
    out.mkdir(parents=True, exist_ok=True)
    try:
        logger = make_logger(args.log, out, vars(args)) if args.log else None
    except ImportError as exc:  # an optional logger package is missing: say how to get it
        raise UserError(str(exc).splitlines()[0]) from None
    (out / "config.json").write_text(json.dumps({**vars(args), "func": None}, indent=2))

    def log(row, metrics):
        if logger is not None:
            logger.log(metrics, step=int(metrics["train/episodes"]))

    restore = _apply_tool_format(args)
    try:
        if args.ray is not None:  # Ray: the same run directory, resume and summary
            from opd_gym.distributed import RayOptions, run_ray_rollout

            summary = run_ray_rollout(
                config, make_agent, on_episode=log, progress=not args.quiet,
                options=RayOptions(address=None if args.ray == "local" else args.ray,
                                   workers=args.workers,
                                   episodes_per_worker=args.episodes_per_worker))
        else:
            summary = run_rollout(config, make_agent, on_episode=log, progress=not args.quiet)
    except FileExistsError as exc:  # a finished run in --out without --resume
        raise UserError(str(exc)) from None
    finally:
        restore()
        if logger is not None:
            logger.close()
    print(summary.table())
    for failure in summary.failures[:5]:
        print(f"  {failure}", file=sys.stderr)
    written = [out / "trajectories.jsonl", out / "summary.json"]
    if not args.no_report:
        from opd_gym.viewer import write_report

        model = specs.local_model(args.teacher) if opd is not None else None
        written.append(write_report(out, tokenizer=specs.tokenizer(model)))
    if logger is not None and args.log == "jsonl":
        written.append(out / "metrics.jsonl")
    print("wrote " + ", ".join(str(p) for p in written))
    return 1 if summary.failures and not summary.episodes else 0


def _tool_format_name(spec: str, policy: str) -> str:
    """The tool format for `--tool-format`: a name, or `auto` read from the policy's template."""
    from opd_gym.tools.formats import DEFAULT_FORMAT, detect_tool_format, get_tool_format

    if spec != "auto":
        try:
            return get_tool_format(spec).name
        except ValueError as exc:  # tools/formats raises a plain ValueError for a bad name
            raise UserError(str(exc)) from None
    from opd_gym import specs

    model = specs.local_model(policy) if policy.startswith("hf:") else None
    if model is not None:
        return detect_tool_format(specs.tokenizer(model)) or DEFAULT_FORMAT
    return DEFAULT_FORMAT


def _apply_tool_format(args: argparse.Namespace) -> Callable[[], None]:
    """Make the run's envs parse `--tool-format`; returns the undo (for in-process callers)."""
    import gymnasium as gym

    from opd_gym.registration import DEFAULT_ID

    name = _tool_format_name(getattr(args, "tool_format", "hermes") or "hermes", args.policy)
    spec = gym.spec(DEFAULT_ID)
    before = dict(spec.kwargs)
    if name != "hermes":
        print(f"opd-gym rollout: tool-call format {name}", file=sys.stderr)
        spec.kwargs["tool_format"] = name

    def restore() -> None:
        spec.kwargs.clear()
        spec.kwargs.update(before)
    return restore


def _tasks_spec(source: str, schema: str | None) -> Any:
    """`--tasks`/`--schema` as a task spec: the plain string, or a loader mapping.

    `hf:NAME[@SPLIT]` is a Hugging Face dataset (needs the `datasets` extra); a file's schema
    is detected from its rows unless `--schema` names it.
    """
    if source.startswith("hf:"):
        name, _, split = source[3:].partition("@")
        return {"dataset": name, "schema": schema, "split": split or "test"}
    if schema in (None, "auto"):
        return source
    return {"source": source, "schema": schema}


def _load_tasks(spec: Any):
    from opd_gym.tasks.resolve import resolve_tasks

    shown = spec if isinstance(spec, str) else spec.get("source") or f"hf:{spec.get('dataset')}"
    try:
        return resolve_tasks(spec)
    except FileNotFoundError as exc:
        raise UserError(
            f"no task source {shown!r}: give a suite name, task file or folder ({exc})"
        ) from None
    except ImportError as exc:
        raise UserError(str(exc).splitlines()[0]) from None
    except (ValueError, TypeError) as exc:
        raise UserError(str(exc).splitlines()[0]) from None
    except Exception as exc:  # a dataset hub error, a corrupt file: one line, no traceback
        raise UserError(f"cannot load tasks from {shown!r}: {type(exc).__name__}: "
                        f"{str(exc).splitlines()[0] if str(exc) else ''}") from None


def cmd_tasks(args: argparse.Namespace) -> int:
    source = args.tasks if args.tasks_command != "validate" else args.path
    tasks = _load_tasks(_tasks_spec(source, args.schema))
    if args.tasks_command == "list":
        width = max(len(t.id) for t in tasks)
        for task in tasks:
            first = task.prompt.strip().splitlines()[0][:80]
            print(f"{task.id:<{width}}  {task.difficulty:<6}  {first}")
        print(f"{len(tasks)} tasks")
        return 0
    if args.tasks_command == "show":
        task = next((t for t in tasks if t.id == args.id), None)
        if task is None:
            raise UserError(f"no task {args.id!r}: see `opd-gym tasks list`")
        print(f"# {task.id} ({task.difficulty}; {', '.join(task.tags) or 'no tags'})\n")
        print(task.prompt.strip() + "\n")
        for label, files in (
            ("starter", task.files),
            ("hidden tests", task.tests),
            ("reference", task.solution),
        ):
            print(f"{label}: {', '.join(sorted(files)) or '(none)'}")
        return 0
    return _validate(tasks, args.sandbox)


def _validate(tasks, sandbox: str) -> int:
    """Grade every reference solution (must pass) and untouched starter (must not); a table."""
    from concurrent.futures import ThreadPoolExecutor

    from opd_gym.grading import Grader
    from opd_gym.sandboxes import make_pool

    def cell(report) -> str:
        return f"{report.passed}/{report.total}" if report.total else "0/0"

    width = max(8, *(len(t.id) for t in tasks))
    print(f"{'task':<{width}}  {'reference':>9}  {'starter':>7}  verdict")
    print(f"{'-' * width}  {'-' * 9}  {'-' * 7}  {'-' * 7}")
    bad = 0
    with make_pool(sandbox, size=2) as pool:
        grader = Grader(pool)

        def check(task):
            ref = grader.grade(task, _encoded({**task.files, **task.solution}))
            start = grader.grade(task, _encoded(task.files))
            return task, ref, start

        with ThreadPoolExecutor(2) as ex:
            for task, ref, start in ex.map(check, tasks):
                if not task.solution:
                    verdict = "BAD: no reference solution"
                elif ref.total == 0:
                    verdict = "BAD: no test ran (collection error?)"
                elif ref.score < 1.0:
                    verdict = "BAD: reference fails"
                elif start.score >= 1.0:
                    verdict = "BAD: starter already passes"
                else:
                    verdict = "ok"
                bad += verdict != "ok"
                print(f"{task.id:<{width}}  {cell(ref):>9}  {cell(start):>7}  {verdict}",
                      flush=True)
    print(f"{len(tasks) - bad}/{len(tasks)} tasks valid")
    return 1 if bad else 0


def _encoded(files) -> dict[str, bytes]:
    return {path: text.encode() for path, text in files.items()}


def cmd_view(args: argparse.Namespace) -> int:
    from opd_gym.viewer import load_tokenizer, write_report

    if not Path(args.run_dir).exists():
        raise UserError(f"no run directory {args.run_dir!r}")
    path = write_report(args.run_dir, tokenizer=load_tokenizer(args.tokenizer))
    print(f"wrote {path}")
    if args.open:
        import webbrowser

        webbrowser.open(path.resolve().as_uri())
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from opd_gym.exports import export_run
    from opd_gym.viewer import load_tokenizer

    if not Path(args.run_dir).exists():
        raise UserError(f"no run directory {args.run_dir!r}")
    tokenizer = load_tokenizer(args.tokenizer) if args.tokenizer else None
    path = export_run(args.run_dir, args.to, args.out, tokenizer=tokenizer)
    print(f"wrote {path}")
    return 0


class _Parser(argparse.ArgumentParser):
    """argparse that reports a bad flag in one line (plus where to look) instead of usage."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


TASKS_HELP = ("suite name, task folder, task or dataset file (JSONL/JSON/YAML/TOML in our schema "
              "or HumanEval, MBPP, APPS, CodeContests rows), or hf:NAME[@SPLIT]")
SCHEMA_CHOICES = ["auto", "opd_gym", "humaneval", "mbpp", "apps", "code_contests"]
SCHEMA_HELP = "the rows' schema (default: detected from the first row)"


def build_parser() -> argparse.ArgumentParser:
    from opd_gym import specs
    from opd_gym.opd.config import OPDConfig
    from opd_gym.opd.scorer import SCOPES

    OPD_DEFAULTS = OPDConfig()  # noqa: N806  (one default per option, shared with the API)
    SANDBOXES = list(specs.KINDS["sandbox"][0])  # noqa: N806
    parser = _Parser(prog="opd-gym", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    roll = sub.add_parser("rollout", help="play episodes and write OPD-scored trajectories")
    roll.add_argument("--episodes", type=int, default=8)
    roll.add_argument("--tasks", default="coding", help=TASKS_HELP)
    roll.add_argument("--schema", choices=SCHEMA_CHOICES, help=SCHEMA_HELP)
    roll.add_argument("--task-ids", type=lambda s: s.split(","), help="comma-separated ids")
    roll.add_argument("--policy", default="demo", help=specs.known("policy"))
    roll.add_argument(
        "--teacher", default="auto",
        help=f"{specs.known('teacher')} (auto: smollm2 when it can be fetched, else tiny)",
    )
    roll.add_argument("--judge", default=OPD_DEFAULTS.judge, help=specs.known("judge"))
    roll.add_argument(
        "--tool-format", default="hermes",
        help="how the policy writes tool calls: hermes | qwen3_coder | llama3 | mistral | "
        "deepseek | auto (read from an hf: policy's chat template)",
    )
    roll.add_argument("--topk", type=int, default=OPD_DEFAULTS.topk,
                      help=f"teacher top-K per student token (default {OPD_DEFAULTS.topk}, "
                      "the most a vLLM server returns unless started with more "
                      "--max-logprobs)")
    roll.add_argument("--votes", type=int, default=OPD_DEFAULTS.votes,
                      help="LLM judge samples per turn")
    roll.add_argument("--hint-scope", choices=SCOPES, default=OPD_DEFAULTS.hint_scope,
                      help="turn: each turn scored with its own hint; episode: one teacher "
                      "pass per episode with every hint in place (records at its end)")
    roll.add_argument("--no-opd", action="store_true", help="skip judging and teacher scoring")
    roll.add_argument("--parallel", type=int, default=2)
    roll.add_argument("--ray", nargs="?", const="local", default=None, metavar="ADDRESS",
                      help="play on Ray: 'auto', a cluster address, or (no value) a local "
                      "cluster started here (extra 'ray'; see docs/ray.md)")
    roll.add_argument("--workers", type=int, default=2, help="Ray worker actors (with --ray)")
    roll.add_argument("--episodes-per-worker", type=int, default=2,
                      help="episodes in flight per Ray worker (with --ray)")
    roll.add_argument("--seed", type=int, default=0,
                      help="episode i uses seed+i (env and the policy's sampling)")
    roll.add_argument("--max-new-tokens", type=int, help="policy: tokens sampled per turn")
    roll.add_argument("--temperature", type=float, help="policy: sampling temperature")
    roll.add_argument("--top-p", type=float, help="policy: nucleus sampling mass")
    roll.add_argument("--policy-dtype", help="hf: policy dtype (default: the checkpoint's)")
    roll.add_argument("--policy-device", help="hf: policy device, e.g. cuda:0")
    roll.add_argument("--policy-max-model-len", type=int, help="hf: prompt + turn token cap")
    roll.add_argument("--teacher-dtype",
                      help="hf:/vllm-engine: teacher dtype (default: the checkpoint's; "
                           "float64 for exactness checks with hf:)")
    roll.add_argument("--teacher-device", help="hf:/vllm-engine: teacher device")
    roll.add_argument("--teacher-max-model-len", type=int,
                      help="hf:/vllm-engine: longest teacher input")
    roll.add_argument("--max-turns", type=int, default=15)
    roll.add_argument("--sandbox", default="auto", choices=SANDBOXES)
    roll.add_argument("--out", help="output directory (default runs/<timestamp>)")
    roll.add_argument("--resume", action="store_true", help="continue a run in --out")
    roll.add_argument("--log", choices=["jsonl", "wandb", "tensorboard"])
    roll.add_argument("--no-report", action="store_true", help="skip report.html")
    roll.add_argument("--quiet", action="store_true", help="no progress bar")
    roll.set_defaults(func=cmd_rollout)

    tasks = sub.add_parser("tasks", help="list, show and validate tasks")
    tsub = tasks.add_subparsers(dest="tasks_command", required=True, parser_class=_Parser)
    tlist = tsub.add_parser("list", help="the tasks of a suite or file")
    tlist.add_argument("--tasks", default="coding", help=TASKS_HELP)
    tlist.add_argument("--schema", choices=SCHEMA_CHOICES, help=SCHEMA_HELP)
    tshow = tsub.add_parser("show", help="one task's prompt and files")
    tshow.add_argument("id")
    tshow.add_argument("--tasks", default="coding", help=TASKS_HELP)
    tshow.add_argument("--schema", choices=SCHEMA_CHOICES, help=SCHEMA_HELP)
    tval = tsub.add_parser("validate", help="grade references (must pass) and starters (must not)")
    tval.add_argument("path", help=TASKS_HELP)
    tval.add_argument("--schema", choices=SCHEMA_CHOICES, help=SCHEMA_HELP)
    tval.add_argument("--sandbox", default="auto", choices=SANDBOXES)
    tasks.set_defaults(func=cmd_tasks)

    view = sub.add_parser("view", help="write (and open) the HTML report of a run")
    view.add_argument("run_dir")
    view.add_argument("--tokenizer", help="tiny | hf:PATH, to show token text")
    view.add_argument("--open", action="store_true", help="open it in a browser")
    view.set_defaults(func=cmd_view)

    export = sub.add_parser("export", help="export a run to a trainer format")
    export.add_argument("run_dir")
    from opd_gym.exports.run import FORMATS as EXPORT_FORMATS

    export.add_argument("--to", required=True, choices=EXPORT_FORMATS)
    export.add_argument("--out", help="output file")
    export.add_argument("--tokenizer", help="tiny | hf:PATH (Atropos needs prompt ids)")
    export.set_defaults(func=cmd_export)

    sandbox = sub.add_parser("sandbox", help="build, check and clean the sandbox")
    ssub = sandbox.add_subparsers(dest="sandbox_command", required=True, parser_class=_Parser)
    build = ssub.add_parser("build", help="build the sandbox image (registry or offline)")
    build.add_argument("--method", choices=["auto", "dockerfile", "offline"], default="auto")
    build.add_argument("--image", help="image name (default: the library's)")
    build.add_argument("--force", action="store_true", help="rebuild even if present")
    build.add_argument("--rootfs-only", action="store_true", help="only the bwrap rootfs")
    build.set_defaults(func=cmd_build)
    doctor = ssub.add_parser("doctor", help="check the backends and run a smoke session")
    doctor.add_argument("--backend", action="append", choices=SANDBOXES[1:])
    doctor.set_defaults(func=cmd_doctor)
    prune = ssub.add_parser("prune", help="remove containers whose owner process is gone")
    prune.add_argument("--all", action="store_true", help="remove every opd_gym container")
    prune.set_defaults(func=cmd_prune)
    return parser


THIRD_PARTY_BARS = {  # read when those libraries are imported, which the CLI does later
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",  # also transformers' own bars
    "HF_DATASETS_DISABLE_PROGRESS_BARS": "1",
    "TRANSFORMERS_VERBOSITY": "error",
}


def _quiet_third_party() -> None:
    """Only opd-gym's own progress bar shows: silence the HF libraries' bars and chatter."""
    import os

    for key, value in THIRD_PARTY_BARS.items():
        os.environ.setdefault(key, value)
    if "transformers" in sys.modules:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command: exit 2 with one line for a user error (an OPDGymError, a bad flag),
    a traceback and exit 1 for anything else (a bug)."""
    args = build_parser().parse_args(argv)
    _quiet_third_party()
    try:
        return args.func(args)
    except OPDGymError as exc:
        print(f"opd-gym: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
