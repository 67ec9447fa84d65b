"""Turn samples -> OPD records: judge every turn (concurrently), build token-exact teacher
inputs with the hints, score them with the teacher, and never lose a turn on failure.

Hint scopes:
- `turn` (OpenClaw semantics): turn t is scored on the context it saw plus its own hint only,
  one teacher request per turn (a KV-reusing teacher pays about hint + response per turn);
- `episode`: every turn's hint is inserted in place before that turn and all turns are scored
  in ONE teacher pass over the whole trajectory, so cost grows with total tokens, and later
  turns also see earlier turns' hints.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from opd_gym.errors import ConfigError
from opd_gym.opd.chat import (
    BREAKS,
    PLACEMENTS,
    EpisodeTurn,
    build_teacher_ids,
    make_hint_message,
    plan_episode,
)
from opd_gym.opd.copyguard import COPY_GUARDS, copied_positions
from opd_gym.opd.judges import Verdict, as_verdict
from opd_gym.opd.teachers.base import ContextTooLong, ScoreRequest, Teacher, context_limit
from opd_gym.opd.turns import TurnSample
from opd_gym.records.opd_record import OPDRecord, SkipReason

Scope = Literal["turn", "episode"]
SCOPES = ("turn", "episode")


@dataclass(frozen=True)
class Judged:
    """A turn sample with its verdict and the exact student ids the teacher will score."""

    sample: TurnSample
    verdict: Verdict
    student_ids: tuple[int, ...]
    retokenized: bool
    judge_seconds: float


class Scorer:
    """Judges and scores turn samples with one teacher; thread-safe for concurrent episodes."""

    def __init__(
        self,
        teacher: Teacher,
        judge: Callable[..., Any] | None,
        *,
        topk: int = 50,
        scope: Scope = "turn",
        placement: str = "before_turn",
        score_without_hint: bool = True,
        judge_workers: int = 4,
        copy_guard: str = "mask",
        copy_min_words: int = 4,
        on_history_rewrite: str = "split",
        ids_unchecked: bool = False,
        student_temperature: float | None = None,
        no_hint_control: float = 0.0,
        forced_student: bool = False,
    ) -> None:
        if scope not in SCOPES:
            raise ConfigError(f"hint scope must be one of {SCOPES}, got {scope!r}")
        if placement not in PLACEMENTS:
            raise ConfigError(f"hint placement must be one of {PLACEMENTS}, got {placement!r}")
        if scope == "episode" and placement != "before_turn":
            raise ConfigError(
                "the episode hint scope places each hint before its turn; "
                "use placement='before_turn'"
            )
        if copy_guard not in COPY_GUARDS:
            raise ConfigError(f"copy_guard must be one of {COPY_GUARDS}, got {copy_guard!r}")
        if copy_min_words < 1:
            raise ConfigError("copy_min_words must be >= 1")
        if on_history_rewrite not in BREAKS:
            raise ConfigError(f"on_history_rewrite must be one of {BREAKS}, "
                             f"got {on_history_rewrite!r}")
        self.on_history_rewrite = on_history_rewrite
        self.ids_unchecked = bool(ids_unchecked)
        self.student_temperature = student_temperature
        self.teacher_temperature = float(getattr(teacher, "temperature", 1.0))
        self.no_hint_control = float(no_hint_control)
        self.forced_student = bool(forced_student)
        if self.forced_student and scope == "episode":
            raise ConfigError("forced_student scores turns one by one: use scope='turn'")
        self._control_seen = 0  # hinted turns seen, for the control's even sampling
        self.copy_guard = copy_guard
        self.copy_min_words = copy_min_words
        self.teacher = teacher
        self.judge = judge
        self.topk = topk
        self.scope = scope
        self.placement = placement
        self.score_without_hint = score_without_hint
        self._judges = ThreadPoolExecutor(max(judge_workers, 1), thread_name_prefix="opd-judge")

    # -- judging -------------------------------------------------------------------------------
    def _student_ids(self, sample: TurnSample) -> tuple[tuple[int, ...], bool]:
        """The sampled ids, or (marked retokenized) the text encoded plus end-of-turn."""
        if sample.token_ids is not None:
            return sample.token_ids, False
        tok = self.teacher.tokenizer
        ids = list(tok.encode(sample.text, add_special_tokens=False))
        if tok.eos_token_id is not None:
            ids.append(int(tok.eos_token_id))
        return tuple(ids), True

    def judge_one(self, sample: TurnSample) -> Judged:
        started = time.perf_counter()
        if self.judge is None:
            verdict = Verdict(hint=None)
        else:
            try:
                verdict = as_verdict(self.judge(sample.judge_input, sample.next_state))
            except Exception as exc:  # a user's judge must not take the episode down
                verdict = Verdict(hint=None, error=f"judge raised {type(exc).__name__}: {exc}")
        ids, retok = self._student_ids(sample)
        return Judged(sample, verdict, ids, retok, time.perf_counter() - started)

    def judge_async(self, sample: TurnSample):
        """Start judging `sample` in the background (returns a Future of Judged)."""
        return self._judges.submit(self.judge_one, sample)

    def judge_all(self, samples: Sequence[TurnSample]) -> list[Judged]:
        return list(self._judges.map(self.judge_one, samples))

    # -- scoring -------------------------------------------------------------------------------
    def _unscored(self, judged: Judged, error: str, reason: SkipReason) -> OPDRecord:
        return OPDRecord.unscored(
            judged.student_ids,
            error,
            reason=reason,
            topk=self.topk,
            student_logprobs=self._student_logprobs(judged),
            hint=judged.verdict.hint,
            votes=judged.verdict.votes,
            turn_index=judged.sample.index,
            retokenized=judged.retokenized,
            timing={"judge_s": judged.judge_seconds},
            scope=self.scope,
            **self._footing(judged),
        )

    def _footing(self, judged: Judged) -> dict[str, Any]:
        """How a record's numbers stand: temperatures, unchecked ids, reconstructed prompt."""
        return {"student_temperature": self.student_temperature,
                "teacher_temperature": self.teacher_temperature,
                "ids_unchecked": self.ids_unchecked,
                "reconstructed": judged.sample.prompt_ids is None and not judged.retokenized,
                "extends_previous": judged.sample.extends_previous}

    @staticmethod
    def _student_logprobs(judged: Judged) -> Any:
        lp = judged.sample.logprobs
        if lp is None or judged.retokenized or len(lp) != len(judged.student_ids):
            return None
        return lp

    def _skip_reason(self, judged: Judged) -> tuple[SkipReason, str] | None:
        if judged.verdict.error:
            return SkipReason.JUDGE_ERROR, f"judge error: {judged.verdict.error}"
        if not judged.student_ids:
            return SkipReason.EMPTY_TURN, "empty turn: no tokens to score"
        if judged.verdict.hint is None and not self.score_without_hint:
            return SkipReason.NO_HINT, "no hint: the judge found nothing to teach"
        return None

    def _hint_message(self, judged: Judged) -> dict[str, str] | None:
        hint = judged.verdict.hint
        return make_hint_message(hint) if hint else None

    def _request(self, judged: Judged) -> tuple[ScoreRequest, str]:
        """The turn-scope teacher input and a note saying which context it is built on."""
        sample = judged.sample
        hint = self._hint_message(judged)
        exact = sample.prompt_ids is not None
        note = "turn, from the student's prompt ids" if exact else \
            "turn, from the rendered messages (no prompt ids)"
        if exact and hint is not None and self.placement == "task_message":
            return self._task_message_request(judged, hint)
        try:
            ids, span = build_teacher_ids(
                self.teacher.tokenizer, sample.context, sample.tools, hint, judged.student_ids,
                placement=self.placement, context_ids=sample.prompt_ids,
            )
        except ValueError as exc:
            if not exact or hint is None or self.placement != "before_turn":
                raise
            # The template rewrites the history when the hint message is added: the teacher
            # gets the template's rendering of the messages plus the hint, and the record says so.
            ids, span = build_teacher_ids(
                self.teacher.tokenizer, sample.context, sample.tools, hint, judged.student_ids,
                placement=self.placement,
            )
            note = f"turn, from the rendered messages plus the hint ({exc})"
        candidates = self._candidates(judged)
        return ScoreRequest(ids, [span], None if candidates is None else [candidates]), note

    def _task_message_request(self, judged: Judged, hint: dict[str, str]
                              ) -> tuple[ScoreRequest, str]:
        """The hint inside the task message: exact when the template renders the student's
        prompt ids from its messages (then only the hint differs); otherwise refused."""
        from opd_gym.models.tokenizer import render_ids

        sample = judged.sample
        tok = self.teacher.tokenizer
        rendered = render_ids(tok, sample.context, sample.tools or None,
                              add_generation_prompt=True)
        if rendered != [int(i) for i in sample.prompt_ids]:
            at = next((i for i, (a, b) in enumerate(zip(rendered, sample.prompt_ids,
                                                        strict=False)) if a != b),
                      min(len(rendered), len(sample.prompt_ids)))
            raise ValueError("hint_placement='task_message' rewrites the task message, and the "
                             "chat template does not reproduce the student's prompt ids (they "
                             f"differ at position {at}); use hint_placement='before_turn'")
        ids, span = build_teacher_ids(tok, sample.context, sample.tools, hint,
                                      judged.student_ids, placement="task_message")
        candidates = self._candidates(judged)
        return (ScoreRequest(ids, [span], None if candidates is None else [candidates]),
                "turn, the student's prompt (template-checked) with the hint in the task message")

    def _candidates(self, judged: Judged) -> np.ndarray | None:
        """The student's own top-K ids for the teacher to score, when the policy gave them for
        exactly these tokens and the teacher can score given ids (`supports_candidates`)."""
        topk = judged.sample.student_topk_ids
        if topk is None or judged.retokenized or len(topk) != len(judged.student_ids) or \
                not topk or not getattr(self.teacher, "supports_candidates", False):
            return None
        return np.asarray(topk, np.int64)

    def score(self, judged: Sequence[Judged]) -> list[OPDRecord]:
        """Records for judged turns, in order; failures become unscored records with `error`."""
        records: list[OPDRecord | None] = [None] * len(judged)
        todo: list[int] = []
        for i, item in enumerate(judged):
            skip = self._skip_reason(item)
            if skip:
                records[i] = self._unscored(item, skip[1], skip[0])
            else:
                todo.append(i)
        if self.scope == "episode" and todo:
            # One pass needs every turn in the sequence, so skipped turns are still included.
            self._score_episode(judged, todo, records)
        elif todo:
            self._score_turns(judged, todo, records)
        return [r for r in records if r is not None]

    def _score_turns(self, judged, todo, records) -> None:
        requests: dict[int, tuple[ScoreRequest, str]] = {}
        for i in todo:
            try:
                requests[i] = self._request(judged[i])
            except Exception as exc:
                records[i] = self._unscored(judged[i], f"teacher input: {exc}",
                                            SkipReason.TEACHER_INPUT)
        limit = context_limit(self.teacher)
        for i in list(requests):  # too long for the teacher: said per turn, the rest scored
            if limit is not None and len(requests[i][0].ids) > limit:
                records[i] = self._unscored(judged[i], too_long(len(requests.pop(i)[0].ids),
                                                                limit),
                                            SkipReason.CONTEXT_TOO_LONG)
        order = list(requests)
        taken = {i for i in order if self._take_control(judged[i])}
        # hinted turns of a forced student also need the bare (no-hint) pass, as the control
        controls = [i for i in order if i in taken
                    or self._forces_student(judged[i]) and judged[i].verdict.hint]
        control_requests = []
        for i in list(controls):
            try:
                control = self._control_request(judged[i])
                if limit is not None and len(control.ids) > limit:
                    raise ContextTooLong(too_long(len(control.ids), limit))
                control_requests.append(control)
            except Exception:  # the control is best effort: the scored turn stands
                controls.remove(i)
        started = time.perf_counter()
        try:
            results = self.teacher.score(
                [requests[i][0] for i in order] + control_requests, self.topk)
        except Exception as exc:
            self._fail(judged, order, records, exc)
            return
        spent = (time.perf_counter() - started) / max(len(order), 1)
        control_of = dict(zip(controls, results[len(order):], strict=True))
        for i, spans in zip(order, results, strict=False):
            hints = [judged[i].verdict.hint] if judged[i].verdict.hint else []
            forced = None
            if self._forces_student(judged[i]):  # no hint: the turn's own request is the bare one
                bare = control_of.get(i) if hints else spans
                forced = None if bare is None else bare[0].token_logprobs
            records[i] = self._record(judged[i], spans[0], spent, requests[i][1], hints,
                                      forced_student=forced)
            if i in control_of and i in taken:
                lp = np.asarray(control_of[i][0].token_logprobs, np.float32)
                records[i].control_teacher_logprobs = np.where(records[i].mask, lp,
                                                               np.float32(np.nan))

    def _forces_student(self, judged: Judged) -> bool:
        """True when this turn's student logprobs are the teacher model's own, no hint."""
        return self.forced_student and judged.sample.logprobs is None

    def _forced_source(self) -> str:
        """What a forced record's `student_logprobs_source` says: model and method."""
        name = str(getattr(self.teacher, "name", "") or type(self.teacher).__name__)
        if os.path.isabs(name):  # a local folder: its name, not this machine's path
            name = os.path.basename(name.rstrip(os.sep)) or name
        return (f"teacher-forced: {name} (the teacher model, without the hint) scored the "
                "policy's tokens in the student's context; the policy gave no logprobs, so "
                "these tokens were not sampled from this model")

    def _take_control(self, judged: Judged) -> bool:
        """Every 1/share-th hinted turn (evenly, deterministic) gets the no-hint control."""
        if self.no_hint_control <= 0 or not judged.verdict.hint:
            return False
        n = self._control_seen
        self._control_seen += 1
        return int((n + 1) * self.no_hint_control) > int(n * self.no_hint_control)

    def _control_request(self, judged: Judged) -> ScoreRequest:
        """The turn's teacher input with an empty hint: the student's context, nothing added."""
        sample = judged.sample
        ids, span = build_teacher_ids(self.teacher.tokenizer, sample.context, sample.tools,
                                      None, judged.student_ids, context_ids=sample.prompt_ids)
        return ScoreRequest(ids, [span], None)

    def _score_episode(self, judged, todo, records) -> None:
        turns = [
            EpisodeTurn(item.sample.context, item.student_ids, self._hint_message(item),
                        prompt_ids=item.sample.prompt_ids)
            for item in judged
        ]
        started = time.perf_counter()
        try:
            plan = plan_episode(self.teacher.tokenizer, turns, judged[0].sample.tools,
                                on_break=self.on_history_rewrite)
            requests = [ScoreRequest(p.ids, p.spans, self._pass_candidates(judged, p.turns))
                        for p in plan.passes]
            results = self.teacher.score(requests, self.topk)
        except Exception as exc:
            self._fail(judged, todo, records, exc)
            return
        spent = (time.perf_counter() - started) / max(len(todo), 1)
        where = {t: (p, k) for p, one in enumerate(plan.passes) for k, t in enumerate(one.turns)}
        for i in todo:
            if i in plan.refused:
                records[i] = self._unscored(judged[i], f"history rewritten: {plan.refused[i]}",
                                            SkipReason.HISTORY_REWRITTEN)
                continue
            p, k = where[i]
            seen = [judged[t].verdict.hint for t in plan.passes[p].turns[:k + 1]]
            records[i] = self._record(judged[i], results[p][k], spent, plan.notes[i],
                                      [h for h in seen if h])

    def _pass_candidates(self, judged, turns) -> list[np.ndarray | None] | None:
        found = [self._candidates(judged[t]) for t in turns]
        return found if any(c is not None for c in found) else None

    def _fail(self, judged, indices, records, exc: Exception) -> None:
        """A teacher failure leaves these turns unscored, saying why; nothing is lost."""
        if isinstance(exc, ContextTooLong):
            why, reason = f"context too long: {exc}", SkipReason.CONTEXT_TOO_LONG
        else:
            why, reason = f"teacher error: {type(exc).__name__}: {exc}", SkipReason.TEACHER_ERROR
        for i in indices:
            records[i] = self._unscored(judged[i], why, reason)

    def _record(
        self,
        judged: Judged,
        scores: Any,
        teacher_seconds: float,
        context: str = "",
        hints: Sequence[str] = (),
        forced_student: Any = None,
    ) -> OPDRecord:
        """A scored record; positions reproducing any hint the teacher saw are copy-guarded;
        `forced_student`: the no-hint logprobs recorded as the student's (forced_student)."""
        copied = np.zeros(len(judged.student_ids), np.bool_)
        for hint in hints:
            copied |= copied_positions(
                self.teacher.tokenizer, judged.student_ids, hint, self.copy_min_words
            )
        candidate = getattr(scores, "candidate_logprobs", None)
        if self.copy_guard == "mask" and copied.any():
            scores = _without_rows(scores, copied)
            if candidate is not None:
                candidate = np.where(copied[:, None], np.float32(np.nan), candidate)
        topk = judged.sample.student_topk_ids
        return OPDRecord.from_scores(
            judged.student_ids,
            scores,
            student_logprobs=(self._student_logprobs(judged) if forced_student is None
                              else np.array(forced_student, np.float32)),
            student_logprobs_source=None if forced_student is None else self._forced_source(),
            hint=judged.verdict.hint,
            votes=judged.verdict.votes,
            turn_index=judged.sample.index,
            retokenized=judged.retokenized,
            timing={"judge_s": judged.judge_seconds, "teacher_s": teacher_seconds},
            scope=self.scope,
            copied=copied,
            context=context,
            student_topk_ids=(None if topk is None or judged.retokenized
                              or len(topk) != len(judged.student_ids) or not topk
                              else np.asarray(topk, np.int64)),
            teacher_candidate_logprobs=candidate,
            **self._footing(judged),
        )

    def close(self) -> None:
        self._judges.shutdown(wait=True)


def too_long(length: int, limit: int) -> str:
    """Why a turn was not scored when its teacher input does not fit the teacher's window."""
    return (f"context too long: the teacher input has {length} tokens, more than the "
            f"teacher's context window of {limit}; lower max_turns or the tool-output budget "
            "(max_tool_output_chars), or use a teacher with a longer context")


@dataclass(frozen=True)
class _Rows:
    """Span scores with some rows blanked (NaN), which the record then masks off."""

    token_logprobs: Any
    topk_ids: Any
    topk_logprobs: Any


def _without_rows(scores: Any, rows: Any) -> _Rows:
    """A copy of `scores` with `rows` set to NaN (no teacher signal there)."""
    token_lp = np.array(scores.token_logprobs, np.float32)
    topk_lp = np.array(scores.topk_logprobs, np.float32)
    token_lp[rows] = np.nan
    topk_lp[rows] = np.nan
    return _Rows(token_lp, np.array(scores.topk_ids, np.int32), topk_lp)
