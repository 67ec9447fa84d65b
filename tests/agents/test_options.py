"""Teacher and policy options reach every backend: dtype (the checkpoint's by default),
device, max model length, sampling settings, and per-worker / per-episode seeding."""

from __future__ import annotations

import json
import shutil
import warnings

import gymnasium as gym
import numpy as np
import pytest

import opd_gym  # noqa: F401  (registers the env)
from opd_gym.agents.hf import TransformersPolicy
from opd_gym.agents.policies import make_agent_factory
from opd_gym.models.dtypes import checkpoint_dtype, resolve_dtype
from opd_gym.opd.teachers import TransformersTeacher
from opd_gym.opd.teachers import make_teacher as resolve_teacher
from opd_gym.opd.teachers.vllm_launch import server_command
from opd_gym.opd.wrapper import OPDWrapper
from opd_gym.tasks import load_suite

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # local backend notice


@pytest.fixture(scope="module")
def bf16_model_path(tiny_model_path, tmp_path_factory):
    """The tiny model's folder with its config saying bfloat16 (a bf16 checkpoint)."""
    out = tmp_path_factory.mktemp("bf16") / "model"
    shutil.copytree(tiny_model_path, out)
    config = json.loads((out / "config.json").read_text())
    config.pop("torch_dtype", None)
    config["dtype"] = "bfloat16"
    (out / "config.json").write_text(json.dumps(config))
    return out


def test_dtype_defaults_to_the_checkpoints_never_to_vllm_auto(tiny_model_path, bf16_model_path):
    assert checkpoint_dtype(tiny_model_path) == "float32"
    assert checkpoint_dtype(bf16_model_path) == "bfloat16"
    assert resolve_dtype("auto", tiny_model_path) == "float32"
    assert resolve_dtype("fp64", tiny_model_path) == "float64"
    assert resolve_dtype(None, "no/such/hub-name") == "auto"  # the backend decides then
    with pytest.raises(ValueError, match="dtype"):
        resolve_dtype("int8", tiny_model_path)
    argv = server_command(tiny_model_path)
    assert argv[argv.index("--dtype") + 1] == "float32"  # an fp32 checkpoint stays fp32
    assert TransformersTeacher(tiny_model_path).dtype == "float32"
    assert TransformersTeacher(bf16_model_path).dtype == "bfloat16"
    assert str(TransformersPolicy(bf16_model_path).model.dtype) == "torch.bfloat16"
    teacher = resolve_teacher({"spec": f"hf:{tiny_model_path}", "dtype": "float64",
                               "max_model_len": 64})
    assert teacher.dtype == "float64" and teacher.max_model_len == 64


def test_float64_control_through_the_env(tiny_model_path):
    """fp64 student and teacher: the empty-hint control holds to 1e-5 (the fp64 target)."""
    policy = TransformersPolicy(tiny_model_path, dtype="float64", max_new_tokens=24, seed=2)
    teacher = TransformersTeacher(tiny_model_path, dtype="float64")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        env = gym.make("opd_gym/Coding-v0", tasks=["fizzbuzz"], sandbox="local", pool_size=1,
                       max_turns=2)
    env = OPDWrapper(env, teacher=teacher,
                     student_tokenizer=teacher.tokenizer,
                     judge=None, topk=3, delivery="per_episode",
                     hint_scope="episode")
    obs, info = env.reset(seed=0)
    done = False
    while not done:
        obs, _, terminated, truncated, info = env.step(policy.act(obs, info))
        done = terminated or truncated
    env.close()
    for record in info["opd"]:
        assert record.mask.all()
        worst = np.abs(record.teacher_token_logprobs.astype(np.float64)
                       - record.student_logprobs).max()
        assert worst <= 1e-5


def test_policy_options_and_per_worker_generators(tiny_model_path):
    tasks = load_suite()
    make = make_agent_factory(f"hf:{tiny_model_path}", tasks, seed=5, temperature=0.5,
                              top_p=0.9, max_new_tokens=7, dtype="float64", max_model_len=900,
                              device=None)
    first, second = make(None), make(None)
    assert first.model is second.model  # one model shared by the workers
    assert first._generator is not second._generator and (first.seed, second.seed) == (5, 6)
    assert (first.temperature, first.top_p, first.max_new_tokens) == (0.5, 0.9, 7)
    assert first.max_model_len == 900 and str(first.model.dtype) == "torch.float64"
    messages = [{"role": "user", "content": "Write fizzbuzz."}]
    one = first.sample(messages, None)
    assert len(one.token_ids) <= 7
    # draws depend on the episode seed, not on which worker's agent plays it
    first.seed_episode(42)
    second.seed_episode(42)
    assert first.sample(messages, None).token_ids == second.sample(messages, None).token_ids
    with pytest.raises(ValueError, match="server"):
        make_agent_factory("vllm:http://127.0.0.1:9", tasks, dtype="float32")
    with pytest.raises(ValueError, match="unknown policy option"):
        make_agent_factory("demo", tasks, beam_width=4)
    with pytest.raises(ValueError, match="max_model_len"):
        TransformersPolicy(tiny_model_path, max_model_len=10).sample(messages, None)


@pytest.mark.parametrize("temperature,top_p", [(0.5, 1.0), (1.7, 1.0), (0.5, 0.9)])
def test_policy_logprobs_are_of_the_distribution_it_sampled_from(tiny_model_path, temperature,
                                                                  top_p):
    """Sampling at T (and top-p): each recorded logprob is log softmax(logits / T) of the
    token, renormalised over the nucleus, recomputed here in fp64 from one forward pass."""
    import torch

    policy = TransformersPolicy(tiny_model_path, max_new_tokens=12, temperature=temperature,
                                top_p=top_p, seed=3, dtype="float64")
    messages = [{"role": "user", "content": "Write fizzbuzz."}]
    out = policy.sample(messages, None)
    assert policy.logprob_temperature == temperature
    ids = torch.tensor([out.prompt_ids + out.token_ids])
    with torch.no_grad():
        logits = policy.model(input_ids=ids).logits[0].double()
    rows = logits[len(out.prompt_ids) - 1:len(out.prompt_ids) - 1 + len(out.token_ids)]
    logp = torch.log_softmax(rows / temperature, dim=-1)
    want = []
    for row, token in zip(logp, out.token_ids, strict=True):
        sorted_p, order = row.exp().sort(descending=True)
        keep = order[(sorted_p.cumsum(0) - sorted_p) < top_p]
        want.append(float(row[token] - torch.logsumexp(row[keep], dim=0)))
    np.testing.assert_allclose(out.logprobs, want, atol=1e-6)
    untempered = torch.log_softmax(rows, dim=-1)[torch.arange(len(out.token_ids)),
                                                 torch.tensor(out.token_ids)]
    assert np.abs(np.array(out.logprobs) - untempered.numpy()).max() > 1e-3  # not the raw ones
