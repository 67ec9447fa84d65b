"""Teacher scoring cost: full re-prefill per turn vs KV-cache reuse vs one episode-scope pass.

Builds (or reuses) a local random model (default hidden 512, 8 layers, vocab 8k, head_dim 64),
scores a synthetic token-level episode (prompt, then per turn: hint, response, tool output)
in three modes, checks that they agree, and prints a table. Then, each in a fresh
subprocess, measures the peak resident memory of scoring one long response with a large
vocabulary at two chunk sizes (and the naive full log-softmax), to show that memory is
bounded by the chunk size rather than by response length x vocabulary.

    python benchmarks/opd.py            # defaults finish in a few minutes on 2 CPU cores
    python benchmarks/opd.py --turns 4 --skip-memory
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

# Run as a script from a checkout: make the repo's package importable without installing it.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from synthetic import make_episode_request, make_turn_requests, synthetic_episode  # noqa: E402

NEAR_TIE = 1e-5


def _compare(got, want) -> tuple[float, int]:
    """Max |delta logprob| (sampled + top-K) and top-K id mismatches that are not near-ties."""
    worst, mismatches = 0.0, 0
    for g, w in zip(got, want, strict=True):
        worst = max(worst, float(np.abs(g.token_logprobs - w.token_logprobs).max()),
                    float(np.abs(g.topk_logprobs - w.topk_logprobs).max()))
        k = w.topk_ids.shape[1]
        for r, c in zip(*np.nonzero(g.topk_ids != w.topk_ids), strict=True):
            row = w.topk_logprobs[r]
            others = [row[j] for j in (c - 1, c + 1) if 0 <= j < k]
            if c == k - 1:  # the swap partner may be the unseen K+1-th entry
                others.append(g.topk_logprobs[r, c])
            if not any(abs(row[c] - v) < NEAR_TIE for v in others):
                mismatches += 1
    return worst, mismatches


def _timed(fn):
    """Run fn; return (result, wall seconds, process CPU seconds)."""
    start, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - start, time.process_time() - cpu


def run_speed(args) -> list[dict]:
    """Score the synthetic episode in the three modes; return one table row per mode."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from opd_gym.models import build_tiny_model, default_model_dir
    from opd_gym.opd.teachers import ScoreRequest, TransformersTeacher

    params = dict(hidden_size=args.hidden, num_layers=args.layers,
                  num_heads=args.hidden // 64, vocab_size=args.vocab)
    path = build_tiny_model(args.model_dir or default_model_dir(**params), **params)
    torch.set_num_threads(args.threads)
    model = AutoModelForCausalLM.from_pretrained(path).eval()
    tokenizer = AutoTokenizer.from_pretrained(path)
    prompt, turns = synthetic_episode(args, args.vocab, reserved=32)
    turn_requests = make_turn_requests(prompt, turns)
    episode_request = make_episode_request(prompt, turns)

    def teacher(reuse: bool) -> TransformersTeacher:
        return TransformersTeacher(model, tokenizer=tokenizer, reuse_cache=reuse,
                                   chunk_rows=args.chunk_rows)

    warm = teacher(False)  # first forward passes pay one-off allocation and thread start-up
    warm.score([ScoreRequest((prompt * 2)[:256], [(128, 256)])], args.topk)

    def per_turn(reuse: bool):
        t = teacher(reuse)
        return [t.score([r], args.topk)[0][0] for r in turn_requests], t.tokens_processed

    def one_pass():
        t = teacher(True)
        return t.score([episode_request], args.topk)[0], t.tokens_processed

    modes = {"full": lambda: per_turn(False), "kv": lambda: per_turn(True), "episode": one_pass,
             "naive": lambda: (_naive_scores(model, episode_request, args.topk),
                               len(episode_request.ids))}
    best: dict[str, float] = {}
    cpu: dict[str, float] = {}
    outputs: dict[str, tuple] = {}
    for rep in range(args.repeat):  # interleaved repeats, best of N: robust to a busy machine
        names = list(modes)
        for name in names[rep % len(names):] + names[:rep % len(names)]:
            outputs[name], wall, used = _timed(modes[name])
            best[name] = min(best.get(name, float("inf")), wall)
            cpu[name] = min(cpu.get(name, float("inf")), used)
    (ref, rows_full), (kv, rows_kv) = outputs["full"], outputs["kv"]
    (ep, rows_ep), (naive, rows_naive) = outputs["episode"], outputs["naive"]
    t_full, t_kv, t_ep, t_naive = best["full"], best["kv"], best["episode"], best["naive"]

    # Episode scope sees earlier hints, so its numbers differ from turn scope by design; check
    # it against a naive one-shot full-vocabulary log-softmax of the same sequence instead.
    kv_delta, kv_mis = _compare(kv, ref)
    ep_delta, ep_mis = _compare(ep, naive)
    scored = sum(e - s for s, e in episode_request.spans)
    return [
        dict(mode="turn: full re-prefill", wall=t_full, cpu=cpu["full"], rows=rows_full,
             check="reference", delta=0.0, mismatches=0),
        dict(mode="turn: KV-cache reuse", wall=t_kv, cpu=cpu["kv"], rows=rows_kv,
             check="vs re-prefill", delta=kv_delta, mismatches=kv_mis),
        dict(mode="episode: one pass", wall=t_ep, cpu=cpu["episode"], rows=rows_ep,
             check="vs naive", delta=ep_delta, mismatches=ep_mis),
        dict(mode="episode: naive full logits", wall=t_naive, cpu=cpu["naive"],
             rows=rows_naive,
             check="reference", delta=0.0, mismatches=0),
        dict(mode="_meta", scored=scored, episode_len=len(episode_request.ids), path=str(path)),
    ]


def _naive_scores(model, request, topk):
    """The obvious implementation: logits for every row, full log-softmax, then slice."""
    import torch

    from opd_gym.opd.teachers import SpanScores

    with torch.inference_mode():
        logp = torch.log_softmax(model(torch.tensor([request.ids])).logits[0].float(), -1)
        out = []
        for s, e in request.spans:
            rows = logp[s - 1:e - 1]
            tok = rows.gather(1, torch.tensor(request.ids[s:e])[:, None])[:, 0]
            vals, idx = rows.topk(topk)
            out.append(SpanScores(tok.numpy(), idx.to(torch.int32).numpy(), vals.numpy()))
    return out


def _rss_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def memory_probe(args) -> None:
    """(Subprocess) peak RSS growth while scoring one long response; prints a JSON line."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from opd_gym.opd.teachers import ScoreRequest, TransformersTeacher

    torch.set_num_threads(args.threads)
    model = AutoModelForCausalLM.from_pretrained(args.probe_model).eval()
    tokenizer = AutoTokenizer.from_pretrained(args.probe_model)
    vocab = model.config.vocab_size
    rng = np.random.default_rng(args.seed)
    ids = rng.integers(32, vocab, size=64 + args.mem_tokens).tolist()
    request = ScoreRequest(ids, [(64, len(ids))])
    chunk = args.probe_chunk
    teacher = TransformersTeacher(model, tokenizer=tokenizer, reuse_cache=False,
                                  chunk_rows=max(chunk, 1))
    teacher.score([ScoreRequest(ids[:96], [(64, 96)])], args.topk)  # warm-up
    try:  # reset the kernel's peak-RSS mark so only the scoring below counts
        Path("/proc/self/clear_refs").write_text("5")
        before = _rss_kib("VmRSS")
        reset = True
    except OSError:
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        reset = False
    start = time.perf_counter()
    if chunk == 0:
        _naive_scores(model, request, args.topk)
    else:
        teacher.score([request], args.topk)
    wall = time.perf_counter() - start
    peak = _rss_kib("VmHWM") if reset else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"chunk": chunk, "peak_delta_mib": (peak - before) / 1024,
                      "wall": wall, "exact_peak": reset}))


def run_memory(args) -> list[dict]:
    """Run the memory probe in fresh subprocesses, one per chunk size plus the naive path."""
    from opd_gym.models import build_tiny_model, default_model_dir

    params = dict(hidden_size=args.mem_hidden, num_layers=2, num_heads=args.mem_hidden // 64,
                  vocab_size=args.mem_vocab)
    path = build_tiny_model(default_model_dir(**params), **params)
    rows = []
    for chunk in [*args.mem_chunks, 0]:
        cmd = [sys.executable, __file__, "--probe-model", str(path), "--probe-chunk",
               str(chunk), "--mem-tokens", str(args.mem_tokens), "--topk", str(args.topk),
               "--threads", str(args.threads), "--seed", str(args.seed)]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=600)
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--prompt", type=int, default=500, help="prompt tokens")
    parser.add_argument("--response", type=int, default=100, help="response tokens per turn")
    parser.add_argument("--tool", type=int, default=200, help="tool-output tokens per turn")
    parser.add_argument("--hint", type=int, default=50, help="hint tokens per turn")
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--vocab", type=int, default=8192)
    parser.add_argument("--topk", type=int, default=50)
    parser.add_argument("--chunk-rows", type=int, default=256)
    parser.add_argument("--threads", type=int, default=max(1, min(2, os.cpu_count() or 1)))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeat", type=int, default=3, help="timed repeats (best of N)")
    parser.add_argument("--model-dir", default=None, help="where to build/reuse the model")
    parser.add_argument("--mem-tokens", type=int, default=2048, help="response length")
    parser.add_argument("--mem-vocab", type=int, default=32768)
    parser.add_argument("--mem-hidden", type=int, default=256)
    parser.add_argument("--mem-chunks", type=lambda s: [int(x) for x in s.split(",")],
                        default=[128, 2048], help="comma-separated chunk_rows values")
    parser.add_argument("--skip-memory", action="store_true")
    parser.add_argument("--vllm", action="store_true",
                        help="then run the vLLM section (benchmarks/opd_vllm.py, same episode)")
    parser.add_argument("--probe-model", help=argparse.SUPPRESS)
    parser.add_argument("--probe-chunk", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.probe_model:
        memory_probe(args)
        return 0

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    rows = run_speed(args)
    meta = rows.pop()
    base = rows[0]["wall"]
    print(f"episode: {args.turns} turns, prompt {args.prompt}, per turn hint {args.hint} + "
          f"response {args.response} + tool {args.tool} tokens; {meta['episode_len']} ids in "
          f"episode scope, {meta['scored']} scored; top-K {args.topk}; model "
          f"hidden {args.hidden} x {args.layers} layers, vocab {args.vocab}; "
          f"{args.threads} threads; best of {args.repeat}; load average {load:.1f} at start")
    print(f"{'mode':<28} {'wall s':>7} {'vs re-prefill':>13} {'cpu s':>7} {'rows run':>9}  "
          f"{'agreement':<14} {'max|dlp|':>9} {'topK mism.':>10}")
    for row in rows:
        print(f"{row['mode']:<28} {row['wall']:>7.2f} {base / row['wall']:>12.2f}x "
              f"{row['cpu']:>7.2f} {row['rows']:>9}  {row['check']:<14} {row['delta']:>9.2e} "
              f"{row['mismatches']:>10}")
    speedup = base / rows[1]["wall"]
    ok = rows[1]["delta"] < 1e-4 and rows[2]["delta"] < 1e-4 and \
        rows[1]["mismatches"] == 0 and rows[2]["mismatches"] == 0
    print(f"KV reuse speed-up {speedup:.2f}x (target >= 3x); outputs agree: {ok}")

    if not args.skip_memory:
        print(f"\npeak memory scoring one {args.mem_tokens}-token response, vocab "
              f"{args.mem_vocab}, top-K {args.topk} (fresh process each, peak RSS growth):")
        print(f"{'chunk_rows':>12} {'peak +MiB':>10}  {'one logits chunk (fp32)':>24}")
        for row in run_memory(args):
            rows_in_chunk = args.mem_tokens if row["chunk"] == 0 else min(row["chunk"],
                                                                           args.mem_tokens)
            label = "naive" if row["chunk"] == 0 else str(row["chunk"])
            buffer = rows_in_chunk * args.mem_vocab * 4 / 2**20
            print(f"{label:>12} {row['peak_delta_mib']:>10.1f}  {buffer:>20.0f} MiB"
                  + ("" if row["exact_peak"] else " (maxrss)"))
    if args.vllm:
        import opd_vllm  # beside this file; needs the vllm extra

        print("\nvLLM section:")
        vllm_args = opd_vllm.parser().parse_args([])
        ok = opd_vllm.print_report(opd_vllm.run(vllm_args), vllm_args) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
