"""The teacher's logprobs are at temperature 1 unless a teacher temperature is set; then they
are log softmax(logits / T), checked against one fp64 forward pass; records state it."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from opd_gym.errors import ConfigError
from opd_gym.opd.config import OPDConfig
from opd_gym.opd.teachers import TransformersTeacher
from opd_gym.opd.teachers.base import ScoreRequest


@pytest.mark.parametrize("temperature", [1.0, 0.5, 2.0])
def test_teacher_logprobs_at_the_set_temperature(tiny_model_path, temperature):
    teacher = TransformersTeacher(tiny_model_path, dtype="float64", temperature=temperature,
                                  reuse_cache=False)
    ids = list(range(5, 25))
    [[scores]] = teacher.score([ScoreRequest(ids, [(10, 20)])], 3)
    with torch.no_grad():
        logits = teacher.model(input_ids=torch.tensor([ids])).logits[0].double()
    want = torch.log_softmax(logits[9:19] / temperature, dim=-1)
    np.testing.assert_allclose(scores.token_logprobs,
                               want[torch.arange(10), torch.tensor(ids[10:20])].numpy(),
                               atol=1e-5)
    np.testing.assert_allclose(scores.topk_logprobs, want.topk(3).values.numpy(), atol=1e-5)
    assert teacher.temperature == temperature


def test_teacher_temperature_is_refused_where_it_cannot_be_applied():
    with pytest.raises(ConfigError, match="teacher_temperature applies to hf: teachers"):
        OPDConfig(teacher="vllm:http://127.0.0.1:9", teacher_temperature=0.5)
    with pytest.raises(ConfigError, match="teacher_temperature must be a number > 0"):
        OPDConfig(teacher_temperature=0)
    with pytest.raises(ConfigError, match="no turn would ever be scored"):
        OPDConfig(judge=None, score_without_hint=False)
