"""The `opd-gym` command line: sandbox management (build, doctor, prune)."""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from collections.abc import Callable, Sequence

from opd_gym.sandboxes import SandboxError, sandbox_factory


class UserError(Exception):
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
    print("\nThe sandbox works. (The rollout job lands in a later release; this is a smoke run.)")
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="opd-gym", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sandbox = sub.add_parser("sandbox", help="build, check and clean the sandbox")
    ssub = sandbox.add_subparsers(dest="sandbox_command", required=True)
    build = ssub.add_parser("build", help="build the sandbox image (registry or offline)")
    build.add_argument("--method", choices=["auto", "dockerfile", "offline"], default="auto")
    build.add_argument("--image", help="image name (default: the library's)")
    build.add_argument("--force", action="store_true", help="rebuild even if present")
    build.add_argument("--rootfs-only", action="store_true", help="only the bwrap rootfs")
    build.set_defaults(func=cmd_build)
    doctor = ssub.add_parser("doctor", help="check the backends and run a smoke session")
    doctor.add_argument("--backend", action="append", choices=["docker", "bwrap", "local"])
    doctor.set_defaults(func=cmd_doctor)
    prune = ssub.add_parser("prune", help="remove containers whose owner process is gone")
    prune.add_argument("--all", action="store_true", help="remove every opd_gym container")
    prune.set_defaults(func=cmd_prune)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (UserError, SandboxError) as exc:
        print(f"opd-gym: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
