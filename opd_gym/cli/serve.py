"""`opd-gym serve`: the env (with or without OPD) over OpenEnv's protocol; its flags and its
command (openenv-core is imported only when it runs)."""

from __future__ import annotations

import argparse
import os

from opd_gym.cli import options
from opd_gym.cli.errors import UserError

TOKEN_ENV = "OPD_GYM_SERVE_TOKEN"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of `opd-gym serve`."""
    from opd_gym.serve.config import DEFAULT_MAX_BODY, DEFAULT_PORT

    options.task_source(parser)
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
    options.sandbox(parser)
    parser.add_argument("--pool-size", type=int, default=4,
                        help="warm sandboxes shared by all sessions (default 4)")
    options.limits(parser)
    options.tool_format(parser)
    parser.add_argument("--max-body", type=int, default=DEFAULT_MAX_BODY, metavar="BYTES",
                        help="largest HTTP body or WebSocket message (default 1 MiB)")
    options.verification(parser)
    options.calibrations(parser)
    parser.add_argument("--opd", action="store_true",
                        help="serve the OPD wrapper: records in info and in the rows")
    options.opd_options(parser)
    # with --opd: clients' token_ids, logprobs, prompt_ids are exact
    options.tokenizer(parser, "--student-tokenizer")


def sandbox_backend(spec: str) -> str:
    """The backend `--sandbox` names; `auto` never falls back to the unisolated local backend
    for a server (that takes `--sandbox local`, said out loud)."""
    from opd_gym import specs

    backend = specs.sandbox_backend(spec)
    if spec == "auto" and backend == "local":
        raise UserError("--sandbox auto found neither a Docker engine with the sandbox image nor "
                        "bubblewrap: `opd-gym sandbox build` makes the image (a server on the "
                        "local backend, with no isolation, takes --sandbox local)")
    return backend


def config_from(args: argparse.Namespace):
    """The ServeConfig the flags describe (checked: the bind and limits first, then the
    sandbox backend, which may probe the Docker engine)."""
    import dataclasses

    from opd_gym.serve.config import ServeConfig

    opd_options = {"teacher": args.teacher, "judge": args.judge, "topk": args.topk,
                   "votes": args.votes, "hint_scope": args.hint_scope}
    if options.teacher_options(args):
        opd_options["teacher_options"] = options.teacher_options(args)
    spec = options.task_spec(args)
    if args.calibrations is not None:  # a store we cannot use is refused before anything
        from opd_gym.grading.store import CalibrationStore

        CalibrationStore.open(args.calibrations)
    config = ServeConfig(
        tasks=spec, host=args.host, port=args.port, max_sessions=args.max_sessions,
        token=args.token or os.environ.get(TOKEN_ENV) or None,
        idle_timeout=args.idle_timeout, out_dir=args.out,
        sandbox=args.sandbox, pool_size=args.pool_size,
        max_turns=args.max_turns or options.suite_max_turns(spec),
        max_tool_output_chars=args.max_tool_output or None,
        tool_format=options.tool_format_name(args.tool_format, None),
        opd=args.opd, opd_options=opd_options, max_body_bytes=args.max_body,
        grace=args.grace, verify_tasks=not args.no_verify, tokenizer=args.tokenizer,
        skip_unverifiable=args.skip_unverifiable, calibrations=args.calibrations).check()
    return dataclasses.replace(config, sandbox=sandbox_backend(args.sandbox))


def run(args: argparse.Namespace) -> int:
    """Serve until Ctrl-C (exit 130 after draining, as every command: `main` maps the
    KeyboardInterrupt `serve` raises)."""
    from opd_gym.serve import OPENENV_PIN

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


cmd_serve = run  # the name it had in opd_gym.serve.command

__all__ = ["TOKEN_ENV", "add_arguments", "cmd_serve", "config_from", "run"]
