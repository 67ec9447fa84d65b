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

from opd_gym.errors import ConfigError
from opd_gym.opd.config import DELIVERIES, OPDConfig  # noqa: F401  (DELIVERIES: old path)
from opd_gym.opd.metrics import OPDMetrics
from opd_gym.opd.record import OPDRecord
from opd_gym.opd.scorer import Judged, Scorer
from opd_gym.opd.turns import TurnSample, sample_turn

_UNSET: Any = object()  # an option the caller did not pass (None is a valid judge)


def resolve_teacher(spec: Any) -> Any:
    """A teacher from a spec, a mapping {"spec": ..., **options} or an object (forwards to the
    registry, `opd_gym.specs.make_teacher`)."""
    from opd_gym.specs import make_teacher

    return make_teacher(spec)


class OPDWrapper(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Adds OPD records to `info["opd"]`, a list of records (empty when a step brings none).

    Takes either `config=OPDConfig(...)` or the same options as keyword arguments (both:
    the keywords override the config); `OPDConfig` documents every option and its one
    default. The teacher is built on first use (through `opd_gym.specs` when it is a spec)
    and closed by the wrapper that built it; a teacher object stays its owner's to close.

    Args:
        teacher: "tiny", "smollm2", "hf:/path/to/model", {"spec": ..., **options}, or a Teacher.
        judge: "rule" (default, offline), "openai:http://host:port/v1", a dict
            {"type": "openai", "url": ..., ...}, a callable (turn, next_state) -> hint, or None.
        topk: teacher top-K per student token [distill_topk].
        votes: judge samples per turn, from one request [prm_votes].
        delivery: "per_step" (the turn's record in that step's info["opd"]) or "per_episode"
            (all records in the terminal step's info["opd"], judged concurrently); derived
            from hint_scope when not given.
        async_scoring: per_step: records arrive in later steps' info["opd"] and the
            terminal step waits for the rest; per_episode: judging starts in the background
            as each turn's next state is known. The agent's next turn is never blocked.
        **options: the other `OPDConfig` fields (hint_scope, hint_placement, enabled,
            max_next_state_chars, vote_rule, hint_choice, score_without_hint, judge_workers,
            student_tokenizer, copy_guard, copy_min_words, on_history_rewrite,
            teacher_options, judge_options).
    """

    def __init__(
        self,
        env: gym.Env,
        teacher: Any = _UNSET,
        judge: Any = _UNSET,
        topk: Any = _UNSET,
        votes: Any = _UNSET,
        *,
        config: OPDConfig | None = None,
        **options: Any,
    ) -> None:
        given = {name: value for name, value in
                 (("teacher", teacher), ("judge", judge), ("topk", topk), ("votes", votes))
                 if value is not _UNSET}
        config = OPDConfig.from_kwargs(config, **given, **options)
        args = config.to_kwargs()
        # Objects (a loaded teacher, a judge function) are kept as they are, not deep-copied.
        gym.utils.RecordConstructorArgs.__init__(
            self, _disable_deepcopy=not _json_able(args), **args
        )
        gym.Wrapper.__init__(self, env)
        self.config = config
        self.enabled = config.enabled
        self.delivery = config.delivery
        self.async_scoring = config.async_scoring
        self.max_next_state_chars = config.max_next_state_chars
        self.metrics = OPDMetrics()
        self._scorer: Scorer | None = None
        self._owned: list[Any] = []  # what this wrapper built from specs, closed by close()
        self._background: ThreadPoolExecutor | None = None
        self._pending: list[Future] = []
        self._episode: list[OPDRecord] = []

    # -- lazy construction (the teacher may be a model: build it on first use) ---------------
    @property
    def scorer(self) -> Scorer:
        if self._scorer is None:
            from opd_gym import specs

            cfg = self.config
            teacher = specs.make_teacher(cfg.teacher, **cfg.teacher_options)
            if teacher is not cfg.teacher:
                self._owned.append(teacher)
            try:
                if cfg.student_tokenizer is not None:
                    self._check_tokenizer(teacher, cfg.student_tokenizer)
                judge = specs.make_judge(cfg.judge, **cfg.judge_defaults)
            except BaseException:
                self._close_owned()
                raise
            if judge is not cfg.judge and judge is not None:
                self._owned.append(judge)
            self._scorer = Scorer(
                teacher,
                judge,
                topk=cfg.topk,
                scope=cfg.hint_scope,
                placement=cfg.hint_placement,
                score_without_hint=cfg.score_without_hint,
                judge_workers=cfg.judge_workers,
                copy_guard=cfg.copy_guard,
                copy_min_words=cfg.copy_min_words,
                on_history_rewrite=cfg.on_history_rewrite,
            )
        return self._scorer

    def _close_owned(self) -> None:
        """Close the teacher and judge this wrapper built (never objects it was given)."""
        while self._owned:
            close = getattr(self._owned.pop(), "close", None)
            if callable(close):
                close()

    @staticmethod
    def _check_tokenizer(teacher: Any, student: Any) -> None:
        from opd_gym.opd.chat import check_same_tokenizer
        from opd_gym.specs import tokenizer

        check_same_tokenizer(teacher.tokenizer, tokenizer(student))

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
        sample = self._sample_turn(info)
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
        self._close_owned()
        super().close()

    # -- internals ---------------------------------------------------------------------------------
    def _sample_turn(self, info: Mapping[str, Any]) -> TurnSample:
        """The turn that just happened, from the step's info alone (no env internals)."""
        missing = [k for k in ("turn_snapshot", "messages", "tools", "task_prompt")
                   if k not in info]
        if missing:
            raise ConfigError(f"OPDWrapper needs info keys {missing} from step(): wrap a "
                              "CodingEnv, or keep those keys in the wrappers beneath it")
        return sample_turn(
            info["turn_snapshot"],
            info["messages"],
            info["tools"],
            info["task_prompt"],
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
