"""TransformersTeacher at scale on the tiny model: batched, cached and interleaved scoring give the
single-request scores, parallel episodes keep their KV reuse, eviction stays correct."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

from opd_gym.errors import ConfigError, ModelError
from opd_gym.opd.teachers import ScoreRequest, TransformersTeacher
from opd_gym.opd.teachers.base import reject_candidates

TOL = 1e-4
NEAR_TIE = 1e-5
E, T, P, H, R, OBS = 4, 4, 40, 5, 12, 15  # episodes, turns, prompt, hint, response, tool output


def _episodes(seed: int = 0) -> list[tuple[list[int], list[tuple[list[int], ...]]]]:
    gen = torch.Generator().manual_seed(seed)

    def rand(n: int) -> list[int]:
        return torch.randint(20, 2000, (n,), generator=gen).tolist()

    return [(rand(P), [(rand(H), rand(R), rand(OBS)) for _ in range(T)]) for _ in range(E)]


def _turn_requests(episode) -> list[ScoreRequest]:
    """Turn scope: one request per turn, context grows by response + tool output."""
    prompt, turns = episode
    ctx, out = list(prompt), []
    for hint, resp, obs in turns:
        ids = ctx + hint + resp
        out.append(ScoreRequest(ids, [(len(ctx) + len(hint), len(ids))]))
        ctx = ctx + resp + obs
    return out


def _episode_request(episode) -> ScoreRequest:
    """Episode scope: one request, one span per turn."""
    prompt, turns = episode
    ids, spans = list(prompt), []
    for hint, resp, obs in turns:
        ids += hint
        spans.append((len(ids), len(ids) + len(resp)))
        ids += resp + obs
    return ScoreRequest(ids, spans)


def _teacher(model, tok, **kwargs) -> TransformersTeacher:
    return TransformersTeacher(model, tokenizer=tok, **kwargs)


def _reference(model, tok, requests, topk=5):
    """One request per forward, no cache, no batching: the ground truth."""
    t = _teacher(model, tok, reuse_cache=False, batching=False)
    return [t.score([r], topk)[0] for r in requests]


def _assert_same(got, want) -> float:
    """Equal within TOL (top-K ids equal except near-ties); returns the max abs diff."""
    worst = 0.0
    for g_spans, w_spans in zip(got, want, strict=True):
        for g, w in zip(g_spans, w_spans, strict=True):
            np.testing.assert_allclose(g.token_logprobs, w.token_logprobs, atol=TOL, rtol=0)
            np.testing.assert_allclose(g.topk_logprobs, w.topk_logprobs, atol=TOL, rtol=0)
            for r, c in zip(*np.nonzero(g.topk_ids != w.topk_ids), strict=True):
                k = w.topk_ids.shape[1]
                near = [w.topk_logprobs[r, j] for j in (c - 1, c + 1) if 0 <= j < k]
                assert any(abs(w.topk_logprobs[r, c] - v) < NEAR_TIE for v in near), (r, c)
            if len(g):
                worst = max(worst, float(np.abs(g.token_logprobs - w.token_logprobs).max()))
    return worst


def _interleaved(teacher, all_turns, workers=E):
    """Parallel envs sharing a teacher: each thread scores its episode turn by turn, in lockstep."""
    results: dict[int, list] = {}
    errors: list[BaseException] = []
    barrier = threading.Barrier(workers)

    def work(e: int) -> None:
        try:
            out = []
            for req in all_turns[e]:
                barrier.wait()
                out.append(teacher.score([req], 5)[0])
            results[e] = out
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=work, args=(e,)) for e in range(workers)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors
    return [results[e] for e in range(workers)]


def test_interleaved_threads_keep_kv_reuse_and_match_single(tiny_model, tiny_tokenizer):
    episodes = _episodes()
    all_turns = [_turn_requests(ep) for ep in episodes]
    flat = [r for turns in all_turns for r in turns]
    want = _reference(tiny_model, tiny_tokenizer, flat)

    sequential = _teacher(tiny_model, tiny_tokenizer, batching=False)
    seq_out = [sequential.score([r], 5)[0] for r in flat]  # one episode at a time
    _assert_same(seq_out, want)

    for batching in (True, False):
        shared = _teacher(tiny_model, tiny_tokenizer, batching=batching, batch_window_ms=50)
        got = _interleaved(shared, all_turns)
        _assert_same([s for ep in got for s in ep], want)
        # Interleaving no longer re-prefills: rows run stay within 1.1x of one-at-a-time.
        assert shared.tokens_processed <= 1.1 * sequential.tokens_processed, \
            (shared.tokens_processed, sequential.tokens_processed)
        if batching:  # lockstep turns of 4 episodes ran together in shared forward passes
            assert shared.forward_passes < sequential.forward_passes
            assert shared._scheduler.batches < len(flat)
        else:
            assert shared.forward_passes == sequential.forward_passes


def test_one_call_with_many_requests_is_batched_and_equal(tiny_model, tiny_tokenizer):
    episodes = _episodes(1)
    turn_reqs = [r for ep in episodes for r in _turn_requests(ep)]
    ep_reqs = [_episode_request(ep) for ep in episodes]
    for requests in (turn_reqs, turn_reqs[:3] + ep_reqs):
        want = _reference(tiny_model, tiny_tokenizer, requests)
        teacher = _teacher(tiny_model, tiny_tokenizer, chunk_rows=7, prefill_chunk=32)
        got = teacher.score(requests[::-1], 5)[::-1]
        diff = _assert_same(got, want)
        assert diff <= TOL
    # Turns of one episode in one call extend each other's prefix (waves), not re-prefill.
    one = _teacher(tiny_model, tiny_tokenizer)
    one.score(turn_reqs, 5)
    sequential = _teacher(tiny_model, tiny_tokenizer, batching=False)
    for r in turn_reqs:
        sequential.score([r], 5)
    assert one.tokens_processed <= 1.1 * sequential.tokens_processed
    assert one.forward_passes <= T + 1  # a pass per wave, all episodes together


def test_eviction_under_a_small_budget_stays_correct(tiny_model, tiny_tokenizer):
    all_turns = [_turn_requests(ep) for ep in _episodes(2)]
    want = _reference(tiny_model, tiny_tokenizer, [r for t in all_turns for r in t])
    budget = 2 * (P + R + OBS)  # room for about two episodes' contexts, not four
    teacher = _teacher(tiny_model, tiny_tokenizer, cache_budget_tokens=budget, batching=False)
    got = _interleaved(teacher, all_turns)
    _assert_same([s for ep in got for s in ep], want)
    assert teacher.cache_pool.evictions > 0 and teacher.cache_pool.tokens <= budget
    # A budget of zero keeps nothing: every request re-prefills, results unchanged.
    nothing = _teacher(tiny_model, tiny_tokenizer, cache_budget_tokens=0)
    got = [nothing.score([r], 5)[0] for r in all_turns[0]]
    _assert_same(got, want[:T])
    assert nothing.tokens_processed == sum(r.spans[0][1] - 1 for r in all_turns[0])
    assert len(nothing.cache_pool) == 0


def test_eight_threads_random_calls_are_thread_safe(tiny_model, tiny_tokenizer):
    gen = torch.Generator().manual_seed(5)
    base = torch.randint(20, 2000, (50,), generator=gen).tolist()
    requests = []
    for i in range(24):
        tail = torch.randint(20, 2000, (5 + i % 7,), generator=gen).tolist()
        ids = base[: 20 + i] + tail
        requests.append(ScoreRequest(ids, [(15 + i % 5, len(ids))]))
    want = _reference(tiny_model, tiny_tokenizer, requests, topk=3)
    shared = _teacher(tiny_model, tiny_tokenizer, cache_budget_tokens=150, batch_window_ms=5)
    results: dict[int, list] = {}

    def work(w: int) -> None:
        for i in range(w, len(requests), 8):
            results[i] = shared.score([requests[i]], 3)[0]

    threads = [threading.Thread(target=work, args=(w,)) for w in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    _assert_same([results[i] for i in range(len(requests))], want)


def test_candidate_logprobs_gather_the_same_rows(tiny_model, tiny_tokenizer):
    gen = torch.Generator().manual_seed(9)
    ids = torch.randint(20, 2000, (70,), generator=gen).tolist()
    spans = [(10, 25), (25, 25), (40, 70)]
    cands = [torch.randint(0, 2048, (15, 4), generator=gen).numpy(), np.zeros((0, 2), np.int64),
             None]
    with torch.no_grad():
        ref = torch.log_softmax(tiny_model(torch.tensor([ids])).logits[0].float(), -1)
    plain = ScoreRequest(ids, spans)
    asked = ScoreRequest(ids, spans, cands)
    teacher = _teacher(tiny_model, tiny_tokenizer, chunk_rows=4)
    got_plain, got = teacher.score([plain, asked], 5)
    want0 = ref[9:24].gather(1, torch.as_tensor(cands[0]))
    np.testing.assert_allclose(got[0].candidate_logprobs, want0.numpy(), atol=1e-5, rtol=0)
    assert got[0].candidate_logprobs.dtype == np.float32
    assert got[1].candidate_logprobs.shape == (0, 2) and got[2].candidate_logprobs is None
    assert all(s.candidate_logprobs is None for s in got_plain)
    np.testing.assert_allclose(got[2].token_logprobs, got_plain[2].token_logprobs, atol=TOL)
    # The student's own top-K as candidates reproduce the teacher's top-K when they coincide.
    top = ScoreRequest(ids, [(40, 70)], [got[2].topk_ids])
    (again,) = teacher.score([top], 5)[0]
    np.testing.assert_allclose(again.candidate_logprobs, got[2].topk_logprobs, atol=TOL)


def test_bad_options_and_candidates_give_clear_errors(tiny_model, tiny_tokenizer):
    with pytest.raises(ConfigError, match="budget"):
        _teacher(tiny_model, tiny_tokenizer, cache_budget_tokens=-1)
    with pytest.raises(ConfigError, match="not both"):
        _teacher(tiny_model, tiny_tokenizer, cache_budget_tokens=10, cache_budget_bytes=10)
    with pytest.raises(ConfigError, match="batch_tokens"):
        _teacher(tiny_model, tiny_tokenizer, batch_tokens=0)
    t = _teacher(tiny_model, tiny_tokenizer, cache_budget_bytes=10 * 2**20)
    assert t.cache_pool.budget_tokens == 10 * 2**20 // t.kv_bytes_per_token > 0
    with pytest.raises(ValueError, match="expected \\[2, C\\]"):
        ScoreRequest([1, 2, 3], [(1, 3)], [np.zeros((3, 2), np.int64)])
    with pytest.raises(ValueError, match="one per span"):
        ScoreRequest([1, 2, 3], [(1, 3)], [])
    with pytest.raises(ValueError, match="integer token ids"):
        ScoreRequest([1, 2, 3], [(1, 3)], [np.zeros((2, 2))])
    with pytest.raises(ValueError, match="candidates\\[0\\] holds token id 5000"):
        t.score([ScoreRequest([1, 2, 3], [(1, 3)], [np.full((2, 1), 5000)])], 2)
    with pytest.raises(ModelError, match="unsupported by this backend"):
        reject_candidates([ScoreRequest([1, 2, 3], [(1, 3)], [np.ones((2, 1), np.int64)])], "x")
    reject_candidates([ScoreRequest([1, 2, 3], [(1, 3)], [None])], "x")  # nothing asked: fine


def test_shared_prefix_requests_in_one_call_then_next_turns(tiny_model, tiny_tokenizer):
    gen = torch.Generator().manual_seed(13)
    system = torch.randint(20, 2000, (20,), generator=gen).tolist()
    tails = [torch.randint(20, 2000, (60,), generator=gen).tolist() for _ in range(4)]
    firsts = [ScoreRequest(system + t, [(len(system) + 40, len(system) + 60)]) for t in tails]
    want = _reference(tiny_model, tiny_tokenizer, firsts)
    teacher = _teacher(tiny_model, tiny_tokenizer)
    _assert_same(teacher.score(firsts, 5), want)
    # The common prefix is reused (waves), not re-run for each of the four.
    assert teacher.tokens_processed == 20 + 4 * (80 - 1 - 20)
    passes = teacher.forward_passes
    # The next turns extend each first turn's cache: one more pass, only their new rows.
    nexts = [ScoreRequest(list(r.ids) + t[:10], [(len(r.ids) + 2, len(r.ids) + 10)])
             for r, t in zip(firsts, tails, strict=True)]
    before = teacher.tokens_processed
    _assert_same(teacher.score(nexts, 5), _reference(tiny_model, tiny_tokenizer, nexts))
    assert teacher.forward_passes == passes + 1
    # Known limit: each first turn extended (and so consumed) its predecessor's cache, so only
    # the last one is still pooled: the continuations reuse less than their own turn, but
    # still fewer rows than a full re-prefill; the scores are the same either way.
    assert teacher.tokens_processed - before < 4 * (90 - 1)
