"""`opd-gym proxy`: serve a recording OpenAI-compatible model proxy on loopback until Ctrl-C
(exact ids and logprobs of each call, per episode; the proxy itself is `opd_gym.proxy`)."""

from __future__ import annotations

import argparse
import os

from opd_gym.errors import ConfigError


def make_backend(args: argparse.Namespace):
    """The backend the flags name: a vLLM server (`--upstream`) or a local model (`--model`)."""
    from opd_gym.proxy.backends import TransformersBackend, VLLMBackend

    if bool(args.upstream) == bool(args.model):
        raise ConfigError("give exactly one of --upstream URL (a vLLM server) and --model "
                          "MODEL (tiny, smollm2, hf:PATH or a folder, run in this process)")
    if args.upstream:
        return VLLMBackend(args.upstream, api_key=args.api_key or
                           os.environ.get("OPD_GYM_UPSTREAM_API_KEY"), timeout=args.timeout)
    from opd_gym import specs

    path = specs.local_model(args.model) or args.model
    if not os.path.isdir(path):
        raise ConfigError(f"--model {args.model!r}: no model folder at {path!r}")
    return TransformersBackend(path, max_tokens=args.max_tokens, seed=args.seed,
                               device=args.device, dtype=args.dtype)


def run(args: argparse.Namespace) -> int:
    """Start the proxy, open the `--episode` keys, print where it listens, serve until Ctrl-C."""
    from opd_gym.proxy.server import RecordingProxy

    proxy = RecordingProxy(make_backend(args), port=args.port, log_level=args.log_level)
    for key in args.episode or []:
        proxy.open_episode(key)
    target = args.upstream or f"{args.model} (in process)"
    print(f"opd-gym proxy: {proxy.url} -> {target}\n"
          f"  open an episode: POST {proxy.url}/opd/episodes  (or --episode KEY)\n"
          f"  agent base URL:  {proxy.url}/<key>/v1  (or header X-OPD-Episode: <key>)\n"
          f"  its turns:       GET {proxy.url}/opd/episodes/<key>", flush=True)
    proxy.serve_forever()
    return 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The `proxy` subcommand's flags."""
    parser.add_argument("--upstream", metavar="URL",
                        help="the vLLM OpenAI server to forward to (http://host:port[/v1])")
    parser.add_argument("--model", metavar="MODEL",
                        help="serve this model in-process with transformers instead "
                             "(tiny, smollm2, hf:PATH or a model folder)")
    parser.add_argument("--port", type=int, default=8100,
                        help="loopback port to listen on (default 8100; 0 picks a free one)")
    parser.add_argument("--episode", action="append", metavar="KEY",
                        help="open this episode at start (repeatable)")
    parser.add_argument("--api-key", help="bearer token for the upstream server (default: "
                        "$OPD_GYM_UPSTREAM_API_KEY, else the client's own header)")
    parser.add_argument("--timeout", type=float, default=600.0,
                        help="seconds one upstream call may take (default 600)")
    parser.add_argument("--max-tokens", type=int, default=256,
                        help="in-process model: sampled-token cap when a request sets none")
    parser.add_argument("--seed", type=int, default=0,
                        help="in-process model: seeds calls that carry no seed")
    parser.add_argument("--device", default="cpu", help="in-process model: torch device")
    parser.add_argument("--dtype", default="auto", help="in-process model: dtype")
    parser.add_argument("--log-level", default="warning",
                        choices=["critical", "error", "warning", "info", "debug"],
                        help="the HTTP server's log level (default warning)")


run_proxy = run  # the name it had in opd_gym.proxy.cli

__all__ = ["add_arguments", "make_backend", "run", "run_proxy"]
