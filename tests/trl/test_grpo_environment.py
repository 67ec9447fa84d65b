"""TRL GRPO over CodingEnv on CPU: after a short SFT warm-up on a scripted demo, the tiny
model's tool calls reach the real sandbox and the reward is the env's grade-based reward."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning", "ignore::UserWarning",
                                        "ignore::FutureWarning")

TASK_ID = "mystery_checksum"  # shortest reference solution in the built-in suite


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """One torch thread: on a shared small CPU, thread contention makes steps 10x slower."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """The tiny model (seed 0) with TRL's response template for its chat template."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from opd_gym.models import build_tiny_model
    from opd_gym.trl import prepare_tokenizer

    path = build_tiny_model(tmp_path_factory.mktemp("tiny") / "model", seed=0)
    tokenizer = prepare_tokenizer(AutoTokenizer.from_pretrained(path))
    model = AutoModelForCausalLM.from_pretrained(path)
    return model, tokenizer


def test_prepare_tokenizer_parses_the_tiny_models_tool_calls(tiny) -> None:
    """The response template reads a Hermes call the tiny template renders."""
    _, tokenizer = tiny
    text = '<tool_call>\n{"name": "submit", "arguments": {}}\n</tool_call><|im_end|>'
    prefix = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=True,
                                           return_dict=False, add_generation_prompt=True)
    parsed = tokenizer.parse_response(tokenizer(text)["input_ids"], prefix=list(prefix))
    assert parsed["tool_calls"][0]["function"]["name"] == "submit"


def test_grpo_steps_reach_the_sandbox_and_reward_the_grade(tiny, tmp_path) -> None:
    """SFT warm-up on one demo, then GRPO steps: tool calls run in the sandbox, each rollout's
    reward equals its env's graded reward, and a correct submission scores above a wrong one."""
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from opd_gym.tasks import load_suite
    from opd_gym.trl import (
        dataset_rows,
        demo_conversation,
        environment_factory,
        sft_warmup,
        tool_methods,
    )

    model, tokenizer = tiny
    task = next(t for t in load_suite() if t.id == TASK_ID)
    factory = environment_factory([task], sandbox="local", max_turns=3)
    try:
        demo_env = factory()
        rows = dataset_rows([task], repeat=8)
        demo = demo_conversation(demo_env, task, rows[0]["prompt"])
        assert demo_env.grade is not None and demo_env.grade.all_passed  # the script solves it
        losses = sft_warmup(model, tokenizer, [demo], tool_methods(demo_env), steps=80)
        assert losses[-1] < 0.1 * losses[0]

        rewards_seen: list[tuple[float, float, float]] = []

        def graded(environments, **_):
            """Record (reward returned, env's graded reward, test score); adds 0 to the sum."""
            for env in environments:
                reward = env.get_reward()
                rewards_seen.append((reward, env.coding_env.reward_breakdown.total,
                                     env.grade.score))
            return [0.0] * len(environments)

        args = GRPOConfig(
            output_dir=str(tmp_path / "grpo"), max_steps=2, per_device_train_batch_size=2,
            num_generations=2, max_completion_length=160, max_tool_calling_iterations=3,
            learning_rate=1e-6, logging_steps=1, report_to=[], use_cpu=True, seed=0,
            save_strategy="no", temperature=0.7,
        )
        trainer = GRPOTrainer(model=model, processing_class=tokenizer, args=args,
                              reward_funcs=[graded], train_dataset=Dataset.from_list(rows),
                              environment_factory=factory)
        trainer.train()
        assert trainer.state.global_step == 2
        played = [env for env in factory.instances if env is not demo_env]
        calls = sum(env.calls_run for env in played)
        print(f"GRPO steps {trainer.state.global_step}; tool calls run in the sandbox: {calls}; "
              f"rewards {rewards_seen}")
        assert calls >= 2
        assert len(rewards_seen) == 4  # 2 steps x 2 generations
        assert all(abs(got - env_reward) < 1e-6 for got, env_reward, _ in rewards_seen)
        # the reward orders rollouts as the hidden tests do
        for a in rewards_seen:
            for b in rewards_seen:
                if a[2] > b[2]:
                    assert a[0] > b[0]
        assert max(score for _, _, score in rewards_seen) == 1.0  # the memorised answer passes
    finally:
        factory.close()
