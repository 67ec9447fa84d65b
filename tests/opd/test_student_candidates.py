"""The teacher scores the student's own top-K candidates (issue 11 point 3): a policy that
returns its top-K ids per sampled token gets the teacher's logprobs of exactly those ids."""

from __future__ import annotations

import numpy as np
import pytest

from opd_gym.agents.hf import TransformersPolicy
from opd_gym.errors import ModelError
from opd_gym.opd.teachers import ScoreRequest, TransformersTeacher
from opd_gym.opd.teachers.base import reject_candidates
from opd_gym.opd.wrapper import OPDWrapper
from opd_gym.records.opd_record import OPDRecord

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # local backend notice


def make_env(max_turns: int):
    import warnings

    import gymnasium as gym

    import opd_gym  # noqa: F401  (registers the env)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return gym.make("opd_gym/Coding-v0", tasks=["fizzbuzz"], sandbox="local", pool_size=1,
                        max_turns=max_turns)


@pytest.fixture(scope="module")
def teacher(tiny_model, tiny_tokenizer):
    return TransformersTeacher(tiny_model, tokenizer=tiny_tokenizer)


@pytest.mark.parametrize("delivery,scope", [("per_step", "turn"), ("per_episode", "episode")])
def test_same_model_no_hint_candidates_are_the_teachers_own_top_k(
        tiny_model, tiny_tokenizer, teacher, delivery, scope):
    """Teacher = student and no hint: the student's top-4 ids are the teacher's top-4 ids and
    the candidate logprobs equal the teacher's top-4 logprobs, at every position."""
    policy = TransformersPolicy(tiny_model, tokenizer=tiny_tokenizer, max_new_tokens=24,
                                seed=5, student_topk=4)
    env = OPDWrapper(make_env(max_turns=2), teacher=teacher,
                     student_tokenizer=teacher.tokenizer, judge=None, topk=6,
                     delivery=delivery, hint_scope=scope)
    obs, info = env.reset(seed=0)
    records, actions = [], []
    for _ in range(2):
        action = policy.act(obs, info)
        actions.append(action)
        obs, _, terminated, truncated, info = env.step(action)
        records += info["opd"]
        if terminated or truncated:
            break
    env.close()
    assert len(records) == len(actions) and all(a.topk_ids for a in actions)
    for record, action in zip(records, actions, strict=True):
        assert record.mask.all()
        assert record.student_topk_ids.tolist() == action.topk_ids
        assert record.teacher_candidate_logprobs.shape == (len(action.token_ids), 4)
        np.testing.assert_array_equal(record.student_topk_ids, record.teacher_topk_ids[:, :4])
        np.testing.assert_allclose(record.teacher_candidate_logprobs,
                                   record.teacher_topk_logprobs[:, :4], atol=1e-5, rtol=0)
        again = OPDRecord.from_dict(record.to_dict())
        np.testing.assert_array_equal(again.student_topk_ids, record.student_topk_ids)
        np.testing.assert_allclose(again.teacher_candidate_logprobs,
                                   record.teacher_candidate_logprobs)


def test_policy_without_top_k_leaves_the_fields_empty(tiny_model, tiny_tokenizer, teacher):
    policy = TransformersPolicy(tiny_model, tokenizer=tiny_tokenizer, max_new_tokens=8, seed=1)
    env = OPDWrapper(make_env(max_turns=1), teacher=teacher,
                     student_tokenizer=teacher.tokenizer, judge=None, topk=3)
    obs, info = env.reset(seed=0)
    action = policy.act(obs, info)
    *_, info = env.step(action)
    env.close()
    [record] = info["opd"]
    assert action.topk_ids is None
    assert record.student_topk_ids is None and record.teacher_candidate_logprobs is None
    assert "student_topk_ids" not in record.to_dict()


def test_backends_that_cannot_score_given_ids_say_so():
    request = ScoreRequest([1, 2, 3], [(1, 3)], candidates=[np.array([[4, 5], [6, 7]])])
    with pytest.raises(ModelError, match="unsupported by this backend"):
        reject_candidates([request], "vLLM server")
    reject_candidates([ScoreRequest([1, 2, 3], [(1, 3)])], "vLLM server")  # none asked: fine
