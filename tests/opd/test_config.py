"""OPDConfig: one default per option, every refused value or combination said in one sentence
at construction, derived settings derived, and the wrapper built from kwargs or a config."""

from __future__ import annotations

import warnings

import gymnasium as gym
import pytest

import opd_gym  # noqa: F401  (registers the env)
from opd_gym.errors import ConfigError
from opd_gym.opd.config import DEFAULT_TOPK, OPDConfig
from opd_gym.opd.judges import RuleJudge
from opd_gym.opd.wrapper import OPDWrapper


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"topk": -1}, "topk must be an integer >= 0, got -1"),
        ({"topk": 2.5}, "topk must be an integer >= 0"),
        ({"topk": True}, "topk must be an integer >= 0"),
        ({"votes": 0}, "votes must be an integer >= 1"),
        ({"max_next_state_chars": 0}, "max_next_state_chars must be an integer >= 1"),
        ({"judge_workers": 0}, "judge_workers must be an integer >= 1"),
        ({"copy_min_words": 0}, "copy_min_words must be an integer >= 1"),
        ({"enabled": "yes"}, "enabled must be True or False"),
        ({"async_scoring": 1}, "async_scoring must be True or False"),
        ({"score_without_hint": None}, "score_without_hint must be True or False"),
        ({"hint_scope": "trajectory"}, "hint_scope must be one of ('turn', 'episode')"),
        ({"hint_placement": "after"}, "hint_placement must be one of"),
        ({"delivery": "sometimes"}, "delivery must be one of ('per_step', 'per_episode')"),
        ({"vote_rule": "most"}, "vote_rule must be one of ('majority', 'any', 'unanimous')"),
        ({"hint_choice": "best"}, "hint_choice must be one of"),
        ({"copy_guard": "drop"}, "copy_guard must be one of ('mask', 'keep')"),
        ({"on_history_rewrite": "merge"}, "on_history_rewrite must be one of"),
        ({"hint_scope": "episode", "delivery": "per_step"},
         "hint_scope='episode' scores the whole episode in one pass"),
        ({"hint_scope": "episode", "hint_placement": "task_message"},
         "places each hint before its turn"),
        ({"teacher": "magic"}, "unknown teacher spec 'magic'; use one of: auto | tiny"),
        ({"teacher": "gpt:x"}, "unknown teacher scheme 'gpt'"),
        ({"teacher": "hf:"}, "has no PATH after 'hf:'"),
        ({"teacher": 42}, "teacher must be a spec"),
        ({"teacher": {"dtype": "float32"}}, "a teacher mapping needs a 'spec' key"),
        ({"teacher": "vllm:http://127.0.0.1:9", "teacher_options": {"dtype": "float32"}},
         "a vllm: server sets it when it is started"),
        ({"teacher": {"spec": "vllm:http://127.0.0.1:9", "device": "cpu"}},
         "a vllm: server sets it"),
        ({"judge": "magic"}, "unknown judge spec 'magic'"),
        ({"judge": 3}, "judge must be a spec"),
        ({"judge": {"type": "oracle"}}, "unknown judge type 'oracle'"),
        ({"judge": {"type": "openai"}}, "a openai judge mapping needs a 'url'"),
        ({"judge": "rule", "judge_options": {"temperature": 0.2}},
         "judge_options ['temperature'] apply to an LLM judge"),
        ({"judge": "openai:http://127.0.0.1:9/v1", "vote_rule": "any",
          "judge_options": {"max_tokens": 0}}, "the judge's max_tokens must be an integer >= 1"),
    ],
)
def test_invalid_options_are_refused_in_one_sentence(options, message):
    with pytest.raises(ConfigError, match=_literal(message)) as caught:
        OPDConfig(**options)
    assert "\n" not in str(caught.value)


def test_a_teacher_object_takes_no_teacher_options(tiny_model_path):
    from opd_gym.opd.teachers import make_teacher

    teacher = make_teacher(f"hf:{tiny_model_path}")
    assert OPDConfig(teacher=teacher).teacher is teacher
    with pytest.raises(ConfigError, match="need a teacher spec, not a teacher object"):
        OPDConfig(teacher=teacher, teacher_options={"dtype": "float64"})


def test_defaults_and_derived_settings():
    config = OPDConfig()
    assert config.topk == DEFAULT_TOPK == 20 and config.delivery == "per_step"
    episode = OPDConfig(hint_scope="episode")
    assert episode.delivery == "per_episode"  # derived, not re-decided by callers
    # replace keeps a derived delivery derived, and an explicit one explicit
    assert config.replace(hint_scope="episode").delivery == "per_episode"
    assert episode.replace(hint_scope="turn").delivery == "per_step"
    explicit = OPDConfig(delivery="per_episode")
    assert explicit.replace(hint_scope="turn").delivery == "per_episode"
    llm = OPDConfig(judge="openai:http://127.0.0.1:9/v1", votes=5, vote_rule="any",
                    judge_options={"temperature": 0.1})
    assert llm.judge_defaults == {"votes": 5, "rule": "any", "hint_choice": "longest",
                                  "temperature": 0.1}


def test_config_is_frozen_and_unknown_names_are_refused():
    config = OPDConfig(teacher_options={"dtype": "float32"})
    with pytest.raises(AttributeError):
        config.topk = 3  # type: ignore[misc]
    with pytest.raises(TypeError):
        config.teacher_options["dtype"] = "float64"  # type: ignore[index]
    with pytest.raises(ConfigError, match=r"unknown OPD option\(s\) \['top_k'\]"):
        config.replace(top_k=3)


def test_the_cli_takes_its_defaults_from_the_config():
    from opd_gym.cli import build_parser

    args = build_parser().parse_args(["rollout"])
    defaults = OPDConfig()
    assert (args.topk, args.votes, args.hint_scope) == (defaults.topk, defaults.votes,
                                                        defaults.hint_scope)
    assert args.judge == defaults.judge


def _env():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return gym.make("opd_gym/Coding-v0", tasks=["fizzbuzz"], sandbox="local", pool_size=1,
                        max_turns=2)


def test_wrapper_takes_kwargs_or_a_config_and_refuses_bad_ones_before_any_model():
    env = _env()
    try:
        with pytest.raises(ConfigError, match="topk must be"):
            OPDWrapper(env, teacher="tiny", topk=-1)
        assert OPDWrapper(env, topk=0).config.topk == 0  # sampled-token logprobs only
        with pytest.raises(ConfigError, match=r"unknown OPD option\(s\) \['bogus'\]"):
            OPDWrapper(env, bogus=1)
        base = OPDConfig(topk=7, hint_scope="episode")
        wrapped = OPDWrapper(env, config=base, votes=2)  # keywords override the config
        assert wrapped.config.topk == 7 and wrapped.config.votes == 2
        assert wrapped.delivery == "per_episode" and wrapped._scorer is None  # nothing loaded
        recorded = wrapped.spec.additional_wrappers[-1].kwargs
        assert recorded["topk"] == 7 and recorded["delivery"] is None
        judge = RuleJudge()
        assert OPDWrapper(env, judge=judge).config.judge is judge
        assert OPDWrapper(env, judge=None).config.judge is None  # None still means no judge
    finally:
        env.close()


def _literal(text: str) -> str:
    import re

    return re.escape(text)
