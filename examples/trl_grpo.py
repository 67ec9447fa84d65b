"""TRL GRPO over CodingEnv with the tiny model on CPU: warm up on a scripted demo, then train.

Run: python examples/trl_grpo.py  (needs the trl extra; uses the local sandbox backend).
"""

from __future__ import annotations

import tempfile

import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import GRPOConfig, GRPOTrainer

from opd_gym.models import ensure_tiny_model
from opd_gym.tasks import load_suite
from opd_gym.trl import (
    dataset_rows,
    demo_conversation,
    environment_factory,
    prepare_tokenizer,
    sft_warmup,
    tool_methods,
)


def main() -> None:
    """Warm the tiny model up on one task's demo, run 4 GRPO steps, print the rewards."""
    torch.set_num_threads(1)
    path = ensure_tiny_model()
    tokenizer = prepare_tokenizer(AutoTokenizer.from_pretrained(path))
    model = AutoModelForCausalLM.from_pretrained(path)
    task = next(t for t in load_suite() if t.id == "mystery_checksum")
    factory = environment_factory([task], sandbox="local", max_turns=3)
    try:
        demo_env = factory()
        rows = dataset_rows([task], repeat=8)
        demo = demo_conversation(demo_env, task, rows[0]["prompt"])
        sft_warmup(model, tokenizer, [demo], tool_methods(demo_env), steps=80)
        args = GRPOConfig(output_dir=tempfile.mkdtemp(), max_steps=4, per_device_train_batch_size=2,
                          num_generations=2, max_completion_length=160,
                          max_tool_calling_iterations=3, learning_rate=1e-6, logging_steps=1,
                          report_to=[], use_cpu=True, save_strategy="no")
        trainer = GRPOTrainer(model=model, processing_class=tokenizer, args=args,
                              train_dataset=Dataset.from_list(rows), environment_factory=factory)
        trainer.train()
        calls = sum(env.calls_run for env in factory.instances if env is not demo_env)
        print(f"{trainer.state.global_step} GRPO steps, {calls} tool calls ran in the sandbox")
    finally:
        factory.close()


if __name__ == "__main__":
    main()
