"""Teacher scoring at scale: E parallel episodes x T turns scored by TransformersTeacher, per mode.

Random-weight model at a named shape (CPU default: a small Qwen3-style model, float32; on a GPU
`--shape qwen3-8b --device cuda`, bfloat16), synthetic episodes (task prompt, then per turn a
hint, a sampled response and tool output), top-K 50. Modes, all scoring the same tokens:

  re-prefill          one request per turn, no KV reuse (hermes' way), episodes one at a time
  turn, sequential    one request per turn, KV reuse, episodes one at a time
  turn x E, 1 cache   E threads (like `rollout --parallel E`) turn by turn, one KV cache, no
                      batching: what the teacher did before per-prefix caches
  turn x E, no batch  E threads, per-prefix KV caches, batching off
  turn x E            E threads, per-prefix KV caches + batching (the default teacher)
  episode, sequential one request per episode, episodes one at a time
  episode x E         E threads, one request per episode each, batched
  one batch (ref.)    all E episode sequences in ONE padded forward, logits at scored rows only

Columns: seconds, rows run through the model body (real tokens; padding not counted; the
reference counts its padded rows), forward passes, speed-up over re-prefill, ratio to the
one-batch reference, max |difference| of token logprobs against re-prefill (turn modes) or the
one-batch reference (episode modes). Then the long-episode case: one episode of --long-turns
turns in episode and turn scope against one forward pass over all its tokens (sdpa attention),
with peak memory (CUDA: max_memory_allocated over the weights; CPU: peak RSS growth).

    python benchmarks/teacher_scoring.py                       # CPU, about a minute or two
    python benchmarks/teacher_scoring.py --device cuda --shape qwen3-8b --prompt 1000 \\
        --hint 50 --response 200 --tool 400 --long-turns 50
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

# Run as a script from a checkout: make the repo's package importable without installing it.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from synthetic import make_episode_request, make_turn_requests  # noqa: E402

SHAPES: dict[str, dict[str, int]] = {
    "tiny": dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                 num_key_value_heads=2, intermediate_size=768, head_dim=64, vocab_size=8192),
    "qwen3-1.7b": dict(hidden_size=2048, num_hidden_layers=28, num_attention_heads=16,
                       num_key_value_heads=8, intermediate_size=6144, head_dim=128,
                       vocab_size=151936),
    "qwen3-8b": dict(hidden_size=4096, num_hidden_layers=36, num_attention_heads=32,
                     num_key_value_heads=8, intermediate_size=12288, head_dim=128,
                     vocab_size=151936),
}
NEAR_TIE = 1e-3  # bf16 on GPU: top-K swaps between entries this close count as ties


def build_model(shape: str, device: str, dtype: str) -> Any:
    """A random-weight Qwen3-style causal LM at a named shape, sdpa attention."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(0)
    cfg = AutoConfig.for_model("qwen3", max_position_embeddings=65536, **SHAPES[shape])
    cfg._attn_implementation = "sdpa"
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(cfg, dtype=getattr(torch, dtype))
    return model.eval()


def episodes(args, n: int, turns: int, vocab: int, seed: int) -> list[tuple[list[int], list]]:
    """`n` synthetic episodes: a prompt, then per turn (hint, response, tool output) ids."""
    rng = np.random.default_rng(seed)

    def rand(k: int) -> list[int]:
        return rng.integers(100, vocab - 100, k).tolist()

    return [(rand(args.prompt), [(rand(args.hint), rand(args.response), rand(args.tool))
                                 for _ in range(turns)]) for _ in range(n)]


def turn_requests(ep) -> list:
    """Turn scope: one request per turn; the next context drops the hint."""
    return make_turn_requests(*ep)


def episode_request(ep):
    """Episode scope: one request per episode, every hint before its turn, one span per turn."""
    return make_episode_request(*ep)


class Meter:
    """Time a callable with device sync; peak memory (CUDA allocated / CPU RSS high-water)."""

    def __init__(self, device: str) -> None:
        import torch

        self.cuda = device.startswith("cuda")
        self.torch = torch
        self.base = torch.cuda.memory_allocated() if self.cuda else 0

    def _rss_reset(self) -> int:
        try:  # "5" resets the peak RSS (VmHWM) of this process (Linux >= 4.0)
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
            return self._vm("VmRSS")
        except OSError:
            return -1

    @staticmethod
    def _vm(field: str) -> int:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
        return -1

    def __call__(self, fn: Callable[[], Any]) -> tuple[float, Any, float]:
        torch = self.torch
        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        else:
            start_rss = self._rss_reset()
        t0 = time.perf_counter()
        out = fn()
        if self.cuda:
            torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        if self.cuda:
            peak = (torch.cuda.max_memory_allocated() - self.base) / 2**30
        else:
            peak = (self._vm("VmHWM") - start_rss) / 2**30 if start_rss >= 0 else float("nan")
        return dt, out, peak


def in_threads(jobs: list[Callable[[], Any]]) -> list[Any]:
    """Run one job per thread (like parallel envs sharing one teacher); return their results."""
    out: list[Any] = [None] * len(jobs)
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            out[i] = jobs[i]()
        except BaseException as exc:  # re-raised below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(jobs))]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    if errors:
        raise errors[0]
    return out


def one_batch(model, reqs, topk: int, device: str, chunk: int = 1024) -> list[np.ndarray]:
    """Reference: all sequences in ONE padded forward (sdpa), logits only at scored rows."""
    import torch

    n = max(len(r.ids) for r in reqs)
    ids = torch.zeros((len(reqs), n), dtype=torch.long, device=device)
    att = torch.zeros((len(reqs), n), dtype=torch.long, device=device)
    for i, r in enumerate(reqs):
        ids[i, :len(r.ids)] = torch.tensor(r.ids)
        att[i, :len(r.ids)] = 1
    out = []
    with torch.inference_mode():
        hs = model.get_decoder()(input_ids=ids, attention_mask=att).last_hidden_state
        head = model.get_output_embeddings()
        for i, r in enumerate(reqs):
            rows = torch.cat([torch.arange(s - 1, e - 1, device=device) for s, e in r.spans])
            tgt = torch.tensor([r.ids[p + 1] for p in rows.tolist()], device=device)
            lps = []
            for c in range(0, len(rows), chunk):
                lg = head(hs[i, rows[c:c + chunk]]).float()
                lse = torch.logsumexp(lg, -1)
                vals, idx = torch.topk(lg, topk, -1)
                (vals - lse[:, None]).cpu()
                idx.cpu()
                lps.append((lg.gather(1, tgt[c:c + chunk, None])[:, 0] - lse).cpu().numpy())
            out.append(np.concatenate(lps))
    return out


def flat_lp(scores: list[list[Any]]) -> np.ndarray:
    """All token logprobs of a nested result, in order."""
    return np.concatenate([s.token_logprobs for req in scores for s in req])


def run_main(args) -> dict[str, Any]:
    """The E-episode table."""
    from opd_gym.opd.teachers import TransformersTeacher

    model = build_model(args.shape, args.device, args.dtype)
    vocab = SHAPES[args.shape]["vocab_size"]
    eps = episodes(args, args.episodes, args.turns, vocab, args.seed)
    all_turns = [turn_requests(ep) for ep in eps]
    ep_reqs = [episode_request(ep) for ep in eps]
    k = args.topk
    meter = Meter(args.device)

    def teacher(**kw) -> TransformersTeacher:
        return TransformersTeacher(model, tokenizer=object(), device=args.device,
                                   dtype=args.dtype, **kw)

    teacher(batching=False).score([ep_reqs[0]], k)  # warm-up (kernels, allocator)
    one_batch(model, ep_reqs[:1], k, args.device)
    rows: list[dict[str, Any]] = []

    def add(mode: str, t: TransformersTeacher | None, fn: Callable[[], Any],
            lp: Callable[[Any], np.ndarray], n_rows: Callable[[], int] | None = None) -> None:
        dt, out, peak = meter(fn)
        rows.append({"mode": mode, "s": dt, "rows": n_rows() if n_rows else t.tokens_processed,
                     "passes": t.forward_passes if t else 1, "peak_gib": peak, "lp": lp(out)})
        print(f"  {mode}: {dt:.2f} s", file=sys.stderr, flush=True)

    turn_lp = lambda out: np.concatenate([flat_lp(x) for x in out])  # noqa: E731
    t = teacher(reuse_cache=False, batching=False)
    add("re-prefill", t, lambda t=t: [[t.score([r], k)[0] for r in turns] for turns in all_turns],
        turn_lp)
    t = teacher(batching=False)
    add("turn, sequential", t,
        lambda t=t: [[t.score([r], k)[0] for r in turns] for turns in all_turns], turn_lp)
    for mode, kw in (("turn x E, 1 cache", dict(batching=False, cache_max_sequences=1)),
                     ("turn x E, no batch", dict(batching=False)),
                     ("turn x E", {})):
        t = teacher(**kw)
        add(mode, t, lambda t=t: in_threads(
            [lambda turns=turns, t=t: [t.score([r], k)[0] for r in turns]
             for turns in all_turns]), turn_lp)
    t = teacher(batching=False)
    add("episode, sequential", t, lambda t=t: [t.score([r], k)[0] for r in ep_reqs], flat_lp)
    t = teacher()
    add("episode x E", t, lambda t=t: in_threads(
        [lambda r=r, t=t: t.score([r], k)[0] for r in ep_reqs]), flat_lp)
    longest = max(len(r.ids) for r in ep_reqs)
    add("one batch (ref.)", None, lambda: one_batch(model, ep_reqs, k, args.device),
        lambda out: np.concatenate(out), lambda: longest * len(ep_reqs))

    # Turn modes against re-prefill; episode modes against the one-batch reference (episode
    # scope keeps earlier hints in the context, turn scope does not: their scores differ).
    want_turn, want_ep = rows[0]["lp"], rows[-1]["lp"]
    for row in rows:
        ref = want_turn if row["mode"].startswith(("re-", "turn")) else want_ep
        row["max_abs_diff"] = float(np.abs(row.pop("lp") - ref).max())
    return {"rows": rows, "episode_len": longest,
            "scored": sum(e - s for r in ep_reqs for s, e in r.spans)}


def run_long(args) -> dict[str, Any]:
    """One long episode: episode scope, turn scope and one forward over all its tokens."""
    from opd_gym.opd.teachers import TransformersTeacher

    model = build_model(args.shape, args.device, args.dtype)
    vocab = SHAPES[args.shape]["vocab_size"]
    (ep,) = episodes(args, 1, args.long_turns, vocab, args.seed + 1)
    req, turns = episode_request(ep), turn_requests(ep)
    meter = Meter(args.device)
    k = args.topk

    def teacher() -> TransformersTeacher:
        return TransformersTeacher(model, tokenizer=object(), device=args.device,
                                   dtype=args.dtype, prefill_chunk=args.prefill_chunk)

    teacher().score([episode_request(episodes(args, 1, 2, vocab, 99)[0])], k)  # warm-up
    out: dict[str, Any] = {"tokens": len(req.ids), "scored": sum(e - s for s, e in req.spans)}
    dt, ref, peak = meter(lambda: one_batch(model, [req], k, args.device))
    out["one forward (ref.)"] = {"s": dt, "rows": len(req.ids), "peak_gib": peak,
                                 "max_abs_diff": 0.0}
    for mode, fn in (("episode scope", lambda t: t.score([req], k)),
                     ("turn scope", lambda t: t.score(turns, k))):
        t = teacher()
        dt, got, peak = meter(lambda t=t, fn=fn: fn(t))
        # Turn scope drops earlier hints from its context: not comparable with one forward.
        diff = float(np.abs(flat_lp(got) - ref[0]).max()) if mode == "episode scope" \
            else float("nan")
        out[mode] = {"s": dt, "rows": t.tokens_processed, "peak_gib": peak, "max_abs_diff": diff}
        print(f"  long {mode}: {dt:.2f} s", file=sys.stderr, flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--shape", default="tiny", choices=sorted(SHAPES))
    parser.add_argument("--dtype", default=None, help="default: float32 on CPU, bfloat16 on GPU")
    parser.add_argument("--episodes", type=int, default=8, help="parallel episodes E")
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--prompt", type=int, default=200, help="task prompt tokens")
    parser.add_argument("--hint", type=int, default=10, help="hint tokens per turn")
    parser.add_argument("--response", type=int, default=40, help="sampled tokens per turn")
    parser.add_argument("--tool", type=int, default=80, help="tool-output tokens per turn")
    parser.add_argument("--topk", type=int, default=50)
    parser.add_argument("--long-turns", type=int, default=50, help="0 skips the long episode")
    parser.add_argument("--prefill-chunk", type=int, default=2048,
                        help="teacher prefill_chunk in the long-episode case")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch CPU threads (1: stable timings on a shared machine)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default=None, help="also write the results to this file")
    args = parser.parse_args(argv)
    args.dtype = args.dtype or ("bfloat16" if args.device.startswith("cuda") else "float32")
    # Worker threads (the parallel episodes) take their OpenMP team size from the environment.
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    import torch

    if not args.device.startswith("cuda"):
        torch.set_num_threads(args.threads)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    res = run_main(args)
    long = run_long(args) if args.long_turns else None

    rows = res["rows"]
    base = rows[0]["s"]
    ref = rows[-1]["s"]
    print(f"\n{args.episodes} episodes x {args.turns} turns (prompt {args.prompt}; per turn hint "
          f"{args.hint}, response {args.response}, tool {args.tool}); {res['episode_len']} ids "
          f"per episode, {res['scored']} scored tokens; top-K {args.topk}; shape {args.shape} "
          f"{args.dtype} on {args.device}; load average {load:.1f} at start")
    print(f"| {'mode':<20} | {'seconds':>7} | {'rows run':>9} | {'passes':>6} | "
          f"{'vs re-prefill':>13} | {'x one batch':>11} | {'max|dlp|':>8} |")
    print(f"|{'-' * 22}|{'-' * 9}|{'-' * 11}|{'-' * 8}|{'-' * 15}|{'-' * 13}|{'-' * 10}|")
    for r in rows:
        print(f"| {r['mode']:<20} | {r['s']:>7.2f} | {r['rows']:>9} | {r['passes']:>6} | "
              f"{base / r['s']:>12.2f}x | {r['s'] / ref:>10.2f}x | {r['max_abs_diff']:>8.1e} |")
    by = {r["mode"]: r for r in rows}
    inter, seq = by["turn x E"], by["turn, sequential"]
    best = min((r for r in rows if r["mode"] != "one batch (ref.)"), key=lambda r: r["s"])
    print(f"targets: turn scope under {args.episodes} parallel episodes vs re-prefill "
          f"{base / inter['s']:.2f}x faster (target >= 4x at the 8B shape); rows run "
          f"interleaved / sequential {inter['rows'] / seq['rows']:.3f} (target <= 1.1); best "
          f"mode ({best['mode']}) {best['s'] / ref:.2f}x the one-batch reference "
          f"(target <= 1.25x)")
    if long:
        print(f"\nlong episode: {args.long_turns} turns, {long['tokens']} tokens, "
              f"{long['scored']} scored; prefill_chunk {args.prefill_chunk}; peak memory "
              f"{'allocated over the weights' if args.device.startswith('cuda') else 'RSS growth'}")
        one = long["one forward (ref.)"]["s"]
        print(f"| {'mode':<20} | {'seconds':>7} | {'rows run':>9} | {'x one forward':>13} | "
              f"{'peak GiB':>8} | {'max|dlp|':>8} |")
        print(f"|{'-' * 22}|{'-' * 9}|{'-' * 11}|{'-' * 15}|{'-' * 10}|{'-' * 10}|")
        for mode in ("one forward (ref.)", "episode scope", "turn scope"):
            r = long[mode]
            print(f"| {mode:<20} | {r['s']:>7.2f} | {r['rows']:>9} | {r['s'] / one:>12.2f}x | "
                  f"{r['peak_gib']:>8.2f} | {r['max_abs_diff']:>8.1e} |")
        print(f"target: long episode within 2x of one forward: episode scope "
              f"{long['episode scope']['s'] / one:.2f}x")
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "main": res, "long": long},
                                              indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
