"""`opd-gym sandbox build|doctor|images|prune`: make, check and clean the sandbox."""

from __future__ import annotations

import argparse
import datetime
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from opd_gym.cli import options
from opd_gym.cli.errors import UserError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from opd_gym import specs
    from opd_gym.cli.main import Parser

    sub = parser.add_subparsers(dest="sandbox_command", required=True, parser_class=Parser)
    build = sub.add_parser("build", help="build the sandbox image (registry or offline)")
    build.add_argument("--method", choices=["auto", "dockerfile", "offline"], default="auto")
    build.add_argument("--image", help="image name (default: the library's)")
    build.add_argument("--force", action="store_true", help="rebuild even if present")
    build.add_argument("--rootfs-only", action="store_true", help="only the bwrap rootfs")
    build.add_argument("--tasks", help="also build the environment images these tasks need "
                       f"({options.TASKS_HELP})")
    options.task_source(build, tasks=False)
    build.add_argument("--budget", help="disk kept for environment images, e.g. 20g (least "
                       "recently used beyond it are removed; default 20g)")
    options.quiet(build)
    options.setup_cache(build)
    build.set_defaults(func=run_build)
    doctor = sub.add_parser("doctor", help="check the backends and run a smoke session")
    doctor.add_argument("--backend", action="append",
                        choices=list(specs.KINDS["sandbox"][0])[1:])
    doctor.set_defaults(func=run_doctor)
    images = sub.add_parser("images", help="list the environment images (repository "
                            "tasks' setup steps), least recently used first")
    images.add_argument("--prune", metavar="BUDGET", help="first remove the least recently "
                        "used until the rest fit BUDGET (e.g. 5g; 0 removes every image not "
                        "in use)")
    images.set_defaults(func=run_images)
    prune = sub.add_parser("prune", help="remove containers whose owner process is gone")
    prune.add_argument("--all", action="store_true", help="remove every opd_gym container")
    prune.set_defaults(func=run_prune)


def run(args: argparse.Namespace) -> int:  # every subcommand sets its own func
    raise UserError("give a sandbox subcommand: build, doctor, images or prune")


def _check(label: str, fn: Callable[[], str]) -> tuple[str, bool, str]:
    try:
        return label, True, fn()
    except Exception as exc:  # doctor reports every failure instead of stopping
        return label, False, f"{type(exc).__name__}: {exc}".splitlines()[0][:160]


def smoke(backend: str) -> str:
    """A short session in a fresh sandbox: persistent shell, files, timeout, no network."""
    from opd_gym.sandboxes import SandboxError, sandbox_factory

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


def _missing(what: str) -> str:
    raise FileNotFoundError(f"{what} is missing (run `opd-gym sandbox build`)")


def run_doctor(args: argparse.Namespace) -> int:
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
    for backend in args.backend or ["docker", "bwrap"]:
        rows.append(_check(f"smoke session ({backend})", lambda b=backend: smoke(b)))
    width = max(len(r[0]) for r in rows)
    for label, ok, detail in rows:
        print(f"{label:<{width}}  {'OK ' if ok else 'NO '}  {detail}")
    failed = [label for label, ok, _ in rows if not ok and label.startswith("smoke")]
    if failed:
        print(f"\n{len(failed)} smoke session(s) failed; `opd-gym sandbox build` makes the image.")
        return 1
    print("\nThe sandbox works (a smoke run; `opd-gym rollout` runs the main job).")
    return 0


def run_build(args: argparse.Namespace) -> int:
    from opd_gym.sandboxes.docker import DockerConfig, DockerEngine
    from opd_gym.sandboxes.image import build_image, build_rootfs

    if args.rootfs_only:
        print(build_rootfs())
        return 0
    budget = options.budget(args.budget)
    if (args.repo or args.repos) and not args.tasks:
        raise UserError("--repo/--repos go with --tasks (the SWE-bench-style rows they serve)")
    tasks = options.load_tasks(options.task_spec(args)) if args.tasks else None
    engine = DockerEngine()
    method = build_image(args.image or DockerConfig().image, method=args.method, force=args.force,
                         engine=engine)
    print(f"sandbox image ready ({method})")
    if tasks is not None:
        build_environments(tasks, engine, budget, quiet=args.quiet, cache=args.setup_cache)
    return 0


def build_environments(tasks: Any, engine: Any, budget: int, quiet: bool,
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
    images = ImageCache(engine, budget, log=log)
    built = found = 0
    started = time.perf_counter()
    try:
        for spec in specs:
            report = images.ensure(spec)
            built, found = built + report.built, found + (not report.built)
            if bar is not None:
                bar.set_postfix_str(f"{report.tag} {report.size >> 20} MiB", refresh=False)
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    print(f"environment images ready: {built} built, {found} already here "
          f"({time.perf_counter() - started:.0f} s; budget {budget >> 30} GiB)")


def run_prune(args: argparse.Namespace) -> int:
    from opd_gym.sandboxes.docker import DockerEngine
    from opd_gym.sandboxes.reaper import prune

    report = prune(DockerEngine(timeout=10), everything=args.all)
    print(f"removed {len(report.removed)} container(s), kept {report.kept} with a live owner")
    return 0


def run_images(args: argparse.Namespace) -> int:
    """List the environment images (least recently used first); with --prune, remove the
    least recently used until the rest fit the budget (images in use always stay)."""
    from opd_gym.sandboxes.docker import DockerEngine
    from opd_gym.sandboxes.env_image import ImageCache

    budget = options.budget(args.prune, "--prune") if args.prune is not None else None
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


__all__ = ["add_arguments", "build_environments", "run", "smoke"]
