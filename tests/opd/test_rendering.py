"""One rendering: the wrapper offers the student's prompt (ids under its tokenizer, built as
the teacher's context is); an agent that renders its own prompt and passes no prompt ids gets
records marked reconstructed, and the summary warns with their share. Real SmolLM2."""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest

import opd_gym  # noqa: F401  (registers the env)
from opd_gym import specs
from opd_gym.actions import TokenText
from opd_gym.agents.hf import TransformersPolicy
from opd_gym.opd.metrics import OPDMetrics
from opd_gym.opd.wrapper import OPDWrapper
from opd_gym.runs.summary import RunSummary
from opd_gym.transcript import prompt_ids

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def make_env():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return gym.make("opd_gym/Coding-v0", tasks=["fizzbuzz"], sandbox="local", pool_size=1,
                        max_turns=2)


class OwnTemplateAgent:
    """Renders the chat with the model's own template from info["messages"] (tool calls as
    the template drops them) and passes the sampled ids, but no prompt ids."""

    def __init__(self, policy: TransformersPolicy) -> None:
        self.policy = policy

    def act(self, observation, info):
        tok = self.policy.tokenizer
        own = tok.apply_chat_template(info["messages"], add_generation_prompt=True,
                                      tokenize=True, return_dict=False)
        out = self.policy.sample(info["messages"], info.get("tools"), prompt_ids=list(own))
        return TokenText(str(out), token_ids=out.token_ids, logprobs=out.logprobs)


@pytest.fixture(scope="module")
def smollm2_policy():
    return TransformersPolicy(specs.model_path("smollm2"), max_new_tokens=12, seed=0,
                              dtype="float32")


def _play(env, act, turns=2):
    obs, info = env.reset(seed=0)
    first = info
    records = []
    for _ in range(turns):
        obs, _r, term, trunc, info = env.step(act(obs, info))
        records += info["opd"]
        if term or trunc:
            break
    return first, records


def test_wrapper_offers_the_students_prompt_and_policies_use_it(smollm2_policy):
    env = OPDWrapper(make_env(), teacher="smollm2", judge=None, topk=2,
                     student_tokenizer="smollm2", student_temperature=1.0)
    first, records = _play(env, smollm2_policy.act)
    offered = first["student_prompt"]
    tok = smollm2_policy.tokenizer
    assert offered["ids"] == prompt_ids(tok, first["messages"], first["tools"])
    assert offered["text"] == tok.decode(offered["ids"], skip_special_tokens=False)
    assert records and not any(r.reconstructed for r in records)
    assert all(r.student_temperature == 1.0 and r.teacher_temperature == 1.0 for r in records)
    for r in records:  # same model, no hint, exact context: the teacher is the student
        np.testing.assert_allclose(r.teacher_token_logprobs[r.mask], r.student_logprobs[r.mask],
                                   atol=2e-4)
    env.close()


def test_own_template_agent_is_marked_reconstructed_and_warned(smollm2_policy):
    env = OPDWrapper(make_env(), teacher="smollm2", judge=None, topk=2,
                     student_tokenizer="smollm2")
    _, records = _play(env, OwnTemplateAgent(smollm2_policy).act)
    assert records and all(r.reconstructed for r in records)
    assert all(r.to_dict()["reconstructed"] is True for r in records)
    metrics = OPDMetrics()
    metrics.episode(records)
    assert metrics.summary()["opd/reconstructed_rate"] == 1.0
    table = RunSummary(episodes=1, metrics=metrics).table()
    assert "reconstructed" in table and "100% of" in table and "WARNING" in table
    env.close()
