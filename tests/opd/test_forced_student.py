"""forced_student: a text-only policy's turns get the teacher model's own no-hint logprobs as
student logprobs, exactly those of an independent forward pass, and labelled as forced."""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest

import opd_gym  # noqa: F401  (registers the env)
from opd_gym.agents.forced import TeacherForcedPolicy
from opd_gym.errors import ConfigError
from opd_gym.opd.config import OPDConfig
from opd_gym.opd.judges import JudgeInput
from opd_gym.opd.metrics import OPDMetrics
from opd_gym.opd.teachers import TransformersTeacher
from opd_gym.opd.wrapper import OPDWrapper
from opd_gym.records.opd_record import OPDRecord
from opd_gym.tools.parsing import format_tool_call

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # local backend notice

SCRIPT = [
    format_tool_call("terminal", {"command": "ls -la"}),
    format_tool_call("write_file", {"path": "solution.py",
                                    "content": "def fizzbuzz(n):\n    return []\n"}),
    format_tool_call("terminal", {"command": "python3 -c 'import solution'"}),
]


def _hint_second_turn(turn: JudgeInput, state: str) -> str | None:
    """A judge that hints one turn only, so both hinted and bare turns are covered."""
    return "Check the output format first." if turn.index == 1 else None


def test_forced_student_logprobs_match_an_independent_forward_pass(tiny_model, tiny_tokenizer):
    """Each text-only turn's student_logprobs equal a plain fp32 forward of the model over the
    rendered prompt + the turn's ids (1e-4); bare turns equal the teacher's, hinted differ."""
    assert next(tiny_model.parameters()).dtype.is_floating_point
    teacher = TransformersTeacher(tiny_model, tokenizer=tiny_tokenizer, dtype="float32")
    reference = TeacherForcedPolicy(tiny_model, tiny_tokenizer, SCRIPT)  # its own forward
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        base = gym.make("opd_gym/Coding-v0", tasks=["fizzbuzz"], sandbox="local", pool_size=1,
                        max_turns=6)
    env = OPDWrapper(base, teacher=teacher, judge=_hint_second_turn, topk=3,
                     forced_student=True)
    obs, info = env.reset(seed=0)
    reference.reset(obs, info)
    records: list[OPDRecord] = []
    expected = []
    for _ in SCRIPT:
        forced = reference.act(obs, info)
        expected.append((forced.token_ids, forced.logprobs))
        obs, _r, term, trunc, info = env.step(str(forced))  # text only, as a scripted policy
        records += info["opd"]
        if term or trunc:
            break
    env.close()
    assert len(records) == len(SCRIPT) and [bool(r.hint) for r in records] == [False, True, False]
    for record, (ids, logprobs) in zip(records, expected, strict=True):
        assert record.token_ids.tolist() == ids and record.scored
        np.testing.assert_allclose(record.student_logprobs, logprobs, atol=1e-4, rtol=0)
        assert record.retokenized and record.student_temperature is None  # forced, not sampled
        assert record.student_logprobs_source.startswith("teacher-forced: ")
        assert "not sampled" in record.student_logprobs_source
        assert record.control_teacher_logprobs is None
        again = OPDRecord.from_dict(record.to_dict())
        assert again.student_logprobs_source == record.student_logprobs_source
        if not record.hint:
            np.testing.assert_array_equal(record.student_logprobs, record.teacher_token_logprobs)
    hinted = records[1]
    assert np.abs(hinted.teacher_token_logprobs - hinted.student_logprobs)[hinted.mask].max() > 0
    metrics = OPDMetrics().episode(records)  # the report's KL and gap now have numbers
    assert metrics["opd/kl_k3"] > 0 and np.isfinite(metrics["opd/kl_k3"])  # k3: never < 0
    assert metrics["opd/log_ratio_k1"] != 0 and np.isfinite(metrics["opd/log_ratio_k1"])


def test_forced_student_needs_turn_scope_and_the_models_own_temperature():
    with pytest.raises(ConfigError, match="hint_scope='turn'"):
        OPDConfig(forced_student=True, hint_scope="episode")
    with pytest.raises(ConfigError, match="teacher_temperature=1.0"):
        OPDConfig(forced_student=True, teacher_temperature=0.5)
    with pytest.raises(ConfigError, match="forced_student must be True or False"):
        OPDConfig(forced_student="yes")
