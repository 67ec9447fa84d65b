"""Teacher, judge and policy specs resolve through one scheme table each, and each table
covers exactly the specs `specs.KINDS` accepts (a scheme accepted but not built, or built but
not accepted, fails here)."""

from __future__ import annotations

import pytest

from opd_gym import specs
from opd_gym.agents.policies import BUILDERS as POLICIES
from opd_gym.agents.policies import make_policy
from opd_gym.errors import ConfigError
from opd_gym.opd.judges import BUILDERS as JUDGES
from opd_gym.opd.judges import LLMJudge, RuleJudge, make_judge
from opd_gym.opd.teachers import BUILDERS as TEACHERS


def test_each_table_builds_exactly_what_its_kind_accepts():
    names, schemes = specs.KINDS["teacher"]
    assert set(TEACHERS) == set(schemes)  # names resolve to hf: first
    names, schemes = specs.KINDS["judge"]
    assert set(JUDGES) == set(names) | set(schemes)
    names, schemes = specs.KINDS["policy"]
    assert set(POLICIES) == (set(names) - set(specs.MODEL_NAMES)) | set(schemes)


def test_a_teacher_spec_resolves_once_to_a_scheme_the_table_builds():
    parsed, options = specs.resolve_teacher({"spec": "tiny", "dtype": "float32"},
                                            {"device": "cpu"})
    assert parsed.scheme == "hf" and parsed.target == specs.model_path("tiny")
    assert options == {"dtype": "float32", "device": "cpu"}
    parsed, options = specs.resolve_teacher("vllm:http://127.0.0.1:1", {"timeout": 5})
    assert (parsed.scheme, parsed.target, options) == ("vllm", "http://127.0.0.1:1",
                                                       {"timeout": 5})
    with pytest.raises(ConfigError, match="'dtype' applies to hf: and vllm-engine:"):
        specs.resolve_teacher("vllm:http://127.0.0.1:1", {"dtype": "float32"})
    with pytest.raises(ConfigError, match="needs a 'spec' key"):
        specs.resolve_teacher({"dtype": "float32"}, {})


def test_judges_from_strings_and_mappings_alike():
    assert make_judge("none") is None and make_judge(None) is None
    assert isinstance(make_judge("rule"), RuleJudge)
    assert isinstance(make_judge({"type": "rule"}), RuleJudge)
    by_string = make_judge("vllm:http://127.0.0.1:9/v1", votes=1)
    by_mapping = make_judge({"type": "vllm", "url": "http://127.0.0.1:9", "votes": 1})
    assert isinstance(by_string, LLMJudge) and isinstance(by_mapping, LLMJudge)
    assert by_string.base_url == by_mapping.base_url
    with pytest.raises(ConfigError, match="unknown judge"):
        make_judge("gpt:x")


def test_a_scripted_policy_comes_from_its_table_entry():
    from opd_gym.agents.demo import DemoAgent
    from opd_gym.tasks import load_suite

    tasks = load_suite("coding")
    assert isinstance(make_policy("demo", tasks)(None), DemoAgent)
    with pytest.raises(ConfigError, match="unknown policy"):
        make_policy("gpt:x", tasks)
