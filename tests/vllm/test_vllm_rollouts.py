"""The vLLM path end to end on a real env: VLLMPolicy rollouts, server teacher, server judge."""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest

import opd_gym  # noqa: F401  (registers the env)
from opd_gym.actions import TokenText
from opd_gym.opd.judges import JudgeInput, LLMJudge, structured_votes
from opd_gym.opd.wrapper import OPDWrapper
from opd_gym.records.opd_record import OPDRecord

pytestmark = [pytest.mark.vllm, pytest.mark.filterwarnings("ignore::RuntimeWarning")]

ALIGNMENT_TOL = 1e-3  # the bar; the measured max |delta| is printed (0 or ~1e-6 here)
# A tiny random model cannot follow the judge's format: constrain it (short, parseable).
JUDGE_REGEX = (r"\\boxed\{-1\}|\\boxed\{1\} \[HINT_START\][A-Za-z][A-Za-z ,.]{9,40}"
               r"\[HINT_END\]")


def make_env(max_turns: int = 3):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return gym.make("opd_gym/Coding-v0", tasks=["fizzbuzz"], sandbox="local", pool_size=1,
                        max_turns=max_turns)


@pytest.fixture(scope="module")
def policy(vllm_server, tiny_tokenizer):
    from opd_gym.agents.vllm import VLLMPolicy

    agent = VLLMPolicy(f"{vllm_server.url}/v1", tokenizer=tiny_tokenizer, max_tokens=48, seed=11)
    yield agent
    agent.close()


def rollout(env, policy, turns: int):
    obs, info = env.reset(seed=0)
    policy.reset(obs, info)
    steps = []
    for _ in range(turns):
        action = policy.act(obs, info)
        obs, _, terminated, truncated, info = env.step(action)
        steps.append((action, info))
        if terminated or truncated:
            break
    return steps


def test_policy_returns_token_exact_turns(policy, tiny_tokenizer, tools):
    messages = [{"role": "system", "content": "Be brief."},
                {"role": "user", "content": "List the files."}]
    first = policy.sample(messages, tools)
    assert isinstance(first, TokenText)
    assert len(first.token_ids) == len(first.logprobs) >= 1
    assert all(lp <= 0 for lp in first.logprobs)
    body = first.token_ids[:-1] if first.token_ids[-1] == tiny_tokenizer.eos_token_id \
        else first.token_ids
    assert str(first) == tiny_tokenizer.decode(body, skip_special_tokens=False)
    # The prompt ids are the chat template with the tools schema, verbatim.
    from opd_gym.opd.chat import render_ids

    assert first.prompt_ids == render_ids(tiny_tokenizer, messages, tools,
                                          add_generation_prompt=True)


@pytest.mark.parametrize("sampling", [{"temperature": 0.5}, {"top_p": 0.9},
                                      {"extra_body": {"top_k": 5}}])
def test_policy_gives_no_logprobs_off_its_sampling_distribution(vllm_server, tiny_tokenizer,
                                                                 tools, sampling):
    """vLLM's default logprobs are of the raw distribution: at T != 1 or under a filter they
    are not those of the distribution the tokens came from, so the turn carries none."""
    from opd_gym.agents.vllm import VLLMPolicy

    messages = [{"role": "user", "content": "List the files."}]
    agent = VLLMPolicy(f"{vllm_server.url}/v1", tokenizer=tiny_tokenizer, max_tokens=8, seed=3,
                       **sampling)
    try:
        turn = agent.sample(messages, tools)
        assert turn.token_ids and turn.logprobs is None
    finally:
        agent.close()


def test_alignment_control_through_vllm(policy, vllm_server, record_property):
    """Empty hint, teacher = student, both on the vLLM server: teacher lp == student lp."""
    env = OPDWrapper(make_env(), teacher=f"vllm:{vllm_server.url}", judge=None, topk=5,
                     student_tokenizer=policy.tokenizer)
    steps = rollout(env, policy, 3)
    env.close()
    worst = 0.0
    for action, info in steps:
        [record] = info["opd"]
        assert isinstance(record, OPDRecord) and record.scored and not record.retokenized
        assert record.token_ids.tolist() == action.token_ids and record.mask.all()
        assert record.hint is None
        worst = max(worst, float(np.abs(record.teacher_token_logprobs -
                                        record.student_logprobs).max()))
    record_property("alignment_max_abs_delta", worst)
    print(f"alignment control via vLLM: max |teacher - student| = {worst:.2e} "
          f"over {sum(r.num_tokens for _, i in steps for r in i['opd'])} tokens")
    assert worst <= ALIGNMENT_TOL


def test_judge_votes_parse_through_the_server(vllm_server):
    """n votes from one seeded request, constrained to the judge format, all parse."""
    judge = LLMJudge(f"{vllm_server.url}/v1", votes=4, seed=3, max_tokens=64, temperature=1.0,
                     rule="any", extra_body=structured_votes(JUDGE_REGEX))
    turn = JudgeInput(index=0, task="Write fizzbuzz(n).", text="ls",
                      tool_results=[{"name": "terminal", "output": "", "exit_code": 0}])
    try:
        first = judge(turn, "solution.py: No such file")
        again = judge(turn, "solution.py: No such file")
    finally:
        judge.close()
    assert first.error is None and len(first.votes) == 4 and first.unparseable == 0
    assert {v["score"] for v in first.votes} <= {1, -1}
    assert [v["raw"] for v in first.votes] == [v["raw"] for v in again.votes]  # seeded
    if any(v["score"] == 1 for v in first.votes):
        assert first.hint and first.hint in [v["hint"] for v in first.votes]


def test_wrapper_with_server_judge_and_teacher(policy, vllm_server, server_teacher):
    """Hints from the vLLM judge go into the vLLM teacher's input; every turn is scored."""
    judge = {"type": "vllm", "url": f"{vllm_server.url}/v1", "seed": 5, "max_tokens": 64,
             "temperature": 1.0, "extra_body": structured_votes(JUDGE_REGEX)}
    env = OPDWrapper(make_env(), teacher=server_teacher, judge=judge, votes=3, topk=8,
                     vote_rule="any", delivery="per_episode", student_tokenizer=policy.tokenizer)
    steps = rollout(env, policy, 3)
    env.close()
    records = steps[-1][1]["opd"]
    assert [r.turn_index for r in records] == list(range(len(steps)))
    for record in records:
        assert record.scored and record.error is None and len(record.votes) == 3
        assert record.teacher_topk_ids.shape == (record.num_tokens, 8)
    hinted = [r for r in records if r.hint]
    for record in hinted:
        # with a hint in its context the teacher no longer reproduces the student exactly
        assert np.abs(record.teacher_token_logprobs - record.student_logprobs).max() > 1e-4


def test_openai_chat_policy_plays_through_the_real_server(vllm_server):
    """The openai: policy (chat with the tools schema) against vLLM's chat endpoint: the tiny
    model's text is garbage, so the env answers with format errors, and nothing crashes."""
    from opd_gym.agents.policies import OpenAIChatPolicy

    policy = OpenAIChatPolicy(f"{vllm_server.url}/v1", max_tokens=20, temperature=1.0)
    env = make_env(max_turns=2)
    obs, info = env.reset(seed=0)
    policy.reset(obs, info)
    steps = 0
    while True:
        action = policy.act(obs, info)
        assert action["role"] == "assistant" and isinstance(action["content"], str)
        obs, reward, terminated, truncated, info = env.step(action)
        steps += 1
        if terminated or truncated:
            break
    env.close()
    assert steps == 2 and truncated
    assert info["messages"][2]["role"] == "assistant"
