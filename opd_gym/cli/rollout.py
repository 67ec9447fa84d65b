"""`opd-gym rollout`: play episodes and write OPD-scored trajectories to a run directory.

The flags become one `RolloutPlan` (the typed `RolloutConfig`, the agent factory, and the
run's config.json), checked before the run folder exists; `args` is read, never rewritten.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opd_gym.cli import options
from opd_gym.cli.errors import UserError
from opd_gym.errors import ConfigError, OPDGymError

DEMO_NOTE = (
    "pipeline demo: scripted policy with planted mistakes, rule judge, and a tiny randomly "
    "initialised model built locally as teacher (its logprobs are not from a trained model)"
)

SMOLLM2_DEMO_NOTE = (
    "pipeline demo: scripted policy with planted mistakes, rule judge, and SmolLM2-135M-Instruct "
    "(a real instruction-tuned model) as teacher"
)

# Flags that say how a run is played or shown, not which episodes it plays: `--resume` may
# change them; any other difference from the run's config.json is refused.
RESUME_MAY_CHANGE = frozenset({
    "resume", "out", "quiet", "no_report", "log", "episodes", "parallel", "ray", "workers",
    "episodes_per_worker", "grace", "func", "command", "no_verify", "calibrations",
})


def add_arguments(roll: argparse.ArgumentParser) -> None:
    """The flags of `opd-gym rollout`."""
    from opd_gym import specs

    roll.add_argument("--config", metavar="FILE",
                      help="take flags from FILE: a run's config.json, or JSON/TOML with the "
                      "same keys; flags given here override it")
    roll.add_argument("--episodes", type=options.positive,
                      help="episodes to play (default 8, or every task --repeat times)")
    roll.add_argument("--repeat", type=options.positive, default=1,
                      help="rollouts per task in a row, each with its own seed (a group: "
                      "the summary adds per-task mean/std and pass@k)")
    options.task_source(roll)
    options.verification(roll)
    options.setup_cache(roll)
    options.calibrations(roll)
    roll.add_argument("--task-ids", type=options.id_list, help=options.TASK_IDS_HELP)
    roll.add_argument("--policy", default="demo", help=specs.known("policy"))
    roll.add_argument("--harness", choices=["mini-swe-agent"],
                      help="an agent harness plays, its model calls recorded by the proxy in front "
                      "of the --policy vllm:URL server (docs/harness.md)")
    options.opd_options(roll)
    options.tool_format(roll)
    roll.add_argument("--no-opd", action="store_true", help="skip judging and teacher scoring")
    roll.add_argument("--parallel", type=options.positive, default=2)
    options.ray(roll)
    roll.add_argument("--workers", type=options.positive,
                      help="Ray worker actors (with --ray; default 2)")
    roll.add_argument("--episodes-per-worker", type=options.positive,
                      help="episodes in flight per Ray worker (with --ray; default 2)")
    roll.add_argument("--seed", type=int, default=0,
                      help="episode i uses seed+i (env and the policy's sampling)")
    roll.add_argument("--max-new-tokens", type=int, help="policy: tokens sampled per turn")
    roll.add_argument("--temperature", type=float, help="policy: sampling temperature")
    roll.add_argument("--top-p", type=float, help="policy: nucleus sampling mass")
    roll.add_argument("--policy-dtype", help="hf: policy dtype (default: the checkpoint's)")
    roll.add_argument("--policy-device", help="hf: policy device, e.g. cuda:0")
    roll.add_argument("--policy-max-model-len", type=int, help="hf: prompt + turn token cap")
    options.limits(roll)
    options.sandbox(roll)
    roll.add_argument("--out", help="output directory (default runs/<timestamp>)")
    roll.add_argument("--resume", action="store_true",
                      help="continue the run in --out: play the episodes it has not played "
                      "(missing, interrupted, infra errors); its flags must match config.json")
    roll.add_argument("--log", choices=["jsonl", "wandb", "tensorboard"])
    roll.add_argument("--no-report", action="store_true", help="skip report.html")
    options.quiet(roll)


@dataclass
class Models:
    """What the policy, teacher and judge flags resolve to."""

    opd: Any  # the checked OPDConfig, or None with --no-opd
    make_agent: Any
    policy: str  # as config.json records it (hf:PATH for a named model)
    teacher: str  # likewise; "auto" resolved
    teacher_name: str  # the name the user's teacher flag meant ("auto" resolved)


@dataclass
class RolloutPlan:
    """Everything a rollout needs, built once from the flags."""

    out: Path
    config: Any  # RolloutConfig
    run_config: dict[str, Any]  # what config.json holds (and --resume compares)
    models: Models
    note: str | None  # the demo's stderr line


def resolve_models(args: argparse.Namespace, tasks: Any) -> Models:
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
                        teacher_options=options.teacher_options(args))
        specs.validate("teacher", args.teacher)
        specs.validate("judge", args.judge)
    if args.policy.startswith("hf:"):  # a served policy's factory checks its server itself
        specs.validate("policy", args.policy)
    teacher_name = args.teacher
    student = specs.policy_tokenizer(args.policy)
    if opd is not None:
        if args.teacher == "auto":
            teacher_name = specs.auto_teacher()
        teacher_model = specs.local_model(teacher_name)
        if student is not None and teacher_model is not None:
            check_tokenizers(student, f"hf:{teacher_model}",
                             student_name=f"(policy {args.policy})",
                             teacher_name=f"(teacher {teacher_name})")
        if student is not None:  # a vllm: teacher is checked when its client is built
            opd = opd.replace(student_tokenizer=student,
                              student_temperature=args.temperature or 1.0)
    make_agent = make_policy(
        args.policy, tasks, seed=args.seed,
        max_new_tokens=args.max_new_tokens, temperature=args.temperature, top_p=args.top_p,
        dtype=args.policy_dtype, device=args.policy_device,
        max_model_len=args.policy_max_model_len,
    )
    teacher = args.teacher
    if opd is not None:
        teacher = specs.resolve_model(teacher_name)
        opd = opd.replace(teacher=teacher)
    return Models(opd=opd, make_agent=harness_agent(args, make_agent), teacher=teacher,
                  policy=specs.resolve_model(args.policy), teacher_name=teacher_name)


def harness_agent(args: argparse.Namespace, make_agent: Any) -> Any:
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
        step_limit=max_turns(args), max_tokens=args.max_new_tokens,
        temperature=1.0 if args.temperature is None else args.temperature, seed=args.seed))


def max_turns(args: argparse.Namespace) -> int:
    """`--max-turns`, or the task source's own limit (a built-in suite's, as gym.make of its
    env id has)."""
    return args.max_turns or options.suite_max_turns(options.task_spec(args))


def plan(args: argparse.Namespace) -> RolloutPlan:
    """The rollout the flags describe, checked, with nothing written yet."""
    from opd_gym import specs
    from opd_gym.rollout import RolloutConfig

    out = check_out(args)
    if args.calibrations is not None:  # a store we cannot use is refused before anything
        from opd_gym.grading.store import CalibrationStore

        CalibrationStore.open(args.calibrations)
    spec = options.task_spec(args)
    tasks = options.load_tasks(spec)
    if args.task_ids:
        unknown = sorted(set(args.task_ids) - {t.id for t in tasks})
        if unknown:
            raise UserError(f"unknown task id(s) {', '.join(unknown)}: see `opd-gym tasks list`")
    episodes = args.episodes
    if episodes is None:  # default: 8, or every (selected) task --repeat times
        count = len(args.task_ids) if args.task_ids else len(tasks)
        episodes = count * args.repeat if args.repeat > 1 else 8
    backend = specs.sandbox_backend(args.sandbox)
    if args.sandbox == "auto" and backend != "docker":
        print(
            f"notice: no Docker engine with the sandbox image here; using the {backend} "
            "backend" + (" (NO isolation)" if backend == "local" else ""),
            file=sys.stderr,
        )
    models = resolve_models(args, tasks)
    opd = models.opd
    tool_format = options.tool_format_name(args.tool_format or "hermes", models.policy)
    if tool_format != "hermes":
        print(f"opd-gym rollout: tool-call format {tool_format}", file=sys.stderr)
    demo = args.policy == "demo" and args.judge == "rule" and models.teacher_name in (
        "tiny", "smollm2")
    if demo and opd is not None and opd.hint_scope == "turn":
        # the scripted turns, teacher-forced under the teacher model without the hint, are the
        # student's logprobs (same forward batch), so the report's teacher-student charts fill
        opd = opd.replace(forced_student=True)
        models.opd = opd
    turns = max_turns(args)
    config = RolloutConfig(
        out_dir=str(out), episodes=episodes, repeat=args.repeat, tasks=spec,
        task_ids=args.task_ids, sandbox=backend, parallel=args.parallel, seed=args.seed,
        max_turns=turns, max_tool_output_chars=args.max_tool_output or None,
        setup_cache=args.setup_cache, resume=args.resume, verify_tasks=not args.no_verify,
        skip_unverifiable=args.skip_unverifiable, calibrations=args.calibrations,
        opd=opd is not None,
        opd_options=opd if opd is not None else {}, tool_format=tool_format,
    )
    note = None
    if demo and opd is not None:
        note = DEMO_NOTE if models.teacher_name == "tiny" else SMOLLM2_DEMO_NOTE
        if opd.forced_student:
            note += ("; student logprobs: the teacher model's own on the scripted turns without "
                     "the hint (teacher-forced, not sampled)")
    run_config = {key: value for key, value in vars(args).items() if key != "config"}
    run_config.update(func=None, tasks=spec, max_turns=turns, episodes=episodes,
                      policy=models.policy, teacher=models.teacher,
                      teacher_name=models.teacher_name)
    return RolloutPlan(out=out, config=config, run_config=run_config, models=models, note=note)


def run(args: argparse.Namespace) -> int:
    from opd_gym import specs
    from opd_gym.loggers import make_logger
    from opd_gym.runs import RunDirectory

    planned = plan(args)
    out, config, opd = planned.out, planned.config, planned.models.opd
    if opd is not None and planned.note is None:  # the embedded demo: turns that stay short
        warn_context(args, config)
    if planned.note is not None:
        print(f"opd-gym rollout: {planned.note}", file=sys.stderr)
    check_run_dir(out, planned.run_config, resume=args.resume)  # before anything is written
    fresh = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    logger = None
    try:
        try:
            logger = make_logger(args.log, out, planned.run_config) if args.log else None
        except ImportError as exc:  # an optional logger package is missing: say how to get it
            raise UserError(str(exc).splitlines()[0]) from None
        RunDirectory(out).write_config(planned.run_config)
        summary = play(args, config, planned.models.make_agent, logger)
    except OPDGymError:  # refused before any episode (no engine, a missing package...)
        if fresh and not RunDirectory(out).has_rows():
            shutil.rmtree(out, ignore_errors=True)  # ours, made above: leave nothing behind
        raise
    finally:
        if logger is not None:
            logger.close()

    print(summary.table())
    if summary.interrupted:
        print(f"opd-gym: interrupted after {summary.episodes} of {config.episodes} episodes: "
              f"`opd-gym rollout --resume --out {out} ...` (same flags) plays the other "
              f"{max(config.episodes - summary.episodes, 0)}", file=sys.stderr)
    for failure in summary.failures[:5]:
        print(f"  {failure}", file=sys.stderr)
    written = [out / "trajectories.jsonl", out / "summary.json"]
    if not args.no_report:
        from opd_gym.viewer import write_report

        model = specs.local_model(planned.models.teacher) if opd is not None else None
        written.append(write_report(out, tokenizer=specs.tokenizer(model)))
    if logger is not None and args.log == "jsonl":
        written.append(out / "metrics.jsonl")
    print("wrote " + ", ".join(str(p) for p in written))
    if summary.interrupted:
        return 130
    return 1 if summary.failures and not summary.episodes else 0


def warn_context(args: argparse.Namespace, config: Any) -> None:
    """One stderr line before the first episode when an episode may outgrow the teacher's
    context window (its turns past it would go unscored); read from the model's config.json
    or the vLLM server's /v1/models, never by loading the model."""
    from opd_gym.runs.budget import context_warning, teacher_window

    window, source = teacher_window(config.opd_options.teacher, options.teacher_options(args))
    line = context_warning(window, source, max_turns=config.max_turns,
                           max_tool_output_chars=config.max_tool_output_chars,
                           max_new_tokens=args.max_new_tokens or 256)
    if line is not None:
        print(f"opd-gym rollout: {line}", file=sys.stderr)


def play(args: argparse.Namespace, config: Any, make_agent: Any, logger: Any) -> Any:
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


def check_out(args: argparse.Namespace) -> Path:
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


def check_run_dir(out: Path, config: dict[str, Any], *, resume: bool) -> None:
    """A new run needs an empty `--out`; `--resume` needs the run's own config (the keys
    that decide its episodes equal to config.json's, which are named when they differ)."""
    from opd_gym.runs import RunDirectory

    run_dir = RunDirectory(out)
    if not resume:
        if run_dir.has_rows():
            raise UserError(f"{run_dir.trajectories} already has episodes: pass --resume to "
                            "continue that run or choose another --out")
        return
    try:
        before = run_dir.read_config()
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
        raise UserError(f"--resume with a config that differs from {run_dir.config_path} "
                        f"({shown}): use the run's flags, or another --out for a new run")


__all__ = ["RESUME_MAY_CHANGE", "RolloutPlan", "add_arguments", "plan", "run"]
