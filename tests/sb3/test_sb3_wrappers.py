"""SB3 wrappers: check_env passes with no warnings for every wrapper combination (bwrap sandbox,
and Docker for one), features, masks, the token extractor, and the import guard."""

from __future__ import annotations

import gc
import subprocess
import sys
import warnings

import numpy as np
import pytest
import sb3_contrib  # the sb3 extra is part of the test install: a missing one fails
import torch  # noqa: E402
from gymnasium import spaces  # noqa: E402
from stable_baselines3.common.env_checker import check_env  # noqa: E402

from opd_gym.sandboxes import make_pool  # noqa: E402
from opd_gym.sb3 import (  # noqa: E402
    EMPTY_SLOT,
    NUMERIC_FEATURES,
    RUN_TESTS,
    SUBMIT,
    DiscreteToolCalls,
    HashedNgrams,
    TokenEmbeddingExtractor,
    candidate_text,
    make_env,
)
from opd_gym.sb3.demo import CORRECT_SLOT, K, demo_candidates, demo_tasks  # noqa: E402
from opd_gym.sb3.features import EpisodeTracker, pad_ids, pytest_counts  # noqa: E402
from opd_gym.tools import format_tool_call  # noqa: E402

RESERVED = {"terminal_observation", "TimeLimit.truncated", "episode"}
MACROS = [
    {"name": "write_file", "arguments": {"path": "notes.txt", "content": "hi\n"}},
    RUN_TESTS,
    ("terminal", {"command": "ls"}),
    SUBMIT,
    None,  # an empty slot: masked, and a format error if chosen anyway
]
COMBOS = [
    ("hashed", "macros", {}),
    ("hashed", "callable", {"n_features": 128, "ngram_range": (1, 3)}),
    ("hashed-flat", "macros", {"n_features": 64, "include_prompt": False}),
    ("tokens", "callable", {"max_length": 96}),
    ("tokens", "macros", {"max_length": 48, "prompt_length": 32, "keep": "start"}),
]


def wrapped(observation: str, actions: str, obs_kwargs: dict, pool):
    candidates = MACROS if actions == "macros" else demo_candidates
    return make_env(candidates, k=K if actions == "callable" else None,
                    observation=observation, observation_kwargs=obs_kwargs,
                    tasks=demo_tasks(), sandbox=pool, max_turns=3)


def check_without_warnings(env, resource_warnings: bool = True) -> None:
    """check_env with every warning category shown but ResourceWarning: the garbage collector
    may finalise, at any moment, sockets that Docker SDK clients elsewhere in this process left
    behind (hidden by Python's default filters; never emitted by the wrappers or the checker)."""
    del resource_warnings  # kept for the callers; ResourceWarning is never the checker's
    gc.collect()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.simplefilter("ignore", ResourceWarning)
        check_env(env, warn=True)
    assert [f"{w.category.__name__}: {w.message}" for w in caught] == []


@pytest.fixture(scope="module")
def bwrap_pool():
    pool = make_pool("bwrap", size=2)
    yield pool
    pool.close()


@pytest.mark.parametrize(("observation", "actions", "obs_kwargs"), COMBOS)
def test_check_env_passes_without_warnings(bwrap_pool, observation, actions, obs_kwargs):
    env = wrapped(observation, actions, obs_kwargs, bwrap_pool)
    try:
        check_without_warnings(env)
        assert isinstance(env.action_space, spaces.Discrete)
        obs, info = env.reset(seed=1)
        assert env.observation_space.contains(obs)
        assert not RESERVED & set(info)
        _, _, _, _, info = env.step(int(np.flatnonzero(env.get_wrapper_attr("action_masks")())[0]))
        assert not RESERVED & set(info)
    finally:
        env.close()


@pytest.mark.docker
def test_check_env_passes_without_warnings_on_docker():
    pool = make_pool("docker", size=2)
    env = wrapped("hashed", "callable", {}, pool)
    try:
        check_without_warnings(env, resource_warnings=False)
    finally:
        env.close()
        pool.close()


def test_masks_follow_the_candidates_and_an_empty_slot_is_a_format_error(bwrap_pool):
    env = wrapped("hashed", "callable", {}, bwrap_pool)
    try:
        _, info = env.reset(seed=0, options={"task_id": "sb3_biggest"})
        masks = env.get_wrapper_attr("action_masks")()
        assert masks.tolist() == [True, True, False, True]
        assert info["candidates"][2] is None and "write_file" in info["candidates"][1]
        obs, reward, terminated, truncated, info = env.step(2)  # masked slot, chosen anyway
        assert not (terminated or truncated) and reward == 0.0
        assert info["turn"]["format_error"] and info["format_error_streak"] == 1
        assert obs["numeric"][NUMERIC_FEATURES.index("format_error_streak")] == 0.25
        obs, reward, terminated, _, info = env.step(CORRECT_SLOT["sb3_biggest"])
        assert terminated and info["reward_breakdown"]["correctness"] == 1.0
        numeric = dict(zip(NUMERIC_FEATURES, obs["numeric"], strict=True))
        assert numeric["graded"] == numeric["tests_passed_fraction"] == 1
        assert numeric["files_changed"] == 1
    finally:
        env.close()


def test_numeric_features_track_tests_and_changes(bwrap_pool):
    test_file = {"name": "write_file", "arguments": {
        "path": "test_visible.py", "content": "def test_a():\n    assert 1\n\n"
        "def test_b():\n    assert 0\n"}}
    env = make_env([test_file, RUN_TESTS, SUBMIT], observation="hashed",
                   tasks=demo_tasks(), sandbox=bwrap_pool, max_turns=4)
    try:
        env.reset(seed=0)
        obs, *_ = env.step(0)
        after_write = dict(zip(NUMERIC_FEATURES, obs["numeric"], strict=True))
        assert after_write["files_changed"] == 1 and after_write["checked_since_change"] == 0
        obs, *_ = env.step(1)
        after_run = dict(zip(NUMERIC_FEATURES, obs["numeric"], strict=True))
        assert after_run["tests_seen"] == 1 and after_run["tests_passed_fraction"] == 0.5
        assert after_run["last_exit_failed"] == 1 and after_run["last_exit_ok"] == 0
        assert after_run["checked_since_change"] == 1 and after_run["turn_fraction"] == 0.5
    finally:
        env.close()


def test_hashed_ngrams_are_stable_normalised_and_distinct():
    hasher = HashedNgrams(256, (1, 2))
    a, b = hasher("def add(a, b): return a + b"), hasher("print('hello world')")
    assert a.dtype == np.float32 and a.shape == (256,)
    assert np.allclose(np.linalg.norm(a), 1.0) and a.min() >= 0 and a.max() <= 1
    assert np.array_equal(a, hasher("DEF add(a, b): return a + b"))  # lowercased
    assert not np.array_equal(a, b) and not hasher("").any()
    code = "from opd_gym.sb3 import HashedNgrams; print(HashedNgrams(256)('x y z').nonzero())"
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           check=True, env={"PYTHONHASHSEED": "123"})  # salted str hash elsewhere
    assert other.stdout.strip() == str(hasher.__class__(256)("x y z").nonzero())


def test_pad_ids_keeps_start_or_end_and_masks_padding():
    ids, mask = pad_ids([5, 6, 7, 8], 3, 10, keep="end")
    assert ids.tolist() == [6, 7, 8] and mask.tolist() == [1, 1, 1]
    ids, mask = pad_ids([5, 6], 4, 10, keep="start")
    assert ids.tolist() == [5, 6, 0, 0] and mask.tolist() == [1, 1, 0, 0]
    with pytest.raises(ValueError):
        pad_ids([12], 4, 10)


def test_pytest_counts_reads_summaries():
    assert pytest_counts("..F\n1 failed, 2 passed in 0.03s\n") == (2, 3)
    assert pytest_counts("==== 3 passed in 0.01s ====") == (3, 3)
    assert pytest_counts("== 1 passed, 1 error in 0.1s ==") == (1, 2)
    assert pytest_counts("I passed 3 tests") is None and pytest_counts("") is None


def test_episode_tracker_uses_only_step_info():
    tracker = EpisodeTracker()
    vec = tracker.update("prompt", {"turns": 0, "max_turns": 4, "format_error_streak": 0})
    assert vec.tolist() == [0.0] * len(NUMERIC_FEATURES)
    grade = {"passed": 3, "total": 4}
    vec = tracker.update("[Episode over.]", {"turns": 4, "max_turns": 4, "errors": [],
                                            "tool_results": [], "grade": grade})
    values = dict(zip(NUMERIC_FEATURES, vec.tolist(), strict=True))
    assert values["graded"] == 1 and values["tests_passed_fraction"] == 0.75
    assert values["turn_fraction"] == 1


def test_candidate_forms_and_action_wrapper_validation(bwrap_pool):
    call = format_tool_call("terminal", {"command": "ls"})
    assert candidate_text(("terminal", {"command": "ls"})) == call
    assert candidate_text({"name": "terminal", "arguments": {"command": "ls"}}) == call
    assert candidate_text([("terminal", {"command": "ls"}), {"name": "submit"}]) == (
        call + "\n" + SUBMIT)
    assert candidate_text(None) is None
    from opd_gym import CodingEnv

    base = CodingEnv(tasks=demo_tasks(), sandbox=bwrap_pool)
    with pytest.raises(ValueError, match="give k"):
        DiscreteToolCalls(base, demo_candidates)
    too_many = DiscreteToolCalls(base, lambda obs, info: [SUBMIT] * 3, k=2)
    with pytest.raises(ValueError, match="3 candidates for 2 slots"):
        too_many.reset(seed=0)
    fixed = DiscreteToolCalls(base, [SUBMIT, None])
    assert fixed.action(1) == EMPTY_SLOT and fixed.action_masks().tolist() == [True, False]
    base.close()


def test_token_extractor_pools_under_the_mask_and_trains_with_maskable_ppo(bwrap_pool):
    env = wrapped("tokens", "callable", {"max_length": 64, "prompt_length": 48}, bwrap_pool)
    try:
        extractor = TokenEmbeddingExtractor(env.observation_space, embed_dim=8)
        assert extractor.features_dim == 8 * 2 + len(NUMERIC_FEATURES)
        obs = {key: torch.as_tensor(np.stack([value] * 2)).float()
               for key, value in env.observation_space.sample().items()}
        obs["token_mask"][:] = 0
        obs["token_mask"][:, :5] = 1
        obs["token_ids"][1, 5:] = 7  # differs only under the mask: same features
        features = extractor(obs)
        assert features.shape == (2, extractor.features_dim)
        assert torch.allclose(features[0], features[1])
        model = sb3_contrib.MaskablePPO(
            "MultiInputPolicy", env, n_steps=8, batch_size=8, n_epochs=1, seed=0, device="cpu",
            policy_kwargs={"features_extractor_class": TokenEmbeddingExtractor,
                           "features_extractor_kwargs": {"embed_dim": 8}})
        model.learn(8)
        action, _ = model.predict(env.reset(seed=0)[0], action_masks=np.ones(K, dtype=bool))
        assert 0 <= int(action) < K
    finally:
        env.close()


def test_import_error_names_the_extra():
    code = ("import sys; sys.modules['stable_baselines3'] = None\n"
            "try:\n    import opd_gym.sb3\nexcept ImportError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "'sb3' extra" in out.stdout and "pip install 'opd_gym[sb3]'" in out.stdout


def test_token_observation_with_a_hugging_face_tokenizer(bwrap_pool, tiny_tokenizer):
    env = wrapped("tokens", "callable", {"max_length": 32, "tokenizer": tiny_tokenizer}, bwrap_pool)
    try:
        space = env.observation_space["token_ids"]
        assert int(space.high.max()) == len(tiny_tokenizer) - 1
        obs, info = env.reset(seed=0)
        assert env.observation_space.contains(obs)
        n = int(obs["token_mask"].sum())
        expected = tiny_tokenizer.encode(info["messages"][1]["content"], add_special_tokens=False)
        assert obs["token_ids"][:n].tolist() == expected[-32:]
    finally:
        env.close()


def test_token_observation_with_a_callable_tokenizer_needs_vocab_size(bwrap_pool):
    def words(text: str) -> list[int]:
        return [1 + len(word) % 9 for word in text.split()]

    with pytest.raises(ValueError, match="vocab_size"):
        wrapped("tokens", "macros", {"tokenizer": words}, bwrap_pool)
    env = wrapped("tokens", "macros", {"tokenizer": words, "vocab_size": 10}, bwrap_pool)
    try:
        obs, _ = env.reset(seed=0)
        assert env.observation_space.contains(obs) and obs["token_ids"].max() < 10
    finally:
        env.close()
