"""OPDWrapper on a real CodingEnv (local sandbox backend) with the tiny model as teacher."""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest

import opd_gym  # noqa: F401  (registers the env)
from opd_gym.agents.hf import TransformersPolicy
from opd_gym.opd.judges import LLMJudge
from opd_gym.opd.teachers import TransformersTeacher
from opd_gym.opd.wrapper import OPDWrapper
from opd_gym.records.opd_record import OPDRecord
from opd_gym.tools.parsing import format_tool_call

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # local backend notice


@pytest.fixture(scope="module")
def teacher(tiny_model, tiny_tokenizer):
    return TransformersTeacher(tiny_model, tokenizer=tiny_tokenizer)


def make_env(**kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return gym.make(
            "opd_gym/Coding-v0",
            tasks=["fizzbuzz"],
            sandbox="local",
            pool_size=1,
            max_turns=kwargs.pop("max_turns", 6),
            **kwargs,
        )


SCRIPT = [
    format_tool_call("terminal", {"command": "python3 -c 'import solution'"}),  # fails
    format_tool_call(
        "write_file", {"path": "solution.py", "content": "def fizzbuzz(n):\n    return []\n"}
    ),
    format_tool_call(
        "terminal", {"command": "python3 -c 'import solution; print(solution.fizzbuzz(3))'"}
    ),
    format_tool_call("submit"),
]


def run(env, actions, **reset):
    obs, info = env.reset(seed=0, **reset)
    infos = []
    for action in actions:
        obs, reward, terminated, truncated, info = env.step(action)
        infos.append(info)
        if terminated or truncated:
            break
    return infos


def test_alignment_control_empty_hint_same_model(tiny_model, tiny_tokenizer, teacher):
    """No judge (no hint), teacher = student: teacher logprobs equal the student's own."""
    policy = TransformersPolicy(tiny_model, tokenizer=tiny_tokenizer, max_new_tokens=40, seed=3)
    env = OPDWrapper(make_env(max_turns=3), teacher=teacher,
                     student_tokenizer=teacher.tokenizer, judge=None, topk=5)
    obs, info = env.reset(seed=0)
    records = []
    for _ in range(3):
        action = policy.act(obs, info)
        obs, _, terminated, truncated, info = env.step(action)
        [record] = info["opd"]
        assert isinstance(record, OPDRecord) and not record.retokenized
        assert record.token_ids.tolist() == action.token_ids
        records.append(record)
        if terminated or truncated:
            break
    env.close()
    for record in records:
        assert record.mask.all() and record.hint is None
        np.testing.assert_allclose(
            record.teacher_token_logprobs, record.student_logprobs, atol=1e-5, rtol=0
        )


def test_every_turn_scored_including_pure_tool_calls(teacher):
    env = OPDWrapper(make_env(), teacher=teacher,
                     student_tokenizer=teacher.tokenizer, judge="rule", topk=8)
    infos = run(env, SCRIPT)
    env.close()
    assert all(len(i["opd"]) == 1 for i in infos)  # per_step: always a list, one record
    records = [r for i in infos for r in i["opd"]]
    assert [r.turn_index for r in records] == [0, 1, 2, 3]
    for record in records:
        assert record.scored and record.mask.all() and record.retokenized
        assert record.token_ids[-1] == teacher.tokenizer.eos_token_id  # end-of-turn scored
        assert record.teacher_topk_ids.shape == (record.num_tokens, 8)
    assert "ModuleNotFoundError" in records[0].hint or "exited" in records[0].hint
    assert records[1].hint is None  # writing a file went fine
    assert "hidden tests failed" in records[3].hint  # the submit turn saw the verdict
    metrics = infos[-1]["opd_metrics"]
    assert metrics["opd/turns_scored"] == 4 and metrics["opd/mean_hints_per_rollout"] >= 2


def test_hint_changes_teacher_logprobs_and_placement_options(teacher):
    hint = "Write solution.py first."
    judge = lambda turn, state: hint  # noqa: E731
    def first(env):
        [record] = run(env, SCRIPT[:1])[0]["opd"]
        return record

    plain = first(OPDWrapper(make_env(), teacher=teacher,
                             student_tokenizer=teacher.tokenizer, judge=None, topk=4))
    before = first(OPDWrapper(make_env(), teacher=teacher,
                              student_tokenizer=teacher.tokenizer, judge=judge, topk=4))
    in_task = first(
        OPDWrapper(make_env(), teacher=teacher,
                   student_tokenizer=teacher.tokenizer, judge=judge, topk=4,
                   hint_placement="task_message")
    )
    assert before.hint == hint and in_task.hint == hint
    assert np.abs(before.teacher_token_logprobs - plain.teacher_token_logprobs).max() > 1e-4
    assert np.abs(in_task.teacher_token_logprobs - before.teacher_token_logprobs).max() > 1e-4


def test_episode_scope_matches_turn_scope_without_hints(teacher):
    turn_env = OPDWrapper(make_env(), teacher=teacher,
                          student_tokenizer=teacher.tokenizer, judge=None, topk=5,
                          delivery="per_episode")
    episode_env = OPDWrapper(
        make_env(),
        teacher=teacher,
        student_tokenizer=teacher.tokenizer,
        judge=None,
        topk=5,
        delivery="per_episode",
        hint_scope="episode",
    )
    by_turn = run(turn_env, SCRIPT)[-1]["opd"]
    by_episode = run(episode_env, SCRIPT)[-1]["opd"]
    assert len(by_turn) == len(by_episode) == 4
    for a, b in zip(by_turn, by_episode, strict=True):
        assert b.scope == "episode" and a.scope == "turn"
        assert a.token_ids.tolist() == b.token_ids.tolist()
        np.testing.assert_allclose(a.teacher_token_logprobs, b.teacher_token_logprobs, atol=1e-4)


def test_per_episode_and_async_delivery_keep_every_turn(teacher):
    env = OPDWrapper(
        make_env(),
        teacher=teacher,
        student_tokenizer=teacher.tokenizer,
        judge="rule",
        topk=4,
        delivery="per_episode",
        async_scoring=True,
    )
    infos = run(env, SCRIPT)
    assert all(i["opd"] == [] for i in infos[:-1])  # always a list: empty before the end
    assert [r.turn_index for r in infos[-1]["opd"]] == [0, 1, 2, 3]
    env.close()
    env = OPDWrapper(make_env(), teacher=teacher,
                     student_tokenizer=teacher.tokenizer, judge="rule", topk=4, async_scoring=True)
    infos = run(env, SCRIPT)
    env.close()
    delivered = [r.turn_index for i in infos for r in i["opd"]]
    assert delivered == [0, 1, 2, 3]  # in order, none lost, the last step waited for the rest


def test_judge_failures_leave_turns_unscored_with_error(teacher):
    def broken(turn, state):
        raise RuntimeError("judge crashed")

    infos = run(OPDWrapper(make_env(), teacher=teacher,
                           student_tokenizer=teacher.tokenizer, judge=broken, topk=4), SCRIPT)
    records = [r for i in infos for r in i["opd"]]
    assert len(records) == 4
    assert all(not r.scored and "judge crashed" in r.error for r in records)
    assert infos[-1]["opd_metrics"]["opd/turns_scored"] == 0
    assert np.isnan(records[0].teacher_token_logprobs).all()  # never 0.0 fillers
    down = LLMJudge("http://127.0.0.1:9/v1", model="m", retries=0, timeout=2)
    infos = run(OPDWrapper(make_env(), teacher=teacher,
                           student_tokenizer=teacher.tokenizer, judge=down, topk=4), SCRIPT[:2])
    assert all("judge error" in r.error for i in infos for r in i["opd"])


def test_tokenizer_mismatch_is_refused_before_the_first_episode(teacher, tmp_path):
    """A student tokenizer that is not the teacher's stops reset (nothing played), naming both."""
    from opd_gym.errors import ConfigError
    from opd_gym.models import build_tiny_model

    other = build_tiny_model(tmp_path / "other", seed=0, vocab_size=1024)
    env = OPDWrapper(make_env(), teacher=teacher, judge=None, student_tokenizer=str(other))
    with pytest.raises(ConfigError, match=r"tokenizers differ: the student's tokenizer .*other"
                                          r".* vs the teacher's"):
        env.reset(seed=0)
    env.close()


def test_smollm2_student_and_tiny_teacher_refused_both_ways_in_the_api(tiny_model_path):
    """The real pair: SmolLM2's tokenizer against the tiny model's, either side the student."""
    from opd_gym.errors import ConfigError

    for student, teacher_spec in (("smollm2", f"hf:{tiny_model_path}"), ("tiny", "smollm2")):
        env = OPDWrapper(make_env(), teacher=teacher_spec, judge=None, student_tokenizer=student)
        with pytest.raises(ConfigError, match="vocabularies differ"):
            env.reset(seed=0)
        env.close()


def test_unknown_student_tokenizer_refuses_token_ids_unless_unchecked(teacher, tiny_model_path):
    """Token ids from an agent whose tokenizer nobody named are refused; 'unchecked' opts out
    and every record says so; a text-only agent needs nothing (the teacher tokenizes it)."""
    from opd_gym.actions import TokenText
    from opd_gym.errors import ConfigError

    agent = TransformersPolicy(tiny_model_path, max_new_tokens=8, seed=0)
    env = OPDWrapper(make_env(max_turns=2), teacher=teacher, judge=None, topk=3)
    obs, info = env.reset(seed=0)
    with pytest.raises(ConfigError, match="student_tokenizer='unchecked'"):
        env.step(agent.act(obs, info))
    # refused before the env ran any of it: no command, no transcript entry, no turn counted
    touch = TokenText(format_tool_call("terminal", {"command": "touch refused.txt"}),
                      token_ids=[5, 6, 7])
    with pytest.raises(ConfigError, match="tokenizer is unknown"):
        env.step(touch)
    episode = env.unwrapped.episode
    assert episode.turns == [] and len(episode.messages) == len(info["messages"])
    assert "refused.txt" not in episode.sandbox.run("ls").output
    env.close()
    env = OPDWrapper(make_env(max_turns=2), teacher=teacher, judge=None, topk=3,
                     student_tokenizer="unchecked")
    obs, info = env.reset(seed=0)
    [record] = env.step(agent.act(obs, info))[4]["opd"]
    assert record.ids_unchecked and record.to_dict()["ids_unchecked"] is True
    env.close()
    [text_record] = run(OPDWrapper(make_env(), teacher=teacher, judge=None, topk=3),
                        SCRIPT[:1])[0]["opd"]
    assert text_record.retokenized and not text_record.ids_unchecked and text_record.scored


def test_bad_teacher_and_judge_specs_fail_at_construction(tmp_path):
    """A path with no model or a server that does not answer: one line naming the role, at
    construction (before reset), not a traceback at the first step."""
    from opd_gym.errors import ConfigError

    with pytest.raises(ConfigError, match=r"the teacher 'hf:/bad/path': no such folder"):
        OPDWrapper(make_env(), teacher="hf:/bad/path")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="without config.json"):
        OPDWrapper(make_env(), teacher=f"hf:{tmp_path / 'empty'}")
    with pytest.raises(ConfigError, match=r"the teacher server .*does not answer"):
        OPDWrapper(make_env(), teacher="vllm:http://127.0.0.1:9")
    with pytest.raises(ConfigError, match=r"the judge server .*does not answer"):
        OPDWrapper(make_env(), teacher="tiny", judge="openai:http://127.0.0.1:9/v1")


def test_task_message_hints_are_scored_for_a_policy_with_prompt_ids(teacher, tiny_model_path):
    """hint_placement='task_message' with a bundled policy (exact prompt ids): hinted turns
    get teacher signal, on the student's prompt with the hint in the task message."""
    agent = TransformersPolicy(tiny_model_path, max_new_tokens=8, seed=0)
    env = OPDWrapper(make_env(max_turns=2), teacher=teacher, topk=3,
                     student_tokenizer=teacher.tokenizer, judge=lambda turn, state: "Be brief.",
                     hint_placement="task_message")
    obs, info = env.reset(seed=0)
    [record] = env.step(agent.act(obs, info))[4]["opd"]
    assert record.hint == "Be brief." and record.scored and "task message" in record.context
    env.close()


def test_no_hint_control_scores_hinted_turns_without_their_hint(teacher, tiny_model_path):
    """The same model as student and teacher: the control (empty hint) reproduces the
    student's own logprobs, and the metrics report its gap (~0)."""
    agent = TransformersPolicy(teacher.model, tokenizer=teacher.tokenizer, max_new_tokens=6,
                               seed=1)
    env = OPDWrapper(make_env(max_turns=2), teacher=teacher, topk=3, no_hint_control=1.0,
                     student_tokenizer=teacher.tokenizer, student_temperature=1.0,
                     judge=lambda turn, state: "Run the tests first.")
    obs, info = env.reset(seed=0)
    infos = []
    for _ in range(2):
        obs, _r, term, trunc, info = env.step(agent.act(obs, info))
        infos.append(info)
        if term or trunc:
            break
    records = [r for i in infos for r in i["opd"]]
    assert records and all(r.control_teacher_logprobs is not None for r in records)
    for r in records:
        np.testing.assert_allclose(r.control_teacher_logprobs[r.mask],
                                   r.student_logprobs[r.mask], atol=1e-4)
    metrics = env.metrics.summary()
    assert abs(metrics["opd/control_gap"]) < 1e-4 and metrics["opd/control_turns"] == len(records)
    env.close()


def test_disabled_wrapper_is_a_pass_through(teacher):
    infos = run(OPDWrapper(make_env(), teacher=teacher, enabled=False), SCRIPT[:2])
    assert all("opd" not in i for i in infos)


def test_spec_records_json_able_arguments(tiny_model_path):
    env = OPDWrapper(make_env(), teacher=f"hf:{tiny_model_path}", judge="rule", topk=3)
    spec = env.spec
    assert spec.additional_wrappers[-1].kwargs["teacher"] == f"hf:{tiny_model_path}"
    again = spec.make()
    assert isinstance(again, OPDWrapper)
    infos = run(again, SCRIPT[:1])
    [record] = infos[0]["opd"]
    assert record.topk == 3 and isinstance(record.hint, str)
    again.close()
    env.close()
