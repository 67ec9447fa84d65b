"""OPDWrapper: on-policy distillation targets for every assistant turn of a CodingEnv.

For each assistant turn a judge turns what followed (tool output, errors, test verdict) into
a hindsight hint, and the teacher scores the tokens the student actually sampled with the
hint in its context. The resulting `OPDRecord`s are delivered through `info["opd"]`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import gymnasium as gym

from opd_gym.opd.judges import make_judge
from opd_gym.opd.metrics import OPDMetrics
from opd_gym.opd.record import OPDRecord
from opd_gym.opd.scorer import Judged, Scorer
from opd_gym.opd.turns import TurnSample, sample_turn

DELIVERIES = ("per_step", "per_episode")


def resolve_teacher(spec: Any) -> Any:
    """A teacher from a spec: "tiny" (a locally built demo model), "smollm2" (the real small
    model from PyPI), "hf:PATH", a dict {"spec": ..., **options} (e.g. dtype, device,
    max_model_len), or an object."""
    from opd_gym.models.smollm2 import resolve_model_spec
    from opd_gym.opd.teachers import make_teacher

    spec = resolve_model_spec(spec)
    if spec == "tiny":
        from opd_gym.models.tiny import ensure_tiny_model

        return make_teacher(f"hf:{ensure_tiny_model()}")
    if isinstance(spec, str):
        return make_teacher(spec)
    if isinstance(spec, Mapping):
        options = dict(spec)
        target = options.pop("spec")
        if target == "tiny":
            from opd_gym.models.tiny import ensure_tiny_model

            target = f"hf:{ensure_tiny_model()}"
        return make_teacher(target, **options)
    if hasattr(spec, "score") and hasattr(spec, "tokenizer"):
        return spec
    raise ValueError(
        f"unknown teacher {spec!r}: use 'tiny', 'smollm2', 'hf:/path', or a Teacher object"
    )


class OPDWrapper(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Adds OPD records to `info["opd"]` (hermes-agent AgenticOPDConfig names in brackets).

    Args:
        teacher: "tiny", "smollm2", "hf:/path/to/model", {"spec": ..., **options}, or a Teacher.
        judge: "rule" (default, offline), "openai:http://host:port/v1", a dict
            {"type": "openai", "url": ..., ...}, a callable (turn, next_state) -> hint, or None.
        topk: teacher top-K per student token [distill_topk].
        votes: judge samples per turn, from one request [prm_votes].
        enabled: False makes the wrapper a pass-through [opd_enabled].
        max_next_state_chars: next-state text cap, head + tail [hint_max_next_state_chars].
        hint_scope: "turn" (each turn sees only its own hint) or "episode" (one teacher pass
            over the whole trajectory, every hint in place; needs per_episode delivery).
        hint_placement: "before_turn" (a message right before the scored turn) or
            "task_message" (appended to the task message, as OpenClaw/hermes do).
        delivery: "per_step" (the turn's record in that step's info["opd"]) or "per_episode"
            (all records in the terminal step's info["opd"], judged concurrently).
            `info["opd"]` is always a list of records, empty when a step brings none.
        async_scoring: per_step: records arrive in later steps' info["opd"] and the
            terminal step waits for the rest; per_episode: judging starts in the background
            as each turn's next state is known. The agent's next turn is never blocked.
        vote_rule, hint_choice: how LLM judge votes are combined (see `opd_gym.opd.judges`).
        score_without_hint: also score turns the judge gave no hint (default True).
        student_tokenizer: path or tokenizer of the student; refused if it differs from the
            teacher's.
        copy_guard: "mask" (default): response positions that reproduce `copy_min_words`
            consecutive words of the hint carry no teacher signal (the student must not be
            rewarded for writing its own hint); "keep": only report them (`record.copied`).
        on_history_rewrite: episode scope, when a turn's prompt does not extend the sequence
            of the turns before it: "split" scores it from its own prompt (a new pass) and
            says so in `record.context`; "refuse" leaves it unscored.
    """

    def __init__(
        self,
        env: gym.Env,
        teacher: Any = "tiny",
        judge: Any = "rule",
        topk: int = 50,
        votes: int = 3,
        *,
        enabled: bool = True,
        max_next_state_chars: int = 4000,
        hint_scope: str = "turn",
        hint_placement: str = "before_turn",
        delivery: str = "per_step",
        async_scoring: bool = False,
        vote_rule: str = "majority",
        hint_choice: str = "longest",
        score_without_hint: bool = True,
        judge_workers: int = 4,
        student_tokenizer: Any = None,
        copy_guard: str = "mask",
        copy_min_words: int = 4,
        on_history_rewrite: str = "split",
    ) -> None:
        args = {
            "teacher": teacher,
            "judge": judge,
            "topk": topk,
            "votes": votes,
            "enabled": enabled,
            "max_next_state_chars": max_next_state_chars,
            "hint_scope": hint_scope,
            "hint_placement": hint_placement,
            "delivery": delivery,
            "async_scoring": async_scoring,
            "vote_rule": vote_rule,
            "hint_choice": hint_choice,
            "score_without_hint": score_without_hint,
            "judge_workers": judge_workers,
            "student_tokenizer": student_tokenizer,
            "copy_guard": copy_guard,
            "copy_min_words": copy_min_words,
            "on_history_rewrite": on_history_rewrite,
        }
        # Objects (a loaded teacher, a judge function) are kept as they are, not deep-copied.
        gym.utils.RecordConstructorArgs.__init__(
            self, _disable_deepcopy=not _json_able(args), **args
        )
        gym.Wrapper.__init__(self, env)
        if delivery not in DELIVERIES:
            raise ValueError(f"delivery must be one of {DELIVERIES}, got {delivery!r}")
        if hint_scope == "episode" and delivery != "per_episode":
            raise ValueError(
                "hint_scope='episode' scores the whole episode in one pass at its "
                "end: use delivery='per_episode'"
            )
        self.enabled = enabled
        self.delivery = delivery
        self.async_scoring = async_scoring
        self.max_next_state_chars = max_next_state_chars
        self.metrics = OPDMetrics()
        self._scorer: Scorer | None = None
        self._config = args
        self._background: ThreadPoolExecutor | None = None
        self._pending: list[Future] = []
        self._episode: list[OPDRecord] = []

    # -- lazy construction (the teacher may be a model: build it on first use) ---------------
    @property
    def scorer(self) -> Scorer:
        if self._scorer is None:
            cfg = self._config
            teacher = resolve_teacher(cfg["teacher"])
            if cfg["student_tokenizer"] is not None:
                self._check_tokenizer(teacher, cfg["student_tokenizer"])
            judge = cfg["judge"]
            if isinstance(judge, str) and judge.split(":", 1)[0] in {"openai", "vllm"}:
                judge = {"type": "openai", "url": judge.split(":", 1)[1]}
            if isinstance(judge, Mapping) and judge.get("type", "openai") != "rule":
                judge = {
                    "votes": cfg["votes"],
                    "rule": cfg["vote_rule"],
                    "hint_choice": cfg["hint_choice"],
                    **judge,
                }
            self._scorer = Scorer(
                teacher,
                make_judge(judge),
                topk=cfg["topk"],
                scope=cfg["hint_scope"],
                placement=cfg["hint_placement"],
                score_without_hint=cfg["score_without_hint"],
                judge_workers=cfg["judge_workers"],
                copy_guard=cfg["copy_guard"],
                copy_min_words=cfg["copy_min_words"],
                on_history_rewrite=cfg["on_history_rewrite"],
            )
        return self._scorer

    @staticmethod
    def _check_tokenizer(teacher: Any, student: Any) -> None:
        from opd_gym.opd.chat import check_same_tokenizer

        if isinstance(student, str):
            from transformers import AutoTokenizer

            student = AutoTokenizer.from_pretrained(student)
        check_same_tokenizer(teacher.tokenizer, student)

    # -- gym API ---------------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        if self.enabled:
            self._wait_pending()  # records of an abandoned episode are dropped, not mixed in
            self._episode = []
        return self.env.reset(seed=seed, options=options)

    def step(self, action: Any):
        obs, reward, terminated, truncated, info = self.env.step(action)
        if not self.enabled:
            return obs, reward, terminated, truncated, info
        done = terminated or truncated
        scorer = self.scorer
        sample = self._sample_last_turn()
        if self.delivery == "per_step" and not self.async_scoring:
            record = scorer.score([scorer.judge_one(sample)])[0]
            self._episode.append(record)
            info["opd"] = [record]
        elif self.delivery == "per_step":
            self._submit(lambda: scorer.score([scorer.judge_one(sample)]))
            info["opd"] = self._drain(wait=done)
        else:
            self._pending.append(
                scorer.judge_async(sample) if self.async_scoring else _done_future(sample)
            )
            info["opd"] = self._score_episode() if done else []
        if done:
            info["opd_metrics"] = self.metrics.episode(self._episode)
            self._episode = []
        return obs, reward, terminated, truncated, info

    def close(self) -> None:
        self._wait_pending()
        if self._background is not None:
            self._background.shutdown(wait=True)
            self._background = None
        if self._scorer is not None:
            self._scorer.close()
        super().close()

    # -- internals ---------------------------------------------------------------------------------
    def _sample_last_turn(self) -> TurnSample:
        base = self.env.unwrapped
        turn = base.turns[-1]
        return sample_turn(
            turn,
            base.messages,
            base.tools,
            base.task.prompt,
            max_next_state_chars=self.max_next_state_chars,
            tokenizer=self.scorer.teacher.tokenizer,
        )

    def _submit(self, job: Callable[[], list[OPDRecord]]) -> None:
        if self._background is None:  # one worker keeps turns in order (KV-cache reuse)
            self._background = ThreadPoolExecutor(1, thread_name_prefix="opd-score")
        self._pending.append(self._background.submit(job))

    def _drain(self, *, wait: bool) -> list[OPDRecord]:
        """Records of finished background jobs (all of them when `wait`), in turn order."""
        ready: list[OPDRecord] = []
        while self._pending and (wait or self._pending[0].done()):
            ready += self._pending.pop(0).result()
        self._episode += ready
        return ready

    def _score_episode(self) -> list[OPDRecord]:
        """Judge what is not judged yet (concurrently), then score all turns in one call."""
        items: list[Judged | TurnSample] = [f.result() for f in self._pending]
        self._pending = []
        todo = [i for i, item in enumerate(items) if isinstance(item, TurnSample)]
        for i, judged in zip(todo, self.scorer.judge_all([items[i] for i in todo]), strict=True):
            items[i] = judged
        records = self.scorer.score(items)
        self._episode = list(records)
        return records

    def _wait_pending(self) -> None:
        for future in self._pending:
            try:
                future.result()
            except Exception:
                pass
        self._pending = []


def _json_able(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


def _done_future(value: Any) -> Future:
    future: Future = Future()
    future.set_result(value)
    return future
