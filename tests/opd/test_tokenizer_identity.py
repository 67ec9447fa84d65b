"""Tokenizer identity wherever a student meets a teacher: the real tiny/SmolLM2 pair, both
ways, through the CLI and the rollout API (the Ray path: tests/distributed)."""

from __future__ import annotations

import pytest

from opd_gym import specs
from opd_gym.agents.policies import make_agent_factory
from opd_gym.cli import main
from opd_gym.errors import ConfigError
from opd_gym.opd.chat import tokenizer_difference
from opd_gym.rollout import RolloutConfig, run_rollout
from opd_gym.tasks import load_suite

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

PAIRS = [("tiny", "smollm2"), ("smollm2", "tiny")]


@pytest.mark.parametrize("policy,teacher", PAIRS)
def test_cli_refuses_the_pair_before_writing_anything(policy, teacher, tmp_path, capsys):
    """`opd-gym rollout --policy A --teacher B` with different tokenizers: exit 2, one line
    naming both sides, no run folder."""
    out = tmp_path / "run"
    rc = main(["rollout", "--policy", policy, "--teacher", teacher, "--episodes", "1",
               "--sandbox", "local", "--out", str(out), "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2
    assert len(err) == 1 and err[0].startswith("opd-gym: error: tokenizers differ")
    assert f"(policy {policy})" in err[0] and f"(teacher {teacher})" in err[0]
    assert not out.exists()


def test_same_tokenizer_passes_every_check():
    """The check compares vocabulary, special tokens, template ids and a text round trip:
    a tokenizer loaded twice passes all of them; the two real ones fail on the vocabulary."""
    for name in ("tiny", "smollm2"):
        assert tokenizer_difference(specs.tokenizer(name), specs.tokenizer(name)) is None
    assert "vocabularies differ" in tokenizer_difference(specs.tokenizer("tiny"),
                                                         specs.tokenizer("smollm2"))


def test_chat_template_and_round_trip_differences_are_caught(tiny_model_path):
    """Same vocabulary, a chat template with other markup: refused on the template ids."""
    from transformers import AutoTokenizer

    tiny = AutoTokenizer.from_pretrained(tiny_model_path)
    other = AutoTokenizer.from_pretrained(tiny_model_path)
    other.chat_template = ("{% for m in messages %}<|im_start|>{{ m.role }}: {{ m.content }}"
                           "<|im_end|>{% endfor %}{% if add_generation_prompt %}<|im_start|>"
                           "assistant:{% endif %}")
    assert "chat templates give different ids" in tokenizer_difference(tiny, other)


@pytest.mark.parametrize("policy,teacher", PAIRS)
def test_rollout_api_refuses_the_pair_before_the_first_episode(policy, teacher, tmp_path):
    """run_rollout learns the student's tokenizer from the agent and stops before any episode
    (no row written) when it is not the teacher's."""
    out = tmp_path / "run"
    config = RolloutConfig(out_dir=str(out), episodes=1, task_ids=["fizzbuzz"],
                           sandbox="local", max_turns=2, opd_options={"topk": 2})
    agent = make_agent_factory(policy, load_suite(), max_new_tokens=4)
    with pytest.raises(ConfigError, match="tokenizers differ.*vocabularies differ"):
        run_rollout(config, agent, teacher=teacher, judge="rule", progress=False)
    rows = out / "trajectories.jsonl"
    assert not rows.exists() or rows.read_text().strip() == ""


def test_cli_run_with_one_tokenizer_records_both_temperatures(tmp_path, capsys):
    """The same tokenizer passes; every record states the student's sampling temperature
    (the policy's logprobs are at it) and the teacher's (1.0)."""
    import json

    out = tmp_path / "run"
    rc = main(["rollout", "--policy", "tiny", "--teacher", "tiny", "--episodes", "1",
               "--max-turns", "1", "--max-new-tokens", "8", "--temperature", "0.5",
               "--sandbox", "local", "--out", str(out), "--quiet", "--no-report"])
    assert rc == 0, capsys.readouterr().err
    [row] = [json.loads(line) for line in (out / "trajectories.jsonl").read_text().splitlines()]
    records = row["opd"]
    assert records and all(r["student_temperature"] == 0.5 and r["teacher_temperature"] == 1.0
                           and r["student_logprobs"] is not None and not r["ids_unchecked"]
                           and not r["reconstructed"] for r in records)


@pytest.mark.parametrize("flags,needle", [
    (["--teacher", "hf:/bad/path"], "the teacher 'hf:/bad/path': no such folder"),
    (["--teacher", "vllm:http://127.0.0.1:9"], "the teacher server http://127.0.0.1:9 does "
                                               "not answer"),
    (["--judge", "openai:http://127.0.0.1:9/v1"], "the judge server"),
    (["--policy", "hf:/bad/policy"], "the policy 'hf:/bad/policy': no such folder"),
])
def test_cli_bad_teacher_judge_or_policy_is_one_line_before_a_run_folder(flags, needle,
                                                                          tmp_path, capsys):
    out = tmp_path / "run"
    rc = main(["rollout", "--episodes", "1", "--sandbox", "local", "--out", str(out),
               "--quiet", "--teacher", "tiny", *flags])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and needle in err[0]
    assert not out.exists()
