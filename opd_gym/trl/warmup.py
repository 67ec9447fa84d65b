"""Warm a model up on scripted demo trajectories before GRPO, so its tool calls are real.

A random tiny model never emits a well-formed tool call, so GRPO would never reach the
sandbox. `demo_conversation` plays a task's reference script through a `CodingToolEnv` (real
sandbox, real tool outputs) and returns the conversation exactly as TRL would build it;
`sft_warmup` then runs a few plain-torch supervised steps on the assistant turns of such
conversations, rendered with the same chat template and tool schemas TRL will use.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from opd_gym.errors import ConfigError, DatasetError
from opd_gym.records.task import Task
from opd_gym.trl.environment import CodingToolEnv


def demo_conversation(
    instance: CodingToolEnv, task: Task, prompt: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """`prompt` + the reference script (write each solution file, then submit) played in the
    env, as TRL messages: assistant ``tool_calls`` turns and ``tool`` results."""
    if not task.solution:
        raise DatasetError(f"task {task.id!r} ships no reference solution to demonstrate")
    instance.reset(task_id=task.id)
    messages = [dict(m) for m in prompt]
    calls = [("write_file", {"path": p, "content": t}) for p, t in sorted(task.solution.items())]
    calls.append(("submit", {}))
    for name, arguments in calls:
        result = getattr(instance, name)(**arguments)
        messages.append({"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": name, "arguments": arguments}}]})
        messages.append({"role": "tool", "name": name, "content": str(result)})
    return messages[:-1]  # the last tool result (after submit) is never shown to the model


def _assistant_labels(tokenizer: Any, messages: list[dict[str, Any]], tools: Any
                      ) -> tuple[list[int], list[int]]:
    """Token ids of the conversation and labels (-100 except on assistant turns' tokens,
    which run up to and including the end-of-turn token)."""
    def render(msgs: list[dict[str, Any]], gen: bool) -> list[int]:
        return list(tokenizer.apply_chat_template(msgs, tools=tools, tokenize=True,
                                                  return_dict=False, add_generation_prompt=gen))

    ids = render(messages, False)
    labels = [-100] * len(ids)
    eos = tokenizer.eos_token_id
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        start = len(render(messages[:i], True))
        end = len(render(messages[: i + 1], False))
        if ids[:end] != render(messages[: i + 1], False):
            raise ConfigError("the chat template is not prefix-preserving; TRL needs one that is")
        stop = next((j + 1 for j in range(start, end) if ids[j] == eos), end)
        labels[start:stop] = ids[start:stop]
    return ids, labels


def sft_warmup(
    model: Any,
    tokenizer: Any,
    conversations: Sequence[list[dict[str, Any]]],
    tools: Any,
    *,
    steps: int = 60,
    lr: float = 3e-3,
) -> list[float]:
    """Plain-torch supervised steps on the assistant turns of `conversations`; the losses."""
    import torch

    batches = []
    for messages in conversations:
        ids, labels = _assistant_labels(tokenizer, messages, tools)
        batches.append((torch.tensor([ids]), torch.tensor([labels])))
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    model.train()
    losses = []
    for step in range(steps):
        ids, labels = batches[step % len(batches)]
        loss = model(input_ids=ids, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(float(loss))
    model.eval()
    return losses
