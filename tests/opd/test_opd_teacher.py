"""TransformersTeacher: alignment control, KV reuse == re-prefill, exact top-K, clear errors."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

from opd_gym.opd.chat import build_episode_ids, build_teacher_ids, render_ids
from opd_gym.opd.teachers import ScoreRequest, TransformersTeacher, make_teacher

NEAR_TIE = 1e-5


def _teacher(tiny_model, tiny_tokenizer, **kwargs) -> TransformersTeacher:
    return TransformersTeacher(tiny_model, tokenizer=tiny_tokenizer, **kwargs)


def _sample(model, prompt_ids, max_new_tokens, eos_id, seed):
    """The student: a manual sampling loop (KV cache, one token at a time, temperature 1)."""
    from transformers import DynamicCache

    gen = torch.Generator().manual_seed(seed)
    cache = DynamicCache(config=model.config)
    ids, logprobs = [], []
    step_input = torch.tensor([prompt_ids])
    with torch.no_grad():
        for _ in range(max_new_tokens):
            out = model(input_ids=step_input, past_key_values=cache, use_cache=True)
            logp = torch.log_softmax(out.logits[0, -1].float(), dim=-1)
            token = int(torch.multinomial(logp.exp(), 1, generator=gen))
            ids.append(token)
            logprobs.append(float(logp[token]))
            if token == eos_id:
                break
            step_input = torch.tensor([[token]])
    return ids, np.array(logprobs, np.float32)


def _full_logprobs(model, ids) -> torch.Tensor:
    with torch.no_grad():
        return torch.log_softmax(model(torch.tensor([ids])).logits[0].float(), dim=-1)


def assert_topk_match(a_ids, a_lp, b_ids, b_lp, tol=1e-4):
    """Same top-K ids except swaps between near-tied entries; logprobs within `tol`."""
    np.testing.assert_allclose(a_lp, b_lp, atol=tol, rtol=0)
    k = a_ids.shape[1]
    for r, c in zip(*np.nonzero(a_ids != b_ids), strict=True):
        # A swap with a neighbour (or, in the last column, with the unseen K+1-th entry).
        neighbours = [a_lp[r, j] for j in (c - 1, c + 1) if 0 <= j < k]
        if c == k - 1:
            neighbours.append(b_lp[r, c])
        tied = any(abs(a_lp[r, c] - v) < NEAR_TIE for v in neighbours)
        assert tied, f"top-K id mismatch at row {r} col {c} is not a near-tie"


def test_alignment_control_no_hint_equals_student(tiny_model, tiny_tokenizer, tools, episode):
    turns, _ = episode
    context = turns[2].context_messages
    prompt = render_ids(tiny_tokenizer, context, tools, add_generation_prompt=True)
    student_ids, student_lp = _sample(tiny_model, prompt, 48, tiny_tokenizer.eos_token_id, 7)
    ids, span = build_teacher_ids(tiny_tokenizer, context, tools, None, student_ids)
    assert ids[span[0]:span[1]] == student_ids and ids[:span[0]] == prompt
    teacher = _teacher(tiny_model, tiny_tokenizer, chunk_rows=16)
    (scores,) = teacher.score([ScoreRequest(ids, [span])], topk=8)[0]
    assert scores.token_logprobs.dtype == np.float32 and len(scores) == len(student_ids)
    np.testing.assert_allclose(scores.token_logprobs, student_lp, atol=1e-5, rtol=0)


def test_kv_reuse_matches_full_reprefill(tiny_model, tiny_tokenizer, tools, episode):
    turns, hints = episode
    requests = []
    for turn, hint in zip(turns, hints, strict=True):
        ids, span = build_teacher_ids(tiny_tokenizer, turn.context_messages, tools, hint,
                                      turn.student_ids)
        requests.append(ScoreRequest(ids, [span]))
    full = _teacher(tiny_model, tiny_tokenizer, reuse_cache=False)
    reuse = _teacher(tiny_model, tiny_tokenizer, reuse_cache=True, chunk_rows=32)
    expected = full.score(requests, topk=10)
    got = [reuse.score([req], topk=10)[0] for req in requests]  # turn by turn, like a wrapper
    for (e,), (g,) in zip(expected, got, strict=True):
        np.testing.assert_allclose(g.token_logprobs, e.token_logprobs, atol=1e-4, rtol=0)
        assert_topk_match(g.topk_ids, g.topk_logprobs, e.topk_ids, e.topk_logprobs)
    total = sum(len(r.ids) for r in requests)
    assert full.tokens_processed == sum(r.spans[0][1] - 1 for r in requests)
    assert reuse.tokens_processed < 0.6 * total  # only hint + response + new context rows

    batched = _teacher(tiny_model, tiny_tokenizer, chunk_rows=32).score(requests[::-1], topk=10)
    for (b,), (e,) in zip(batched, expected[::-1], strict=True):
        np.testing.assert_allclose(b.token_logprobs, e.token_logprobs, atol=1e-4, rtol=0)


def test_episode_scope_one_pass_equals_turn_scope(tiny_model, tiny_tokenizer, tools, episode):
    turns, _ = episode
    ids, spans = build_episode_ids(tiny_tokenizer, turns, tools)
    teacher = _teacher(tiny_model, tiny_tokenizer, chunk_rows=24)
    episode_scores = teacher.score([ScoreRequest(ids, spans)], topk=4)[0]
    assert len(episode_scores) == len(turns)
    for turn, got in zip(turns, episode_scores, strict=True):
        t_ids, t_span = build_teacher_ids(tiny_tokenizer, turn.context_messages, tools, None,
                                          turn.student_ids)
        (want,) = _teacher(tiny_model, tiny_tokenizer, reuse_cache=False).score(
            [ScoreRequest(t_ids, [t_span])], topk=4)[0]
        np.testing.assert_allclose(got.token_logprobs, want.token_logprobs, atol=1e-4, rtol=0)
        assert_topk_match(got.topk_ids, got.topk_logprobs, want.topk_ids, want.topk_logprobs)


@pytest.mark.parametrize("chunk_rows", [1, 7, 512])
def test_topk_sorted_contains_argmax_and_matches_log_softmax(tiny_model, tiny_tokenizer,
                                                             chunk_rows):
    gen = torch.Generator().manual_seed(3)
    ids = torch.randint(20, len(tiny_tokenizer), (90,), generator=gen).tolist()
    spans = [(10, 30), (30, 31), (50, 50), (60, 90)]
    teacher = _teacher(tiny_model, tiny_tokenizer, chunk_rows=chunk_rows, prefill_chunk=5)
    scores = teacher.score([ScoreRequest(ids, spans)], topk=6)[0]
    ref = _full_logprobs(tiny_model, ids)
    for (s, e), sc in zip(spans, scores, strict=True):
        assert sc.token_logprobs.shape == (e - s,) and sc.topk_ids.shape == (e - s, 6)
        if e == s:
            continue
        assert sc.topk_ids.dtype == np.int32 and sc.topk_logprobs.dtype == np.float32
        assert (np.diff(sc.topk_logprobs, axis=1) <= 0).all()
        rows = ref[s - 1:e - 1]
        np.testing.assert_array_equal(sc.topk_ids[:, 0], rows.argmax(-1).numpy())
        want = rows.gather(1, torch.tensor(ids[s:e])[:, None])[:, 0].numpy()
        np.testing.assert_allclose(sc.token_logprobs, want, atol=1e-5, rtol=0)
        values, _ = rows.topk(6)
        np.testing.assert_allclose(sc.topk_logprobs, values.numpy(), atol=1e-5, rtol=0)
        assert (sc.topk_logprobs[:, 0] >= sc.token_logprobs - 1e-6).all()


def test_zero_topk_and_empty_spans(tiny_model, tiny_tokenizer):
    teacher = _teacher(tiny_model, tiny_tokenizer)
    (a, b) = teacher.score([ScoreRequest([1, 2, 3, 4], [(2, 4), (4, 4)])], topk=0)[0]
    assert a.topk_ids.shape == (2, 0) and np.isfinite(a.token_logprobs).all()
    assert len(b) == 0


def test_errors_are_clear(tiny_model, tiny_tokenizer, tiny_model_path):
    teacher = _teacher(tiny_model, tiny_tokenizer)
    request = ScoreRequest([1, 2, 3], [(1, 3)])
    with pytest.raises(ValueError, match="exceeds the teacher's vocabulary size 2048"):
        teacher.score([request], topk=5000)
    with pytest.raises(ValueError, match="outside the teacher's vocabulary"):
        teacher.score([ScoreRequest([1, 99999, 3], [(1, 3)])], topk=2)
    with pytest.raises(ValueError, match="max_position_embeddings 4096"):
        teacher.score([ScoreRequest([1] * 5000, [(1, 3)])], topk=2)
    with pytest.raises(ValueError, match="start must be >= 1"):
        ScoreRequest([1, 2, 3], [(0, 2)])
    with pytest.raises(ValueError, match="outside"):
        ScoreRequest([1, 2, 3], [(1, 4)])
    with pytest.raises(TypeError):
        teacher.score([([1, 2], [(1, 2)])], topk=2)
    with pytest.raises(ValueError, match="SCHEME:TARGET"):
        make_teacher(str(tiny_model_path))
    with pytest.raises(ValueError, match="unknown teacher scheme"):
        make_teacher(f"nope:{tiny_model_path}")


def test_make_teacher_loads_from_path(tiny_model_path, tiny_tokenizer):
    teacher = make_teacher(f"hf:{tiny_model_path}", chunk_rows=8)
    assert teacher.vocab_size == len(tiny_tokenizer) and teacher.name == str(tiny_model_path)
    (scores,) = teacher.score([ScoreRequest([5, 6, 7, 8], [(1, 4)])], topk=3)[0]
    assert np.isfinite(scores.token_logprobs).all()


def test_bfloat16_teacher_is_close_to_fp32(tiny_model_path, tiny_model, tiny_tokenizer):
    ids = list(range(40, 140))
    request = ScoreRequest(ids, [(50, 100)])
    (want,) = _teacher(tiny_model, tiny_tokenizer).score([request], topk=4)[0]
    bf16 = make_teacher(f"hf:{tiny_model_path}", dtype="bfloat16")
    assert bf16.model.dtype == torch.bfloat16
    (got,) = bf16.score([request], topk=4)[0]
    assert got.token_logprobs.dtype == np.float32
    np.testing.assert_allclose(got.token_logprobs, want.token_logprobs, atol=0.1, rtol=0)
    with pytest.raises(ValueError, match="dtype"):
        make_teacher(f"hf:{tiny_model_path}", dtype="int8")


def test_score_is_thread_safe(tiny_model, tiny_tokenizer):
    gen = torch.Generator().manual_seed(11)
    base = torch.randint(20, 2000, (60,), generator=gen).tolist()
    requests = [ScoreRequest(base + [100 + i] * 10, [(55, 70)]) for i in range(6)]
    expected = _teacher(tiny_model, tiny_tokenizer, reuse_cache=False).score(requests, topk=3)
    shared = _teacher(tiny_model, tiny_tokenizer)
    results: dict[int, list] = {}

    def work(i: int) -> None:
        results[i] = shared.score([requests[i]], topk=3)[0]

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(requests))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for i, (want,) in enumerate(expected):
        np.testing.assert_allclose(results[i][0].token_logprobs, want.token_logprobs,
                                   atol=1e-4, rtol=0)
    shared.reset_cache()
    assert shared.score([requests[0]], topk=3)[0][0].token_logprobs.shape == (15,)
