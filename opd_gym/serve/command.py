"""`opd-gym serve`: its flags and its command (openenv-core is imported only when it runs)."""

from __future__ import annotations

import argparse
import os

from opd_gym.serve import OPENENV_PIN
from opd_gym.serve.config import DEFAULT_MAX_BODY, DEFAULT_PORT, ServeConfig

TOKEN_ENV = "OPD_GYM_SERVE_TOKEN"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of `opd-gym serve`."""
    parser.add_argument("--tasks", default="coding",
                        help="task source, as for rollout (suite name, file, folder)")
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to bind (default loopback; any other needs --token)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    parser.add_argument("--max-sessions", type=int, default=32,
                        help="concurrent WebSocket sessions (each its own env and sandbox)")
    parser.add_argument("--token", default=None,
                        help=f"require this token on every request (default ${TOKEN_ENV}); "
                        "clients send 'Authorization: Bearer TOKEN' or http://user:TOKEN@host")
    parser.add_argument("--idle-timeout", type=float, default=300.0,
                        help="seconds without a message before a session and its sandbox "
                        "are reclaimed (default 300)")
    parser.add_argument("--out", default=None, help="run directory (default runs/serve-<time>)")
    parser.add_argument("--sandbox", default="docker", help="sandbox backend (default docker)")
    parser.add_argument("--pool-size", type=int, default=4,
                        help="warm sandboxes shared by all sessions (default 4)")
    parser.add_argument("--max-turns", type=int, default=15)
    parser.add_argument("--tool-format", default="hermes")
    parser.add_argument("--max-body", type=int, default=DEFAULT_MAX_BODY, metavar="BYTES",
                        help="largest HTTP body or WebSocket message (default 1 MiB)")
    parser.add_argument("--grace", type=float, default=30.0,
                        help="after Ctrl-C, seconds requests in flight may take (default 30)")
    parser.add_argument("--skip-unverifiable", action="store_true",
                        help="a reset draws another task instead of refusing one no grade "
                        "can vouch for (each task is calibrated at its first reset)")
    parser.add_argument("--no-verify", action="store_true",
                        help="play every task without calibrating it at its first reset")
    parser.add_argument("--opd", action="store_true",
                        help="serve the OPD wrapper: records in info and in the rows")
    parser.add_argument("--teacher", default="tiny", help="with --opd: the teacher spec")
    parser.add_argument("--judge", default="rule", help="with --opd: the judge spec")
    parser.add_argument("--topk", type=int, default=None, help="with --opd: teacher top-K")
    parser.add_argument("--hint-scope", default=None, choices=["turn", "episode"],
                        help="with --opd: hint scope")


def config_from(args: argparse.Namespace) -> ServeConfig:
    """The ServeConfig the flags describe (checked)."""
    opd_options = {"teacher": args.teacher, "judge": args.judge}
    if args.topk is not None:
        opd_options["topk"] = args.topk
    if args.hint_scope is not None:
        opd_options["hint_scope"] = args.hint_scope
    return ServeConfig(
        tasks=args.tasks, host=args.host, port=args.port, max_sessions=args.max_sessions,
        token=args.token or os.environ.get(TOKEN_ENV) or None,
        idle_timeout=args.idle_timeout, out_dir=args.out, sandbox=args.sandbox,
        pool_size=args.pool_size, max_turns=args.max_turns, tool_format=args.tool_format,
        opd=args.opd, opd_options=opd_options, max_body_bytes=args.max_body,
        grace=args.grace, verify_tasks=not args.no_verify,
        skip_unverifiable=args.skip_unverifiable).check()


def cmd_serve(args: argparse.Namespace) -> int:
    """Serve until Ctrl-C; exit 0 after draining."""
    config = config_from(args)  # refused before anything starts
    try:
        import openenv.core.env_server  # noqa: F401  (the extra, checked before anything starts)

        from opd_gym.serve.server import serve
    except ImportError as exc:
        from opd_gym.serve.errors import MissingServeExtra

        raise MissingServeExtra(
            f"opd-gym serve needs {OPENENV_PIN} ({exc}): pip install 'opd_gym[serve]' and "
            f"pip install --no-deps '{OPENENV_PIN}'") from None
    serve(config)
    return 0


__all__ = ["TOKEN_ENV", "add_arguments", "cmd_serve", "config_from"]
