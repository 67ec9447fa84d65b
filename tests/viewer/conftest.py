"""Viewer fixtures: a tiny teacher model and a real recorded OPD rollout to render.

The run holds four fizzbuzz episodes on the local sandbox backend, recorded by
`TrajectoryRecorder` outside `OPDWrapper` (rule judge, tiny teacher, top-5): a scripted
failure, a scripted pass, an agent that writes HTML/script markup, and an unfinished episode
sampled by a perturbed copy of the teacher (so student logprobs exist and differ).
"""

from __future__ import annotations

import copy
import warnings
from pathlib import Path

import gymnasium as gym
import pytest

import opd_gym  # noqa: F401  (registers the env)
from opd_gym.tools.parsing import format_tool_call

FIZZBUZZ = """\
def fizzbuzz(n):
    out = []
    for i in range(1, n + 1):
        word = ("Fizz" if i % 3 == 0 else "") + ("Buzz" if i % 5 == 0 else "")
        out.append(word or str(i))
    return out
"""

XSS = "<script>alert(1)</script>"
MARKUP = "I will print <b>bold</b> & <img src=x onerror=alert(2)> first."

SCRIPTS = {
    "fail": [
        format_tool_call("terminal", {"command": "python3 -c 'import solution'"}),
        format_tool_call(
            "write_file", {"path": "solution.py", "content": "def fizzbuzz(n):\n    return []\n"}
        ),
        format_tool_call("submit"),
    ],
    "pass": [
        format_tool_call("write_file", {"path": "solution.py", "content": FIZZBUZZ}),
        format_tool_call(
            "terminal", {"command": "python3 -c 'import solution; print(solution.fizzbuzz(15))'"}
        ),
        format_tool_call("submit"),
    ],
    "markup": [
        MARKUP + "\n" + format_tool_call("terminal", {"command": f"echo '{XSS}'"}),
        "no tool call here </div>",
        format_tool_call("submit"),
    ],
}





@pytest.fixture(scope="session")
def student_model(tiny_model):
    """A seeded perturbation of the tiny model: same tokenizer, different logprobs."""
    import torch

    student = copy.deepcopy(tiny_model)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for param in student.parameters():
            param.add_(torch.randn(param.shape, generator=generator) * 0.05)
    return student.eval()


@pytest.fixture(scope="session")
def run_dir(tmp_path_factory, tiny_model, tiny_tokenizer, student_model) -> Path:
    """A run directory with `trajectories.jsonl` from a real recorded OPD rollout."""
    from opd_gym.agents.hf import TransformersPolicy
    from opd_gym.opd.teachers import TransformersTeacher
    from opd_gym.opd.wrapper import OPDWrapper
    from opd_gym.wrappers import TrajectoryRecorder

    path = tmp_path_factory.mktemp("viewer-run")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the local backend's notice
        env = gym.make("opd_gym/Coding-v0", tasks=["fizzbuzz"], sandbox="local", pool_size=1,
                       max_turns=6)
        teacher = TransformersTeacher(tiny_model, tokenizer=tiny_tokenizer)
        env = OPDWrapper(env, teacher=teacher,
                         student_tokenizer=teacher.tokenizer, judge="rule", topk=5)
        env = TrajectoryRecorder(env, path / "trajectories.jsonl")
        for seed, script in enumerate(SCRIPTS.values()):
            env.reset(seed=seed)
            for action in script:
                *_, terminated, truncated, _ = env.step(action)
                if terminated or truncated:
                    break
        policy = TransformersPolicy(student_model, tokenizer=tiny_tokenizer, max_new_tokens=40,
                                    seed=3)
        observation, info = env.reset(seed=len(SCRIPTS))
        for _ in range(2):
            observation, _, terminated, truncated, info = env.step(policy.act(observation, info))
            if terminated or truncated:
                break
        env.close()  # the sampled episode is cut short: recorded as unfinished
    return path
