"""The `opd-gym` command line: rollout, tasks, view, export, and sandbox management."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
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
    from opd_gym.sandboxes.docker import DockerConfig, DockerEngine
    from opd_gym.sandboxes.image import build_image, build_rootfs

    if args.rootfs_only:
        print(build_rootfs())
        return 0
    budget = _budget(args.budget)
    if (args.repo or args.repos) and not args.tasks:
        raise UserError("--repo/--repos go with --tasks (the SWE-bench-style rows they serve)")
    tasks = (_load_tasks(_tasks_spec(args.tasks, None, False, _repos(args))) if args.tasks
             else None)
    engine = DockerEngine()
    method = build_image(args.image or DockerConfig().image, method=args.method, force=args.force,
                         engine=engine)
    print(f"sandbox image ready ({method})")
    if tasks is not None:
        _build_environments(tasks, engine, budget, quiet=args.quiet, cache=args.setup_cache)
    return 0


def _budget(text: str | None, flag: str = "--budget") -> int:
    from opd_gym.sandboxes.env_image import DEFAULT_BUDGET, parse_size

    try:
        return DEFAULT_BUDGET if text is None else parse_size(text)
    except OPDGymError as exc:
        raise UserError(f"{flag}: {exc}") from None


def _build_environments(tasks: Any, engine: Any, budget: int, quiet: bool,
                        cache: str | None = None) -> None:
    """Build (or find) the environment image of every task that needs one, with a bar;
    setup steps install from `cache` (default: the pinned sdists)."""
    from opd_gym.sandboxes.env_image import EnvironmentSpec, ImageCache
    from opd_gym.tasks.repo import environment

    wanted: dict[Any, list[str]] = {}
    for task in tasks:
        where = environment(task, None if cache is None else Path(cache))
        if where is not None:
            wanted.setdefault(where, []).append(task.id)
    shared = len(tasks) - sum(len(ids) for ids in wanted.values())
    print(f"{len(tasks)} task(s): {shared} run in the sandbox image, "
          f"{len(wanted)} environment image(s) needed")
    missing = [f"{where} (task {ids[0]})" for where, ids in wanted.items()
               if isinstance(where, str) and not engine.has_image(where)]
    if missing:
        raise UserError(f"{len(missing)} environment image(s) the tasks name are not on this "
                        f"machine and cannot be pulled offline: {', '.join(missing[:3])}; "
                        "load them with `docker load`")
    specs = [w for w in wanted if isinstance(w, EnvironmentSpec)]
    if not specs:
        return
    bar = None
    if not quiet:
        try:
            from tqdm import tqdm

            bar = tqdm(total=len(specs), unit="image", dynamic_ncols=True)
        except ImportError:  # no bar: the cache prints a line per step instead
            pass
    log = bar.write if bar is not None else (None if quiet else print)
    cache = ImageCache(engine, budget, log=log)
    built = found = 0
    started = time.perf_counter()
    try:
        for spec in specs:
            report = cache.ensure(spec)
            built, found = built + report.built, found + (not report.built)
            if bar is not None:
                bar.set_postfix_str(f"{report.tag} {report.size >> 20} MiB", refresh=False)
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    print(f"environment images ready: {built} built, {found} already here "
          f"({time.perf_counter() - started:.0f} s; budget {budget >> 30} GiB)")


def cmd_prune(args: argparse.Namespace) -> int:
    from opd_gym.sandboxes.docker import DockerEngine
    from opd_gym.sandboxes.reaper import prune

    report = prune(DockerEngine(timeout=10), everything=args.all)
    print(f"removed {len(report.removed)} container(s), kept {report.kept} with a live owner")
    return 0


def cmd_images(args: argparse.Namespace) -> int:
    """List the environment images (least recently used first); with --prune, remove the
    least recently used until the rest fit the budget (images in use always stay)."""
    import datetime

    from opd_gym.sandboxes.docker import DockerEngine
    from opd_gym.sandboxes.env_image import ImageCache

    budget = _budget(args.prune, "--prune") if args.prune is not None else None
    cache = ImageCache(DockerEngine(timeout=30), log=print)
    if budget is not None:
        cache.budget = budget
        removed = cache.collect()
        print(f"removed {len(removed)} environment image(s) (budget {budget >> 20} MiB)")
    images = cache.images()
    if not images:
        print("no environment images (`opd-gym sandbox build --tasks ...` builds them)")
        return 0
    print(f"{'image':<34} {'MiB':>8} {'in use':>6}  last used")
    for image in images:
        used = datetime.datetime.fromtimestamp(image["last_used"]).isoformat(" ", "seconds")
        print(f"{image['tag']:<34} {image['size'] / 2**20:>8.1f} "
              f"{image['containers']:>6}  {used}")
    total = sum(i["size"] for i in images)
    print(f"{len(images)} environment image(s), {total / 2**20:.1f} MiB beyond their bases")
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


def _opd_and_policy(args: argparse.Namespace, tasks: Any) -> tuple[Any, Any]:
    """The OPD config and the policy's agent factory, everything checked before a run folder
    exists: option values, the teacher, judge and policy specs (a model folder that is not
    there, a server that does not answer), and that the policy's tokenizer is the teacher's."""
    from opd_gym import specs
    from opd_gym.agents.policies import make_policy
    from opd_gym.opd.chat import check_tokenizers
    from opd_gym.opd.config import OPDConfig

    opd = None
    if not args.no_opd:  # every OPD option is checked here, before any model is loaded
        opd = OPDConfig(teacher=args.teacher, judge=args.judge, topk=args.topk,
                        votes=args.votes, hint_scope=args.hint_scope,
                        teacher_options=_teacher_options(args))
        specs.validate("teacher", args.teacher)
        specs.validate("judge", args.judge)
    if args.policy.startswith("hf:"):  # a served policy's factory checks its server itself
        specs.validate("policy", args.policy)
    args.teacher_name = args.teacher
    student = specs.policy_tokenizer(args.policy)
    if opd is not None:
        if args.teacher == "auto":
            args.teacher_name = specs.auto_teacher()
        teacher_model = specs.local_model(args.teacher_name)
        if student is not None and teacher_model is not None:
            check_tokenizers(student, f"hf:{teacher_model}",
                                   student_name=f"(policy {args.policy})",
                                   teacher_name=f"(teacher {args.teacher_name})")
        if student is not None:  # a vllm: teacher is checked when its client is built
            opd = opd.replace(student_tokenizer=student,
                              student_temperature=args.temperature or 1.0)
    make_agent = make_policy(
        args.policy, tasks, seed=args.seed,
        max_new_tokens=args.max_new_tokens, temperature=args.temperature, top_p=args.top_p,
        dtype=args.policy_dtype, device=args.policy_device,
        max_model_len=args.policy_max_model_len,
    )
    args.policy = specs.resolve_model(args.policy)  # as config.json records it: hf:PATH
    if opd is not None:
        args.teacher = specs.resolve_model(args.teacher_name)
        opd = opd.replace(teacher=args.teacher)
    return opd, make_agent


def _harness_agent(args: argparse.Namespace, make_agent: Any) -> Any:
    """With `--harness`: the harness's agent factory (its model calls go through a recording
    proxy to the `--policy vllm:URL` server); otherwise `make_agent` unchanged."""
    if not getattr(args, "harness", None):
        return make_agent
    from opd_gym.harness.loading import load_minisweagent
    from opd_gym.harness.minisweagent import MiniSweAgentConfig
    from opd_gym.harness.policy import HarnessFactory

    if not args.policy.startswith("vllm:"):
        raise ConfigError(f"--harness {args.harness} needs --policy vllm:URL (the model server "
                          f"the proxy records from), not {args.policy!r}")
    load_minisweagent()  # a missing install is refused before the run folder exists
    upstream = args.policy[len("vllm:"):].rstrip("/").removesuffix("/v1")
    return HarnessFactory(upstream, MiniSweAgentConfig(
        step_limit=args.max_turns, max_tokens=args.max_new_tokens,
        temperature=1.0 if args.temperature is None else args.temperature, seed=args.seed))


def cmd_rollout(args: argparse.Namespace) -> int:
    from opd_gym import specs
    from opd_gym.loggers import make_logger
    from opd_gym.rollout import RolloutConfig
    from opd_gym.runs import RunDirectory

    out = _check_rollout_args(args)
    args.tasks = _tasks_spec(args.tasks, args.schema, args.skip_invalid, _repos(args))
    if args.max_turns is None:  # a built-in suite's own limit, as gym.make of its id has
        args.max_turns = _suite_max_turns(args.tasks)
    tasks = _load_tasks(args.tasks)
    if args.task_ids:
        known = {t.id for t in tasks}
        unknown = sorted(set(args.task_ids) - known)
        if unknown:
            raise UserError(f"unknown task id(s) {', '.join(unknown)}: see `opd-gym tasks list`")
    if args.episodes is None:  # default: 8, or every (selected) task --repeat times
        count = len(args.task_ids) if args.task_ids else len(tasks)
        args.episodes = count * args.repeat if args.repeat > 1 else 8
    backend = specs.sandbox_backend(args.sandbox)
    if args.sandbox == "auto" and backend != "docker":
        print(
            f"notice: no Docker engine with the sandbox image here; using the {backend} "
            "backend" + (" (NO isolation)" if backend == "local" else ""),
            file=sys.stderr,
        )
    opd, make_agent = _opd_and_policy(args, tasks)
    make_agent = _harness_agent(args, make_agent)
    tool_format = _tool_format_name(args.tool_format or "hermes", args.policy)
    if tool_format != "hermes":
        print(f"opd-gym rollout: tool-call format {tool_format}", file=sys.stderr)
    demo = args.policy == "demo" and args.judge == "rule" and args.teacher_name in (
        "tiny", "smollm2")
    if demo and opd is not None and opd.hint_scope == "turn":
        # the scripted turns, teacher-forced under the teacher model without the hint, are the
        # student's logprobs (same forward batch), so the report's teacher-student charts fill
        opd = opd.replace(forced_student=True)
    config = RolloutConfig(
        out_dir=str(out),
        episodes=args.episodes,
        repeat=args.repeat,
        tasks=args.tasks,
        task_ids=args.task_ids,
        sandbox=backend,
        parallel=args.parallel,
        seed=args.seed,
        max_turns=args.max_turns,
        max_tool_output_chars=args.max_tool_output or None,
        setup_cache=args.setup_cache,
        resume=args.resume,
        verify_tasks=not args.no_verify,
        skip_unverifiable=args.skip_unverifiable,
        opd=opd is not None,
        opd_options=opd if opd is not None else {},
        tool_format=tool_format,
    )
    if opd is not None and not demo:  # the embedded demo: scripted turns that stay short
        _warn_context(args, config)
    if demo and opd is not None:
        note = DEMO_NOTE if args.teacher_name == "tiny" else SMOLLM2_DEMO_NOTE
        if opd.forced_student:
            note += ("; student logprobs: the teacher model's own on the scripted turns without "
                     "the hint (teacher-forced, not sampled)")
        print(f"opd-gym rollout: {note}", file=sys.stderr)
    run_config = {**vars(args), "func": None}
    _check_run_dir(out, run_config, resume=args.resume)  # before anything is written
    fresh = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    logger = None
    try:
        try:
            logger = make_logger(args.log, out, vars(args)) if args.log else None
        except ImportError as exc:  # an optional logger package is missing: say how to get it
            raise UserError(str(exc).splitlines()[0]) from None
        RunDirectory(out).write_config(run_config)
        summary = _run(args, config, make_agent, logger)
    except OPDGymError:  # refused before any episode (no engine, a missing package...)
        if fresh and not RunDirectory(out).has_rows():
            shutil.rmtree(out, ignore_errors=True)  # ours, made above: leave nothing behind
        raise
    finally:
        if logger is not None:
            logger.close()

    print(summary.table())
    if summary.interrupted:
        print(f"opd-gym: interrupted after {summary.episodes} of {args.episodes} episodes: "
              f"`opd-gym rollout --resume --out {out} ...` (same flags) plays the other "
              f"{max(args.episodes - summary.episodes, 0)}", file=sys.stderr)
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
    if summary.interrupted:
        return 130
    return 1 if summary.failures and not summary.episodes else 0


def _warn_context(args: argparse.Namespace, config: Any) -> None:
    """One stderr line before the first episode when an episode may outgrow the teacher's
    context window (its turns past it would go unscored); read from the model's config.json
    or the vLLM server's /v1/models, never by loading the model."""
    from opd_gym.runs.budget import context_warning, teacher_window

    window, source = teacher_window(args.teacher, _teacher_options(args))
    line = context_warning(window, source, max_turns=config.max_turns,
                           max_tool_output_chars=config.max_tool_output_chars,
                           max_new_tokens=args.max_new_tokens or 256)
    if line is not None:
        print(f"opd-gym rollout: {line}", file=sys.stderr)


def _run(args: argparse.Namespace, config: Any, make_agent: Any, logger: Any) -> Any:
    """Play the run, locally or on Ray; its summary."""
    from opd_gym.rollout import run_rollout

    def log(row, metrics):
        if logger is not None:
            logger.log(metrics, step=int(metrics["train/episodes"]))

    try:
        if args.ray is not None:  # Ray: the same run directory, resume and summary
            from opd_gym.distributed import RayOptions, run_ray_rollout

            return run_ray_rollout(
                config, make_agent, on_episode=log, progress=not args.quiet,
                options=RayOptions(address=None if args.ray == "local" else args.ray,
                                   workers=args.workers or 2,
                                   episodes_per_worker=args.episodes_per_worker or 2),
                grace=args.grace)
        return run_rollout(config, make_agent, on_episode=log, progress=not args.quiet,
                           grace=args.grace)
    except FileExistsError as exc:  # a finished run in --out without --resume
        raise UserError(str(exc)) from None


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


def _tasks_spec(source: str, schema: str | None, skip_invalid: bool = False,
                repos: Any = None) -> Any:
    """`--tasks`/`--schema`/`--skip-invalid`/`--repo(s)` as a task spec: the plain string, or
    a loader mapping.

    `hf:NAME[@SPLIT]` is a Hugging Face dataset (needs the `datasets` extra); a file's schema
    is detected from its rows unless `--schema` names it (a `tasks synth` manifest by its
    fields). `repos` (from `_repos`) says where SWE-bench-style rows' repositories are.
    """
    extra: dict[str, Any] = {"skip_invalid": True} if skip_invalid else {}
    if repos is not None:
        if source.startswith("hf:"):
            raise UserError("--repo/--repos apply to a file of SWE-bench-style rows, not to "
                            "an hf: dataset")
        extra["repos"] = repos
    if source.startswith("hf:"):
        name, _, split = source[3:].partition("@")
        return {"dataset": name, "schema": schema, "split": split or "test", **extra}
    if schema in (None, "auto") and not extra:
        return source
    return {"source": source, "schema": schema, **extra}


def _suite_max_turns(spec: Any) -> int:
    """The `max_turns` of a built-in suite's env.toml (what its registered env id uses, e.g.
    30 for `repo`); 15 for any other task source."""
    from opd_gym.tasks.suite import available_suites, load_env_spec

    if isinstance(spec, str) and spec in available_suites():
        try:
            return int(load_env_spec(spec).get("max_turns", DEFAULT_MAX_TURNS))
        except FileNotFoundError:
            pass
    return DEFAULT_MAX_TURNS


DEFAULT_MAX_TURNS = 15


def _repos(args: argparse.Namespace) -> str | dict[str, str] | None:
    """Where SWE-bench-style rows' repositories are: `--repos FOLDER`, or the
    `--repo OWNER/NAME=PATH` pairs as a mapping (None when neither is given)."""
    pairs, folder = getattr(args, "repo", None), getattr(args, "repos", None)
    if pairs and folder:
        raise UserError("give --repos FOLDER or --repo OWNER/NAME=PATH flags, not both")
    if folder:
        if not Path(folder).is_dir():
            raise UserError(f"--repos {folder!r} is not a folder (it holds one repository "
                            "per name: owner/name, owner__name or name)")
        return str(Path(folder).resolve())
    if not pairs:
        return None
    repos: dict[str, str] = {}
    for pair in pairs:
        name, sep, path = pair.partition("=")
        if not sep or not name.strip() or not path.strip():
            raise UserError(f"--repo {pair!r}: give OWNER/NAME=PATH (a clone, bare "
                            "repository, bundle or tarball holding the base commits)")
        if name.strip() in repos:
            raise UserError(f"--repo names {name.strip()!r} twice")
        repos[name.strip()] = str(Path(path.strip()).expanduser().resolve())
    return repos


def _setup_cache_flag(parser: argparse.ArgumentParser) -> None:
    """`--setup-cache`: what repository tasks' setup steps install from (at /opd-cache)."""
    parser.add_argument("--setup-cache", metavar="DIR", type=_folder,
                        help="the folder environment images' setup steps install from, "
                        "mounted read-only at /opd-cache (default: the pinned sdists that "
                        "scripts/setup.sh keeps)")


def _folder(text: str) -> str:
    """argparse type: an existing folder."""
    if not Path(text).is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is not a folder")
    return text


def _repo_flags(parser: argparse.ArgumentParser) -> None:
    """`--repo` and `--repos`: the repositories SWE-bench-style task rows name."""
    parser.add_argument("--repo", action="append", metavar="OWNER/NAME=PATH",
                        help="SWE-bench/SWE-Gym/SWE-smith rows: the git history of a "
                        "repository they name (a clone, bare repository, bundle or tarball "
                        "with the base commits); repeatable")
    parser.add_argument("--repos", metavar="FOLDER",
                        help="SWE-bench-style rows: a folder holding each repository they "
                        "name, as owner/name, owner__name or name (optionally .git, .bundle, "
                        ".tar.gz)")


# Flags that say how a run is played or shown, not which episodes it plays: `--resume` may
# change them; any other difference from the run's config.json is refused.
RESUME_MAY_CHANGE = frozenset({
    "resume", "out", "quiet", "no_report", "log", "episodes", "parallel", "ray", "workers",
    "episodes_per_worker", "grace", "func", "command", "no_verify",
})


def _positive(text: str) -> int:
    """argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _output_chars(text: str) -> int:
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


def _seconds(text: str) -> float:
    """argparse type: a number of seconds >= 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text}")
    return value


def _with_config_file(parser: argparse.ArgumentParser, argv: Sequence[str] | None,
                      path: str) -> argparse.Namespace:
    """The rollout's flags with FILE's values as defaults: a flag given on the command line
    wins, a bad key or value in FILE is refused naming it (`opd_gym.runs.config`)."""
    from opd_gym.runs.config import read_config_file

    roll = next(action for action in parser._actions
                if isinstance(action, argparse._SubParsersAction)).choices["rollout"]
    roll.set_defaults(**read_config_file(path, roll._actions))
    args = parser.parse_args(argv)
    del args.config  # its values are in args now, and so in the run's config.json
    return args


def _check_rollout_args(args: argparse.Namespace) -> Path:
    """Refuse conflicting flags and an unusable `--out` before anything is loaded or written;
    returns the output directory."""
    if args.resume and not args.out:
        raise UserError("--resume needs --out: the run directory to continue")
    if args.ray is None:
        given = [flag for flag, value in (("--workers", args.workers),
                                          ("--episodes-per-worker", args.episodes_per_worker))
                 if value is not None]
        if given:
            raise UserError(f"{' and '.join(given)} only apply with --ray")
    out = Path(args.out) if args.out else Path("runs") / time.strftime("%Y%m%d-%H%M%S")
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {str(out)!r} is a file, not a directory")
    existing = out
    while not existing.exists():  # the nearest existing folder must let us create the rest
        existing = existing.parent
    if not existing.is_dir():
        raise UserError(f"--out {str(out)!r}: {str(existing)!r} is a file, not a directory")
    try:  # a probe folder, removed at once: permissions, read-only mounts, /proc alike
        os.rmdir(tempfile.mkdtemp(prefix=".opd-gym-probe-", dir=existing))
    except OSError as exc:
        raise UserError(f"--out {str(out)!r}: cannot write in {str(existing)!r} "
                        f"({exc.strerror or exc})") from None
    return out


def _check_run_dir(out: Path, config: dict[str, Any], *, resume: bool) -> None:
    """A new run needs an empty `--out`; `--resume` needs the run's own config (the keys
    that decide its episodes equal to config.json's, which are named when they differ)."""
    from opd_gym.runs import RunDirectory

    run = RunDirectory(out)
    if not resume:
        if run.has_rows():
            raise UserError(f"{run.trajectories} already has episodes: pass --resume to "
                            "continue that run or choose another --out")
        return
    try:
        before = run.read_config()
    except OPDGymError as exc:
        raise UserError(f"--resume: {exc}") from None
    if before is None:
        return
    now = json.loads(json.dumps(config, default=str))  # as config.json would hold it
    differ = sorted(key for key in set(before) & set(now)
                    if key not in RESUME_MAY_CHANGE and before[key] != now[key])
    if differ:
        shown = "; ".join(f"{key}: {before[key]!r} in the run, {now[key]!r} now"
                          for key in differ[:6])
        raise UserError(f"--resume with a config that differs from {run.config_path} "
                        f"({shown}): use the run's flags, or another --out for a new run")


def _load_tasks(spec: Any):
    from opd_gym.tasks.resolve import resolve_tasks

    shown = spec if isinstance(spec, str) else spec.get("source") or f"hf:{spec.get('dataset')}"
    try:
        tasks = resolve_tasks(spec)
        skipped = getattr(tasks, "skipped", [])
        if skipped:
            print(f"opd-gym: skipped {len(skipped)} invalid task row(s) of {shown!r} "
                  f"(first: {skipped[0]})", file=sys.stderr)
        return tasks
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
    source = args.tasks
    if args.tasks_command == "validate":  # `tasks validate FILE` (old form) or `--tasks FILE`
        if args.path and args.tasks and args.path != args.tasks:
            raise UserError("give the task source once: `--tasks SOURCE` (or the old "
                            "positional form), not both")
        source = args.tasks or args.path or "coding"
    tasks = _load_tasks(_tasks_spec(source, args.schema, args.skip_invalid, _repos(args)))
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
    return _validate(tasks, args.sandbox, args.workers)


def _validate(tasks, sandbox: str, workers: int = 4) -> int:
    """Grade every task's untouched starter (must score 0), reference (must score 1.0) and a
    wrong answer (the reference with perturbed answers: must score below 0.5, else its tests
    check format only); print a table, rc 1 if any task fails a check."""
    from opd_gym.grading import Grader
    from opd_gym.sandboxes import make_pool
    from opd_gym.tasks.validate import WRONG_LIMIT, check_tasks, table_header, table_row

    if workers < 1:
        raise UserError("--workers must be at least 1")
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


def cmd_check_suite(args: argparse.Namespace) -> int:
    """`opd-gym tasks check-suite SDIST...`: the grader against plain pytest, id by id."""
    from opd_gym.grading import Grader
    from opd_gym.grading.suite_check import check_project, prepare, table
    from opd_gym.sandboxes import make_pool
    from opd_gym.sandboxes.image import DEFAULT_IMAGE
    from opd_gym.tasks.sdist import read_sdist

    sdists = [read_sdist(Path(p)) for p in args.sdists]  # refuses an unreadable one first
    options = _pytest_options(args.pytest_options)
    image = _suite_image(args.setup, args.setup_cache) if args.setup else DEFAULT_IMAGE
    checks = []
    with make_pool({"backend": "docker", "image": image}, size=2) as pool:
        grader = Grader(pool)
        for sdist in sdists:
            project = prepare(f"{sdist.name}-{sdist.version}", sdist.files, image,
                              options=options)
            check = check_project(project, grader, image, test_dirs=args.tests,
                                  timeout=args.timeout)
            checks.append(check)
            print(f"[check-suite] {check.name}: {check.agree}/{check.ids} ids agree",
                  flush=True)
    print(table(checks))
    if args.json:
        _write_json(Path(args.json), {"suites": [c.to_dict() for c in checks]})
        print(f"[check-suite] per-id verdicts written to {args.json}")
    bad = [c for c in checks if not c.ok]
    if bad:
        print(f"{len(bad)} of {len(checks)} suites fail the check (plain pytest's verdicts, and "
              "a grade of 1.0 with earning tests for the unmodified code):")
        for check in bad:
            print(f"  {check.name}: {'; '.join(check.problems)}")
        return 1
    print(f"{len(checks)} of {len(checks)} suites agree with plain pytest, and the unmodified "
          "code of each scores 1.0")
    return 0


def _write_json(path: Path, data: Any) -> None:
    """`data` as JSON at `path`, whole or not at all (a temporary file renamed)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}.part")
    partial.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    os.replace(partial, path)


def _pytest_options(text: str | None) -> list[str]:
    """`--pytest-options` as words, test paths and outcome-hiding options refused."""
    import shlex

    from opd_gym.tasks.pytest_config import options_only

    if not text:
        return []
    try:
        return options_only(shlex.split(text), "--pytest-options")
    except ValueError as exc:  # a DatasetError, or shlex's unbalanced quote
        raise UserError(f"--pytest-options: {exc}") from None


def _suite_image(setup: list[str], cache: str | None) -> str:
    """The environment image `setup` builds on the sandbox image (offline, `cache` at
    /opd-cache): what the suites' dependencies and plugins need, for both runs."""
    from opd_gym.sandboxes.docker import DockerEngine
    from opd_gym.sandboxes.env_image import EnvironmentSpec, ImageCache
    from opd_gym.sandboxes.image import DEFAULT_IMAGE
    from opd_gym.tasks.libraries import sdist_cache

    spec = EnvironmentSpec(setup=tuple(setup), base=DEFAULT_IMAGE,
                           cache_dir=Path(cache) if cache else sdist_cache())
    report = ImageCache(DockerEngine()).ensure(spec)
    print(f"[check-suite] environment image {report.tag} "
          f"({'built' if report.built else 'found'}, {len(setup)} setup step(s))", flush=True)
    return report.tag


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


def cmd_report(args: argparse.Namespace) -> int:
    """One run: its report.html (like `view`); two or more: a side-by-side comparison."""
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
        import webbrowser

        webbrowser.open(path.resolve().as_uri())
    return 0


def cmd_export(args: argparse.Namespace) -> int:
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


class _Parser(argparse.ArgumentParser):
    """argparse that reports a bad flag in one line (plus where to look) instead of usage."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


TASKS_HELP = ("suite name, task folder, task or dataset file (JSONL/JSON/YAML/TOML in our schema "
              "or HumanEval, MBPP, APPS, CodeContests rows; SWE-bench/SWE-Gym/SWE-smith rows "
              "with --repo/--repos), a `tasks synth` manifest, or hf:NAME[@SPLIT]")
SCHEMA_CHOICES = ["auto", "opd_gym", "humaneval", "mbpp", "apps", "code_contests",
                  "swebench"]
SCHEMA_HELP = "the rows' schema (default: detected from the first row)"
SKIP_HELP = "skip invalid task rows (how many is reported) instead of refusing the file"


def build_parser() -> argparse.ArgumentParser:
    from opd_gym import specs
    from opd_gym.opd.config import OPDConfig
    from opd_gym.opd.scorer import SCOPES
    from opd_gym.runs.interrupt import DEFAULT_GRACE_S

    OPD_DEFAULTS = OPDConfig()  # noqa: N806  (one default per option, shared with the API)
    SANDBOXES = list(specs.KINDS["sandbox"][0])  # noqa: N806
    parser = _Parser(prog="opd-gym", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    roll = sub.add_parser("rollout", help="play episodes and write OPD-scored trajectories")
    roll.add_argument("--config", metavar="FILE",
                      help="take flags from FILE: a run's config.json, or JSON/TOML with the "
                      "same keys; flags given here override it")
    roll.add_argument("--episodes", type=_positive,
                      help="episodes to play (default 8, or every task --repeat times)")
    roll.add_argument("--repeat", type=_positive, default=1,
                      help="rollouts per task in a row, each with its own seed (a group: "
                      "the summary adds per-task mean/std and pass@k)")
    roll.add_argument("--tasks", default="coding", help=TASKS_HELP)
    roll.add_argument("--schema", choices=SCHEMA_CHOICES, help=SCHEMA_HELP)
    roll.add_argument("--skip-invalid", action="store_true", help=SKIP_HELP)
    roll.add_argument("--skip-unverifiable", action="store_true",
                      help="play without the tasks no grade can vouch for (no test could earn: "
                      "every answer would score 0), saying how many, instead of refusing the "
                      "run; each task the run plays is calibrated before the first episode")
    roll.add_argument("--no-verify", action="store_true",
                      help="start without calibrating the tasks first (an unverifiable task's "
                      "grades are then infra errors, left out of the summary and exports)")
    _repo_flags(roll)
    _setup_cache_flag(roll)
    roll.add_argument("--task-ids", type=lambda s: s.split(","), help="comma-separated ids")
    roll.add_argument("--policy", default="demo", help=specs.known("policy"))
    roll.add_argument("--harness", choices=["mini-swe-agent"],
                      help="an agent harness plays, its model calls recorded by the proxy in front "
                      "of the --policy vllm:URL server (docs/harness.md)")
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
    roll.add_argument("--parallel", type=_positive, default=2)
    roll.add_argument("--ray", nargs="?", const="local", default=None, metavar="ADDRESS",
                      help="play on Ray: 'auto', a cluster address, or (no value) a local "
                      "cluster started here (extra 'ray'; see docs/ray.md)")
    roll.add_argument("--workers", type=_positive,
                      help="Ray worker actors (with --ray; default 2)")
    roll.add_argument("--episodes-per-worker", type=_positive,
                      help="episodes in flight per Ray worker (with --ray; default 2)")
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
    roll.add_argument("--max-turns", type=_positive,
                      help="assistant turns per episode (default: a built-in suite's own, "
                      "as its env id has: 30 for repo; else 15)")
    roll.add_argument("--max-tool-output", type=_output_chars, default=10_000, metavar="CHARS",
                      help="characters of one tool result the policy sees (default 10000; "
                      "0: no limit); longer output keeps its head and tail around a marker")
    roll.add_argument("--sandbox", default="auto", choices=SANDBOXES)
    roll.add_argument("--out", help="output directory (default runs/<timestamp>)")
    roll.add_argument("--resume", action="store_true",
                      help="continue the run in --out: play the episodes it has not played "
                      "(missing, interrupted, infra errors); its flags must match config.json")
    roll.add_argument("--grace", type=_seconds, default=DEFAULT_GRACE_S,
                      help="after the first Ctrl-C, seconds running episodes may take to "
                      f"finish before they are cancelled (default {DEFAULT_GRACE_S:g})")
    roll.add_argument("--log", choices=["jsonl", "wandb", "tensorboard"])
    roll.add_argument("--no-report", action="store_true", help="skip report.html")
    roll.add_argument("--quiet", action="store_true", help="no progress bar")
    roll.set_defaults(func=cmd_rollout)

    tasks = sub.add_parser("tasks", help="list, show and validate tasks")
    tsub = tasks.add_subparsers(dest="tasks_command", required=True, parser_class=_Parser)
    tlist = tsub.add_parser("list", help="the tasks of a suite or file")
    tlist.add_argument("--tasks", default="coding", help=TASKS_HELP)
    tlist.add_argument("--schema", choices=SCHEMA_CHOICES, help=SCHEMA_HELP)
    tlist.add_argument("--skip-invalid", action="store_true", help=SKIP_HELP)
    _repo_flags(tlist)
    tshow = tsub.add_parser("show", help="one task's prompt and files")
    tshow.add_argument("id")
    tshow.add_argument("--tasks", default="coding", help=TASKS_HELP)
    tshow.add_argument("--schema", choices=SCHEMA_CHOICES, help=SCHEMA_HELP)
    tshow.add_argument("--skip-invalid", action="store_true", help=SKIP_HELP)
    _repo_flags(tshow)
    tval = tsub.add_parser("validate", help="grade each task's starter (must score 0), "
                           "reference (1.0) and a wrong answer (below 0.5)")
    tval.add_argument("path", nargs="?", help="the task source (old form of --tasks)")
    tval.add_argument("--tasks", help=TASKS_HELP + " (default coding)")
    tval.add_argument("--schema", choices=SCHEMA_CHOICES, help=SCHEMA_HELP)
    tval.add_argument("--skip-invalid", action="store_true", help=SKIP_HELP)
    _repo_flags(tval)
    tval.add_argument("--sandbox", default="auto", choices=SANDBOXES)
    tval.add_argument("--workers", type=int, default=4, help="gradings run at once")
    tsyn = tsub.add_parser("synth", help="synthesize validated bug-fix tasks from a project "
                           "that ships its pytest suite (see opd_gym/tasks/synth.py)")
    tsyn.add_argument("source", help="an sdist (.tar.gz), a pinned library name, or a folder")
    tsyn.add_argument("-o", "--output", help="manifest to write (default NAME-synth.json)")
    tsyn.add_argument("--max", type=int, default=10, help="tasks to keep (default 10)")
    tsyn.add_argument("--seed", type=int, default=0, help="the order mutations are tried in")
    tsyn.add_argument("--workers", type=int, default=2, help="validations run at once")
    tsyn.add_argument("--ray", nargs="?", const="local", default=None, metavar="ADDRESS",
                      help="validate on --workers Ray actors: a local cluster, or the one at "
                      "ADDRESS (auto, host:port, ray://...); the same tasks as without")
    tsyn.set_defaults(func=lambda a: __import__("opd_gym.tasks.synth_cli", fromlist=["x"])
                      .synth_command(a.source, a.output, a.max, a.seed, "docker", a.workers,
                                     ray=a.ray is not None,
                                     address=None if a.ray in (None, "local") else a.ray))
    tcheck = tsub.add_parser("check-suite", help="grade projects' own test suites (sdists) "
                             "and compare every test id with plain pytest: a table")
    tcheck.add_argument("sdists", nargs="+", metavar="SDIST",
                        help="an sdist (.tar.gz or .zip) whose tests are in it")
    tcheck.add_argument("--tests", action="append", metavar="DIR",
                        help="the suite's folder or file (repeatable; default: found from "
                             "the ids plain pytest collects)")
    tcheck.add_argument("--timeout", type=_seconds, default=300.0,
                        help="seconds each grading run may take (default 300)")
    tcheck.add_argument("--setup", action="append", metavar="CMD",
                        help="a step that builds the image both runs use (offline, as root, "
                        "the setup cache at /opd-cache): the suite's plugins and test "
                        "dependencies, e.g. 'pip install --no-index --find-links /opd-cache "
                        "freezegun'; repeatable")
    _setup_cache_flag(tcheck)
    tcheck.add_argument("--json", metavar="FILE",
                        help="also write every id's verdicts (plain pytest's, the grader's, "
                        "the scoring rule that decided whether it earns) and each suite's "
                        "figures to FILE")
    tcheck.add_argument("--pytest-options", metavar="OPTIONS",
                        help="options the project passes outside its pytest config (tox's "
                        "command line, CI scripts), e.g. --pytest-options=--doctest-modules")
    tcheck.set_defaults(func=cmd_check_suite)
    tasks.set_defaults(func=cmd_tasks)

    view = sub.add_parser("view", help="write (and open) the HTML report of a run")
    view.add_argument("run_dir")
    view.add_argument("--tokenizer", help="tiny | hf:PATH, to show token text")
    view.add_argument("--open", action="store_true", help="open it in a browser")
    view.set_defaults(func=cmd_view)

    report = sub.add_parser("report", help="one run's HTML report, or two or more runs "
                            "compared side by side")
    report.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    report.add_argument("--out", help="the HTML file to write (default: RUN_DIR/report.html "
                        "for one run, compare.html for several)")
    report.add_argument("--tokenizer", help="tiny | hf:PATH, to show token text (one run)")
    report.add_argument("--open", action="store_true", help="open it in a browser")
    report.set_defaults(func=cmd_report)

    export = sub.add_parser("export", help="export a run to a trainer format, or its "
                            "repository-task diffs as SWE-bench predictions")
    export.add_argument("run_dir")
    from opd_gym.exports.run import FORMATS as EXPORT_FORMATS

    export.add_argument("--to", required=True, choices=EXPORT_FORMATS)
    export.add_argument("--out", help="output file")
    export.add_argument("--tokenizer", help="tiny | hf:PATH (Atropos needs prompt ids)")
    export.add_argument("--model-name", help="swebench-predictions: model_name_or_path "
                        "(default: the run's policy, from its config.json)")
    inexact = export.add_mutually_exclusive_group()
    inexact.add_argument("--allow-reconstructed", action="store_true", help="also write turns "
                         "scored on a context rebuilt from the transcript (no prompt ids were "
                         "recorded), marked \"reconstructed\": true (default: refuse them)")
    inexact.add_argument("--drop-reconstructed", action="store_true", help="leave those turns "
                         "out and say how many")
    export.set_defaults(func=cmd_export)

    sandbox = sub.add_parser("sandbox", help="build, check and clean the sandbox")
    ssub = sandbox.add_subparsers(dest="sandbox_command", required=True, parser_class=_Parser)
    build = ssub.add_parser("build", help="build the sandbox image (registry or offline)")
    build.add_argument("--method", choices=["auto", "dockerfile", "offline"], default="auto")
    build.add_argument("--image", help="image name (default: the library's)")
    build.add_argument("--force", action="store_true", help="rebuild even if present")
    build.add_argument("--rootfs-only", action="store_true", help="only the bwrap rootfs")
    build.add_argument("--tasks", help="also build the environment images these tasks need "
                       "(" + TASKS_HELP + ")")
    _repo_flags(build)
    build.add_argument("--budget", help="disk kept for environment images, e.g. 20g (least "
                       "recently used beyond it are removed; default 20g)")
    build.add_argument("--quiet", action="store_true", help="no progress bar")
    _setup_cache_flag(build)
    build.set_defaults(func=cmd_build)
    doctor = ssub.add_parser("doctor", help="check the backends and run a smoke session")
    doctor.add_argument("--backend", action="append", choices=SANDBOXES[1:])
    doctor.set_defaults(func=cmd_doctor)
    images = ssub.add_parser("images", help="list the environment images (repository "
                             "tasks' setup steps), least recently used first")
    images.add_argument("--prune", metavar="BUDGET", help="first remove the least recently "
                        "used until the rest fit BUDGET (e.g. 5g; 0 removes every image not "
                        "in use)")
    images.set_defaults(func=cmd_images)
    prune = ssub.add_parser("prune", help="remove containers whose owner process is gone")
    prune.add_argument("--all", action="store_true", help="remove every opd_gym container")
    prune.set_defaults(func=cmd_prune)
    _serve_parser(sub)
    _proxy_parser(sub)
    return parser


def _serve_parser(sub: Any) -> None:
    """`opd-gym serve`: the env over OpenEnv's protocol (flags in `opd_gym.serve.command`)."""
    from opd_gym.serve.command import add_arguments, cmd_serve

    serve = sub.add_parser("serve", help="serve the env (with or without OPD) over OpenEnv's "
                           "protocol to remote clients (extra 'serve'; see docs/serving.md)")
    add_arguments(serve)
    serve.set_defaults(func=cmd_serve)


def _proxy_parser(sub: Any) -> None:
    """`opd-gym proxy`: a recording OpenAI-compatible model proxy on loopback (docs/proxy.md)."""
    from opd_gym.proxy.cli import add_arguments, run_proxy

    proxy = sub.add_parser("proxy", help="serve a recording OpenAI-compatible model proxy on "
                           "loopback (exact ids and logprobs of each call, per episode)")
    add_arguments(proxy)
    proxy.set_defaults(func=run_proxy)


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
    parser = build_parser()
    args = parser.parse_args(argv)
    _quiet_third_party()
    try:
        config = vars(args).pop("config", None)  # never in config.json: its values are
        if config is not None:
            args = _with_config_file(parser, argv, config)
        return args.func(args)
    except OPDGymError as exc:
        print(f"opd-gym: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def run() -> None:
    """The `opd-gym` command: `main`'s exit code. After an interrupted run whose cancelled
    episode threads are still alive (a second Ctrl-C abandons them mid-call), the process
    exits without the interpreter's teardown: its files are written and closed by then, and
    joining those threads, or a native runtime tearing them down, would hang or abort
    ("terminate called without an active exception", SIGABRT instead of 130)."""
    code = main()
    if code == 130 and any(t.is_alive() for t in threading.enumerate()
                           if t is not threading.main_thread()):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(130)
    sys.exit(code)


if __name__ == "__main__":
    run()
