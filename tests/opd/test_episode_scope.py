"""Episode scope scores the student's exact contexts: the empty-hint control through the env."""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest

import opd_gym  # noqa: F401  (registers the env)
from opd_gym.agents.hf import TransformersPolicy
from opd_gym.opd.teachers import TransformersTeacher
from opd_gym.opd.wrapper import OPDWrapper

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # local backend notice


def play(model, tokenizer, teacher, scope, *, turns=4, seed=3, **options):
    """One episode sampled by the policy; returns the records and the policy's actions."""
    policy = TransformersPolicy(model, tokenizer=tokenizer, max_new_tokens=48, seed=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        env = gym.make("opd_gym/Coding-v0", tasks=["fizzbuzz"], sandbox="local", pool_size=1,
                       max_turns=turns)
    env = OPDWrapper(env, teacher=teacher,
                     student_tokenizer=teacher.tokenizer,
                     judge=None, topk=5, delivery="per_episode",
                     hint_scope=scope, **options)
    obs, info = env.reset(seed=0)
    actions = []
    while True:
        action = policy.act(obs, info)
        actions.append(action)
        obs, _, terminated, truncated, info = env.step(action)
        if terminated or truncated:
            break
    env.close()
    return info["opd"], actions


@pytest.mark.parametrize("scope", ["turn", "episode"])
def test_empty_hint_control_holds_in_both_scopes(tiny_model, tiny_tokenizer, scope):
    teacher = TransformersTeacher(tiny_model, tokenizer=tiny_tokenizer)
    records, actions = play(tiny_model, tiny_tokenizer, teacher, scope)
    assert len(records) == len(actions) >= 2
    worst = 0.0
    for record, action in zip(records, actions, strict=True):
        assert record.token_ids.tolist() == action.token_ids and record.mask.all()
        assert "the student's prompt ids" in record.context
        worst = max(worst, float(np.abs(record.teacher_token_logprobs
                                        - record.student_logprobs).max()))
    print(f"empty-hint control, tiny template, transformers, {scope} scope: max |d| {worst:.2e}")
    assert worst <= 5e-5


def test_history_rewrite_is_split_or_refused_never_guessed(tiny_model, tiny_tokenizer):
    """Prompt ids that do not extend the episode so far: a new pass, or unscored by option."""
    teacher = TransformersTeacher(tiny_model, tokenizer=tiny_tokenizer)

    class Rewriting(TransformersPolicy):
        """Prompts every turn after the first with one extra leading token (history rewritten)."""

        def act(self, observation, info):
            out = super().act(observation, info)
            if len(info["messages"]) > 2:
                out.prompt_ids = [out.prompt_ids[0], *out.prompt_ids]
            return out

    def run(**options):
        policy = Rewriting(tiny_model, tokenizer=tiny_tokenizer, max_new_tokens=32, seed=5)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            env = gym.make("opd_gym/Coding-v0", tasks=["fizzbuzz"], sandbox="local",
                           pool_size=1, max_turns=3)
        env = OPDWrapper(env, teacher=teacher,
                         student_tokenizer=teacher.tokenizer, judge=None, topk=3,
                         delivery="per_episode",
                         hint_scope="episode", **options)
        obs, info = env.reset(seed=0)
        while True:
            obs, _, terminated, truncated, info = env.step(policy.act(obs, info))
            if terminated or truncated:
                break
        env.close()
        return info["opd"]

    split = run()
    assert "new pass" not in split[0].context
    assert "does not extend the sequence" in split[1].context and split[1].mask.all()
    refused = run(on_history_rewrite="refuse")
    assert refused[0].scored and not refused[1].scored
    assert "history rewritten" in refused[1].error
