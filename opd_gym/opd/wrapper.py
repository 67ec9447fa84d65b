"""OPDWrapper: on-policy distillation targets for every assistant turn of a CodingEnv.

For each assistant turn a judge turns what followed (tool output, errors, test verdict) into
a hindsight hint, and the teacher scores the tokens the student actually sampled with the
hint in its context. The resulting `OPDRecord`s are delivered through `info["opd"]`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from typing import Any

import gymnasium as gym

from opd_gym.errors import ConfigError
from opd_gym.opd.config import DELIVERIES, UNCHECKED, OPDConfig  # noqa: F401  (DELIVERIES)
from opd_gym.opd.metrics import OPDMetrics
from opd_gym.opd.scorer import Judged, Scorer
from opd_gym.opd.turns import TurnSample, sample_turn
from opd_gym.records.opd_record import OPDRecord

_UNSET: Any = object()  # an option the caller did not pass (None is a valid judge)


class OPDWrapper(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Adds OPD records to `info["opd"]`, a list of records (empty when a step brings none).

    Takes either `config=OPDConfig(...)` or the same options as keyword arguments (both:
    the keywords override the config); `OPDConfig` documents every option and its one
    default. The teacher is built on first use (`opd_gym.opd.teachers.make_teacher`)
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
            forced_student, teacher_options, judge_options).
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
        self._previous: TurnSample | None = None  # the episode's last turn (extends_previous)
        self._student_known = config.student_tokenizer is not None
        self._student_tok: Any = None  # the checked student tokenizer, for info["student_prompt"]
        self._student_temperature = config.student_temperature
        if self.enabled:  # a bad path or a dead server: one line now, not a traceback later
            from opd_gym import specs

            specs.validate("teacher", config.teacher)
            specs.validate("judge", config.judge)

    def bind_student(self, tokenizer: Any, temperature: float | None = None) -> None:
        """Tell the wrapper the agent's tokenizer and the temperature of its logprobs: the
        tokenizer is checked against the teacher's now (ConfigError; skipped only for
        student_tokenizer='unchecked') and used when the config left it unset."""
        if not self.enabled:
            return
        if temperature is not None and self.config.student_temperature is None:
            self._student_temperature = float(temperature)
            if self._scorer is not None:
                self._scorer.student_temperature = self._student_temperature
        if tokenizer is None or self.config.student_tokenizer == UNCHECKED:
            return
        self._check_tokenizer(self.scorer.teacher, tokenizer, self.config.teacher)
        if self.config.student_tokenizer is None:
            self._student_known = True
            self._student_tok = tokenizer

    # -- lazy construction (the teacher may be a model: build it on first use) ---------------
    @property
    def scorer(self) -> Scorer:
        if self._scorer is None:
            scorer, owned, student = make_scorer(self.config,
                                                 student_temperature=self._student_temperature)
            self._owned += owned
            if student is not None:
                self._student_tok = student
            self._scorer = scorer
        return self._scorer

    def _close_owned(self) -> None:
        """Close the teacher and judge this wrapper built (never objects it was given)."""
        from opd_gym.records.policy import close

        while self._owned:
            close(self._owned.pop())

    @staticmethod
    def _check_tokenizer(teacher: Any, student: Any, teacher_spec: Any) -> None:
        from opd_gym.opd.chat import check_tokenizers

        name = teacher_spec if isinstance(teacher_spec, str) else getattr(teacher, "name", "")
        check_tokenizers(student, teacher.tokenizer, teacher_name=str(name or ""))

    # -- gym API ---------------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        if self.enabled:
            self._wait_pending()  # records of an abandoned episode are dropped, not mixed in
            self._episode = []
            self._previous = None
            _ = self.scorer  # teacher loaded, tokenizers checked: before the episode starts
        obs, info = self.env.reset(seed=seed, options=options)
        if self.enabled:
            self._offer_prompt(info)
        return obs, info

    def _offer_prompt(self, info: dict[str, Any]) -> None:
        """`info["student_prompt"]`: the student's next prompt as ids (and text) under its
        checked tokenizer, rendered the way the teacher's context is; agents that prompt with
        these ids get exact teacher contexts."""
        tok = self._student_tok
        if tok is None or "messages" not in info:
            return
        from opd_gym.transcript import prompt_ids

        ids = prompt_ids(tok, info["messages"], info.get("tools"))
        info["student_prompt"] = {"ids": ids, "text": tok.decode(ids, skip_special_tokens=False)}

    def check_action(self, action: Any) -> None:
        """Refuse a turn this wrapper could not score, before the env runs any of it (the
        sandbox, the transcript and the turn count stay as they were): token ids from a
        student whose tokenizer is unknown (ConfigError)."""
        if not self.enabled or self._student_known:
            return
        from opd_gym.actions import to_model_output

        if to_model_output(action).token_ids is not None:
            raise ConfigError(
                "the agent passed token ids but the student's tokenizer is unknown, so they "
                "cannot be checked against the teacher's: pass student_tokenizer= (the "
                "policy's: 'tiny', 'smollm2', 'hf:PATH' or a tokenizer object), or "
                "student_tokenizer='unchecked' (every record then says ids_unchecked)")

    def step(self, action: Any):
        self.check_action(action)  # before the env runs anything of the turn
        obs, reward, terminated, truncated, info = self.env.step(action)
        if not self.enabled:
            return obs, reward, terminated, truncated, info
        done = terminated or truncated
        scorer = self.scorer
        sample = self._sample_turn(info)
        sample = replace(sample, extends_previous=extends_previous(self._previous, sample))
        self._previous = sample
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
        else:
            self._offer_prompt(info)
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


def make_scorer(cfg: OPDConfig, *, student_temperature: float | None = None
                ) -> tuple[Scorer, list[Any], Any]:
    """The scorer an OPD config describes: (scorer, the teacher and judge built here from
    specs, for the caller to close; the student tokenizer `cfg.student_tokenizer` names,
    checked against the teacher's, or None). One construction for the wrapper and for
    scoring trajectories read back (`opd_gym.exports.atif_in`), so both score alike."""
    from opd_gym import specs
    from opd_gym.opd.judges import make_judge
    from opd_gym.opd.teachers import make_teacher
    from opd_gym.records.policy import close

    options = dict(cfg.teacher_options)
    if cfg.teacher_temperature != 1.0 and not hasattr(cfg.teacher, "score"):
        options["temperature"] = cfg.teacher_temperature
    try:
        teacher = make_teacher(cfg.teacher, **options)
    except (OSError, ValueError) as exc:
        if isinstance(exc, ConfigError):
            raise
        raise ConfigError(f"the teacher {cfg.teacher!r} cannot be loaded: "
                          f"{str(exc).splitlines()[0] if str(exc) else exc!r}") from None
    owned: list[Any] = [teacher] if teacher is not cfg.teacher else []
    student = None
    try:
        if cfg.teacher_temperature != getattr(teacher, "temperature", 1.0):
            raise ConfigError(f"teacher_temperature={cfg.teacher_temperature} but the "
                              "teacher object scores at temperature "
                              f"{getattr(teacher, 'temperature', 1.0)}")
        if cfg.student_tokenizer not in (None, UNCHECKED):
            student = specs.tokenizer(cfg.student_tokenizer)
            OPDWrapper._check_tokenizer(teacher, student, cfg.teacher)
        judge = make_judge(cfg.judge, **cfg.judge_defaults)
    except BaseException:
        for thing in owned:
            close(thing)
        raise
    if judge is not cfg.judge and judge is not None:
        owned.append(judge)
    scorer = Scorer(
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
        ids_unchecked=cfg.student_tokenizer == UNCHECKED,
        student_temperature=student_temperature,
        no_hint_control=cfg.no_hint_control,
        forced_student=cfg.forced_student,
    )
    return scorer, owned, student


def extends_previous(previous: TurnSample | None, sample: TurnSample) -> bool | None:
    """Whether `sample`'s prompt ids start with `previous`'s prompt + sampled ids (the agent
    kept its history as the model saw it); None for a first turn or a turn without ids."""
    if previous is None or None in (previous.prompt_ids, previous.token_ids,
                                    sample.prompt_ids):
        return None
    before = [*previous.prompt_ids, *previous.token_ids]
    return list(sample.prompt_ids[:len(before)]) == before


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


def bind_agent(env: gym.Env, agent: Any) -> None:
    """Give the OPD wrapper in `env`'s stack the agent's tokenizer and sampling temperature
    (when the agent is a `TokenPolicy` and the config left them unset): the rollout job and
    the Ray workers call this before the first episode, so a teacher with another tokenizer
    is refused there."""
    from opd_gym.records.policy import TokenPolicy

    if not isinstance(agent, TokenPolicy):  # scripted and served policies: text only
        return
    layer: Any = env
    while layer is not None:
        if isinstance(layer, OPDWrapper):
            layer.bind_student(agent.tokenizer, agent.logprob_temperature)
            return
        layer = getattr(layer, "env", None)
