"""Synthetic token-level episodes and the teacher requests both OPD benchmarks score.

A module of its own (not a script), so `opd.py` and `opd_vllm.py` share it instead of one
benchmark importing the other.
"""

from __future__ import annotations

import numpy as np


def synthetic_episode(args, vocab: int, reserved: int = 32):
    """Synthetic token ids: prompt, then per turn a hint, a response and a tool output."""
    rng = np.random.default_rng(args.seed)

    def draw(n: int) -> list[int]:
        return rng.integers(reserved, vocab, size=n).tolist()

    prompt = draw(args.prompt)
    turns = [(draw(args.hint), draw(args.response), draw(args.tool)) for _ in range(args.turns)]
    return prompt, turns


def make_turn_requests(prompt, turns):
    """Turn scope: context (no earlier hints) + this turn's hint + this turn's response."""
    from opd_gym.opd.teachers import ScoreRequest

    requests, context = [], list(prompt)
    for hint, response, tool in turns:
        start = len(context) + len(hint)
        requests.append(ScoreRequest(context + hint + response,
                                     [(start, start + len(response))]))
        context += response + tool
    return requests


def make_episode_request(prompt, turns):
    """Episode scope: one sequence with every hint before its turn, one span per turn."""
    from opd_gym.opd.teachers import ScoreRequest

    ids, spans = list(prompt), []
    for hint, response, tool in turns:
        ids += hint
        spans.append((len(ids), len(ids) + len(response)))
        ids += response + tool
    return ScoreRequest(ids, spans)
