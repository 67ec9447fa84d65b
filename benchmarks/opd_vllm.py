"""vLLM teacher scoring cost: hermes-style per-turn requests vs concurrent vs one episode pass.

Scores one synthetic token-level episode (prompt, then per turn: hint, response, tool output;
defaults: 10 turns, ~20k prompt rows over the 10 per-turn requests) with:

- a vLLM server (`VLLMServerTeacher`): hermes-style (per-turn requests one after another),
  the same requests concurrently, `episode` hint scope (one request with one span per
  turn), and the sampled-token-only path (topk=0) per turn and per episode;
- an in-process engine (`VLLMEngineTeacher`): per-turn batch, episode, topk=0;
- `TransformersTeacher` with KV-cache reuse: per turn, and episode.

It prints a table (best of N wall seconds, prompt rows computed, speed-up over hermes-style)
and where the server's time goes (server compute + transfer, client JSON decode, top-K
selection), measured on the hermes-style requests with raw HTTP calls.

    python benchmarks/opd_vllm.py                 # ~3 minutes on 2 CPU cores (tiny model)
    python benchmarks/opd_vllm.py --skip-engine --repeat 1

`benchmarks/opd.py` can call `run(args)` / `print_report(result)` or `main(argv)`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

# Run as a script from a checkout: make the repo's package importable without installing it.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from synthetic import make_episode_request, make_turn_requests, synthetic_episode  # noqa: E402


def _rows(requests) -> int:
    """Prompt rows a vLLM backend computes: every id up to each request's last span end."""
    return sum(max(e for _, e in r.spans) for r in requests)


def _best(fn, repeat: int):
    """(last result, best wall seconds of `repeat` runs)."""
    best, out = float("inf"), None
    for _ in range(repeat):
        started = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - started)
    return out, best


def _flat(results):
    spans = [s for per_request in results for s in per_request]
    return (np.concatenate([s.token_logprobs for s in spans]),
            np.concatenate([s.topk_logprobs for s in spans]))


def _delta(a, b) -> float:
    (ta, la), (tb, lb) = _flat(a), _flat(b)
    out = float(np.abs(ta - tb).max())
    if la.size and lb.size:
        out = max(out, float(np.abs(la - lb).max()))
    return out


def bench_server(args, path, turn_reqs, ep_req, reference, variant: str = ""):
    """Server modes on ONE server started with `variant` flags; returns (rows, breakdown,
    startup seconds). A variant runs only the K=topk modes and the episode sampled-only one."""
    import warnings

    from opd_gym.opd.teachers.vllm_launch import VLLMServerProcess
    from opd_gym.opd.teachers.vllm_server import VLLMServerTeacher

    server = VLLMServerProcess(path, max_logprobs=max(args.topk, 1), dtype="float32",
                               extra_args=[*args.server_args.split(), *variant.split()],
                               kv_cache_gib=args.kv_gib)
    server.start(timeout=600)
    label = f"server {variant.strip('-')}" if variant else "server"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a tokenizer-less server only gets a vocab check
            seq = VLLMServerTeacher(server.url, max_in_flight=1, timeout=600)
            par = VLLMServerTeacher(server.url, max_in_flight=len(turn_reqs), timeout=600)
        par.score(turn_reqs[:2], args.topk)  # first requests pay one-off warm-up
        k = args.topk
        modes = [
            (label, "hermes-style: per turn, sequential", k, turn_reqs,
             lambda: [seq.score([r], k)[0] for r in turn_reqs]),
            (label, "per turn, concurrent", k, turn_reqs, lambda: par.score(turn_reqs, k)),
            (label, "episode scope: 1 request", k, [ep_req], lambda: par.score([ep_req], k)),
            (label, "per turn, concurrent, sampled only", 0, turn_reqs,
             lambda: par.score(turn_reqs, 0)),
            (label, "episode scope, sampled only", 0, [ep_req],
             lambda: par.score([ep_req], 0)),
        ]
        if variant:
            modes = [m for m in modes if m[2] == k and "concurrent" not in m[1]] + modes[-1:]
        rows = _run_modes(modes, args.repeat, reference)
        breakdown = {} if variant else {kk: _breakdown(server.url, seq.model, turn_reqs, kk)
                                        for kk in sorted({k, 0})}
        seq.close()
        par.close()
        return rows, breakdown, server.startup_seconds
    finally:
        server.stop()


def _breakdown(url, model, requests, topk):
    """Hermes-style requests with raw HTTP: server+transfer, JSON decode, top-K selection."""
    import httpx

    from opd_gym.opd.teachers.vllm_common import rows_from_dicts, scored_positions
    from opd_gym.opd.teachers.vllm_server import _completion_decoder

    decode = _completion_decoder()
    spent = {"server + transfer": 0.0, "client decode (teacher's)": 0.0,
             "client top-K select": 0.0, "(plain json decode, for comparison)": 0.0}
    size = 0
    with httpx.Client(timeout=600) as http:
        for req in requests:
            prompt = list(req.ids[: max(e for _, e in req.spans)])
            body = {"model": model, "prompt": prompt, "max_tokens": 1, "prompt_logprobs": topk,
                    "temperature": 1.0, "top_p": 1.0, "top_k": 0}
            t0 = time.perf_counter()
            content = http.post(f"{url}/v1/completions", json=body).content
            t1 = time.perf_counter()
            t_json = time.perf_counter()
            json.loads(content)
            spent["(plain json decode, for comparison)"] += time.perf_counter() - t_json
            t1 += time.perf_counter() - t_json
            rows = (decode(content) if decode else json.loads(content))["choices"][0][
                "prompt_logprobs"]
            t2 = time.perf_counter()
            rows_from_dicts(prompt, scored_positions(req), rows, topk)
            t3 = time.perf_counter()
            spent["server + transfer"] += t1 - t0
            spent["client decode (teacher's)"] += t2 - t1
            spent["client top-K select"] += t3 - t2
            size += len(content)
    spent["response MB"] = size / 1e6
    return spent


def bench_engine(args, path, turn_reqs, ep_req, reference):
    """In-process engine modes; returns (rows, startup seconds, token-id scoring active)."""
    from opd_gym.opd.teachers.vllm_engine import VLLMEngineTeacher

    started = time.perf_counter()
    engine = VLLMEngineTeacher(path, dtype="float32", max_logprobs=max(args.topk, 1),
                               enforce_eager=True, max_model_len=args.max_model_len,
                               kv_cache_memory_bytes=args.kv_gib << 30)
    startup = time.perf_counter() - started
    try:
        engine.score(turn_reqs[:2], args.topk)  # warm-up
        k = args.topk
        modes = [
            ("engine", "per turn, one batch", k, turn_reqs, lambda: engine.score(turn_reqs, k)),
            ("engine", "episode scope", k, [ep_req], lambda: engine.score([ep_req], k)),
            ("engine", "per turn, sampled only", 0, turn_reqs,
             lambda: engine.score(turn_reqs, 0)),
            ("engine", "episode scope, sampled only", 0, [ep_req],
             lambda: engine.score([ep_req], 0)),
        ]
        return _run_modes(modes, args.repeat, reference), startup, engine.token_id_scoring
    finally:
        engine.close()


def bench_hf(args, path, turn_reqs, ep_req):
    """TransformersTeacher with KV reuse; returns (rows, reference outputs by (scope, k))."""
    import torch

    from opd_gym.opd.teachers import TransformersTeacher

    torch.set_num_threads(args.threads)
    k = args.topk

    def fresh():
        return TransformersTeacher(path, dtype="float32")

    warm = fresh()
    warm.score(turn_reqs[:1], k)
    out, rows = {}, []
    for name, scope, reqs, fn in [
        ("per turn, KV reuse", "turn", turn_reqs,
         lambda t: [t.score([r], k)[0] for r in turn_reqs]),
        ("episode scope", "episode", [ep_req], lambda t: t.score([ep_req], k)),
    ]:
        best, result, computed = float("inf"), None, 0
        for _ in range(args.repeat):
            teacher = fresh()  # an empty KV cache each time, as for a new episode
            started = time.perf_counter()
            result = fn(teacher)
            best = min(best, time.perf_counter() - started)
            computed = teacher.tokens_processed
        out[(scope, k)] = result
        rows.append(dict(backend="transformers", mode=name, k=k, requests=len(reqs),
                         rows=computed, wall=best, delta=0.0, reference="(reference)"))
    out[("turn", 0)] = [[_drop_topk(s) for s in r] for r in out[("turn", k)]]
    out[("episode", 0)] = [[_drop_topk(s) for s in r] for r in out[("episode", k)]]
    return rows, out


def _drop_topk(span):
    from opd_gym.opd.teachers import SpanScores

    n = len(span)
    return SpanScores(span.token_logprobs, np.zeros((n, 0), np.int32),
                      np.zeros((n, 0), np.float32))


def _run_modes(modes, repeat, reference):
    rows = []
    for backend, name, k, reqs, fn in modes:
        result, wall = _best(fn, repeat)
        scope = "episode" if "episode" in name else "turn"
        ref = reference.get((scope, k)) if reference else None
        rows.append(dict(backend=backend, mode=name, k=k, requests=len(reqs), rows=_rows(reqs),
                         wall=wall, delta=_delta(result, ref) if ref is not None else float("nan"),
                         reference="vs transformers" if ref is not None else "-"))
    return rows


def run(args) -> dict:
    """Build the model and the episode, run every backend; return rows and diagnostics."""
    from opd_gym.models import build_tiny_model, default_model_dir

    params = dict(hidden_size=args.hidden, num_layers=args.layers,
                  num_heads=max(args.hidden // 64, 1), vocab_size=args.vocab)
    path = build_tiny_model(args.model_dir or default_model_dir(**params), **params)
    prompt, turns = synthetic_episode(args, args.vocab)
    turn_reqs, ep_req = make_turn_requests(prompt, turns), make_episode_request(prompt, turns)
    result = {"path": str(path), "turn_rows": _rows(turn_reqs), "episode_rows": _rows([ep_req]),
              "scored": sum(e - s for s, e in ep_req.spans), "rows": []}
    reference = {}
    if not args.skip_hf:
        hf_rows, reference = bench_hf(args, path, turn_reqs, ep_req)
        result["rows"] += hf_rows
    server_rows, breakdown, startup = bench_server(args, path, turn_reqs, ep_req, reference)
    result["rows"] += server_rows
    result["breakdown"], result["server_startup"] = breakdown, startup
    for variant in filter(None, args.server_variants.split(",")):
        result["rows"] += bench_server(args, path, turn_reqs, ep_req, reference, variant)[0]
    if not args.skip_engine:
        engine_rows, startup, token_ids = bench_engine(args, path, turn_reqs, ep_req, reference)
        result["rows"] += engine_rows
        result["engine_startup"], result["engine_token_id_scoring"] = startup, token_ids
    return result


def print_report(result: dict, args) -> bool:
    """Print the table and the breakdown; return whether the 4x target is met."""
    rows = result["rows"]
    hermes = next(r for r in rows if r["mode"].startswith("hermes"))
    print(f"episode: {args.turns} turns, prompt {args.prompt}, per turn hint {args.hint} + "
          f"response {args.response} + tool {args.tool} tokens; {result['turn_rows']} prompt "
          f"rows over {args.turns} per-turn requests, {result['episode_rows']} in episode scope, "
          f"{result['scored']} scored; model hidden {args.hidden} x {args.layers} layers, vocab "
          f"{args.vocab}, fp32; best of {args.repeat}")
    print(f"{'backend':<27} {'mode':<37} {'K':>3} {'reqs':>4} {'rows':>7} {'wall s':>7} "
          f"{'vs hermes':>9} {'ms/1k rows':>10}  {'max|dlp|':>9}")
    for r in rows:
        print(f"{r['backend']:<27} {r['mode']:<37} {r['k']:>3} {r['requests']:>4} "
              f"{r['rows']:>7} {r['wall']:>7.2f} {hermes['wall'] / r['wall']:>8.1f}x "
              f"{1e6 * r['wall'] / max(r['rows'], 1):>10.1f}  "
              f"{r['delta']:>9.1e}")
    print(f"\nserver startup {result['server_startup']:.0f} s"
          + (f", engine startup {result['engine_startup']:.0f} s (token-id scoring for topk=0: "
             f"{'yes' if result['engine_token_id_scoring'] else 'no, V1 runner'})"
             if "engine_startup" in result else ""))
    print("where the default server's time goes (hermes-style requests, raw HTTP, one pass; "
          "server = prefill + top-K + detokenizing every entry + JSON):")
    for k, spent in result["breakdown"].items():
        parts = ", ".join(f"{name} {value:.2f} s" for name, value in spent.items()
                          if name != "response MB")
        print(f"  K={k}: {parts}; response {spent['response MB']:.1f} MB")
    k = args.topk
    best = min((r for r in rows if r["backend"].startswith(("server", "engine")) and r["k"] == k),
               key=lambda r: r["wall"])
    best_server = min((r for r in rows if r["backend"].startswith("server") and r["k"] == k),
                      key=lambda r: r["wall"])
    ratio = hermes["wall"] / best["wall"]
    print(f"best vLLM mode at K={k}: {best['backend']} / {best['mode']}, {ratio:.1f}x cheaper "
          f"than hermes-style (target >= 4x); best server mode {best_server['backend']} / "
          f"{best_server['mode']}, "
          f"{hermes['wall'] / best_server['wall']:.1f}x")
    return ratio >= 4


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--turns", type=int, default=10)
    p.add_argument("--prompt", type=int, default=500, help="prompt tokens")
    p.add_argument("--response", type=int, default=100, help="response tokens per turn")
    p.add_argument("--tool", type=int, default=200, help="tool-output tokens per turn")
    p.add_argument("--hint", type=int, default=50, help="hint tokens per turn")
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--vocab", type=int, default=2048)
    p.add_argument("--topk", type=int, default=50)
    p.add_argument("--max-model-len", type=int, default=4096)
    p.add_argument("--kv-gib", type=int, default=1, help="KV cache GiB (CPU backend)")
    p.add_argument("--server-args", default="--enforce-eager --max-model-len 4096",
                   help="extra vLLM server flags")
    p.add_argument("--server-variants", default="--skip-tokenizer-init",
                   help="comma-separated extra flag sets: one more server each ('' for none)")
    p.add_argument("--threads", type=int, default=2, help="torch threads for transformers")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--repeat", type=int, default=2, help="timed repeats (best of N)")
    p.add_argument("--model-dir", default=None, help="where to build/reuse the model")
    p.add_argument("--skip-engine", action="store_true")
    p.add_argument("--skip-hf", action="store_true")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    return 0 if print_report(run(args), args) else 1


if __name__ == "__main__":
    sys.exit(main())
