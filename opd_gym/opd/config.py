"""OPDConfig: every option of the OPD wrapper in one frozen, self-validating object.

One default per option, shared by the Python API (`OPDWrapper(..., topk=...)` or
`OPDWrapper(env, config=OPDConfig(...))`), the rollout job and the CLI (which reads its flag
defaults from here). An invalid value or combination is refused when the config is built,
with one sentence naming the option; settings that follow from others (the delivery of the
episode hint scope, the LLM judge's vote options) are derived here, not by callers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from opd_gym.errors import ConfigError
from opd_gym.opd.chat import BREAKS as HISTORY_REWRITES
from opd_gym.opd.chat import PLACEMENTS
from opd_gym.opd.copyguard import COPY_GUARDS
from opd_gym.opd.judges import HINT_CHOICES, VOTE_RULES, check_judge_options
from opd_gym.opd.scorer import SCOPES

DELIVERIES = ("per_step", "per_episode")
UNCHECKED = "unchecked"  # student_tokenizer: the user opts out of the tokenizer check
DEFAULT_TOPK = 20  # a vLLM server's default --max-logprobs, so every teacher takes it as is


@dataclass(frozen=True)
class OPDConfig:
    """The OPD options (hermes-agent AgenticOPDConfig names in brackets).

    Args:
        teacher: "tiny", "smollm2", "auto", "hf:PATH", "vllm:URL", "vllm-engine:PATH",
            {"spec": ..., **options}, or a Teacher object (see `opd_gym.specs`).
        judge: "rule" (offline), "none", "openai:URL", "vllm:URL", a mapping
            {"type": "openai", "url": ..., ...}, a callable (turn, next_state) -> hint, or None.
        topk: teacher top-K per student token [distill_topk]; 20 by default, the most a vLLM
            server returns unless started with a larger --max-logprobs; 0 scores only the
            sampled tokens.
        votes: LLM judge samples per turn, from one request [prm_votes].
        enabled: False makes the wrapper a pass-through [opd_enabled].
        max_next_state_chars: next-state text cap, head + tail [hint_max_next_state_chars].
        hint_scope: "turn" (each turn sees only its own hint) or "episode" (one teacher pass
            over the whole trajectory, every hint in place).
        hint_placement: "before_turn" (a message right before the scored turn) or
            "task_message" (appended to the task message, as OpenClaw/hermes do).
        delivery: "per_step" or "per_episode"; None (default) derives it from the scope:
            per_episode for the episode scope (the only delivery it allows), else per_step.
        async_scoring: score in the background; the agent's next turn is never blocked.
        vote_rule, hint_choice: how LLM judge votes are combined (see `opd_gym.opd.judges`).
        score_without_hint: also score turns the judge gave no hint.
        judge_workers: turns judged concurrently.
        student_tokenizer: the student's tokenizer ("tiny", "smollm2", "hf:PATH", a model
            folder or a tokenizer object), compared with the teacher's (vocabulary, special
            tokens, chat-template ids, a text round trip) when the teacher is loaded, before
            the first episode; a mismatch is a ConfigError naming both. None (unknown): a turn
            that carries token ids is refused, unless the rollout job learned the tokenizer
            from the agent; "unchecked" opts out and every record says `ids_unchecked`.
        student_temperature: the temperature the agent's logprobs are at (the bundled
            policies report the distribution they sampled from); recorded in every record,
            None when not stated.
        teacher_temperature: the teacher's logprobs are of softmax(logits / T); 1.0 (default)
            is the model's own distribution. Only hf: teachers take another value.
        no_hint_control: share (0..1) of hinted turns also scored with an empty hint (the
            control); the run reports the mean teacher - student gap of those control turns.
        forced_student: for turns whose policy gave no logprobs (a scripted or replayed
            policy), record as `student_logprobs` the teacher model's own logprobs of the turn's
            ids with no hint, teacher-forced in the student's context (the self-distillation
            student: the same model without the hint), in the same batch as the hinted pass;
            each such record names the model and says so in `student_logprobs_source`.
        copy_guard: "mask" or "keep" hint copies in the response (see `opd_gym.opd.copyguard`).
        copy_min_words: consecutive hint words that count as a copy.
        on_history_rewrite: episode scope, a turn whose prompt rewrites history: "split" or
            "refuse".
        teacher_options: options of a teacher built here from a spec (dtype, device,
            max_model_len, ...); refused for a vllm: server and for a teacher object.
        judge_options: options of an LLM judge (model, temperature, max_tokens, timeout, ...);
            refused for the rule judge.
    """

    teacher: Any = "tiny"
    judge: Any = "rule"
    topk: int = DEFAULT_TOPK
    votes: int = 3
    enabled: bool = True
    max_next_state_chars: int = 4000
    hint_scope: str = "turn"
    hint_placement: str = "before_turn"
    delivery: str | None = None
    async_scoring: bool = False
    vote_rule: str = "majority"
    hint_choice: str = "longest"
    score_without_hint: bool = True
    judge_workers: int = 4
    student_tokenizer: Any = None
    student_temperature: float | None = None
    teacher_temperature: float = 1.0
    no_hint_control: float = 0.0
    forced_student: bool = False
    copy_guard: str = "mask"
    copy_min_words: int = 4
    on_history_rewrite: str = "split"
    teacher_options: Mapping[str, Any] = field(default_factory=dict)
    judge_options: Mapping[str, Any] = field(default_factory=dict)
    _derived: bool = field(default=False, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "teacher_options", MappingProxyType(dict(self.teacher_options)))
        object.__setattr__(self, "judge_options", MappingProxyType(dict(self.judge_options)))
        for name in ("enabled", "async_scoring", "score_without_hint", "forced_student"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"{name} must be True or False, got {getattr(self, name)!r}")
        for name, low in (("topk", 0), ("votes", 1), ("max_next_state_chars", 1),
                          ("judge_workers", 1), ("copy_min_words", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ConfigError(f"{name} must be an integer >= {low}, got {value!r}")
        for name, allowed in (("hint_scope", SCOPES), ("hint_placement", PLACEMENTS),
                              ("vote_rule", VOTE_RULES), ("hint_choice", HINT_CHOICES),
                              ("copy_guard", COPY_GUARDS),
                              ("on_history_rewrite", HISTORY_REWRITES)):
            if getattr(self, name) not in allowed:
                raise ConfigError(f"{name} must be one of {allowed}, got {getattr(self, name)!r}")
        if self.delivery is None:
            derived = "per_episode" if self.hint_scope == "episode" else "per_step"
            object.__setattr__(self, "delivery", derived)
            object.__setattr__(self, "_derived", True)
        if self.delivery not in DELIVERIES:
            raise ConfigError(f"delivery must be one of {DELIVERIES}, got {self.delivery!r}")
        if self.hint_scope == "episode" and self.delivery != "per_episode":
            raise ConfigError("hint_scope='episode' scores the whole episode in one pass at its "
                              "end: use delivery='per_episode' (or leave delivery unset)")
        if self.hint_scope == "episode" and self.hint_placement != "before_turn":
            raise ConfigError("the episode hint scope places each hint before its turn: use "
                              "hint_placement='before_turn'")
        for name in ("teacher_temperature", "student_temperature"):
            value = getattr(self, name)
            if value is None and name == "student_temperature":
                continue
            if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
                raise ConfigError(f"{name} must be a number > 0, got {value!r}")
        control = self.no_hint_control
        if isinstance(control, bool) or not isinstance(control, int | float) or \
                not 0.0 <= control <= 1.0:
            raise ConfigError(f"no_hint_control must be a share between 0 and 1, got {control!r}")
        if control and self.hint_scope == "episode":
            raise ConfigError("no_hint_control scores turns one by one: use hint_scope='turn' "
                              "(the episode scope's empty-hint control is a run without a judge)")
        if self.forced_student and self.hint_scope == "episode":
            raise ConfigError("forced_student scores turns one by one: use hint_scope='turn'")
        if self.forced_student and self.teacher_temperature != 1.0:
            raise ConfigError("forced_student records the teacher model's own distribution: "
                              "use teacher_temperature=1.0")
        if isinstance(self.student_tokenizer, str) and self.student_tokenizer != UNCHECKED:
            from opd_gym import specs

            if ":" in self.student_tokenizer and not self.student_tokenizer.startswith("/"):
                specs.parse("tokenizer", self.student_tokenizer)
        if self.judge in (None, "none") and not self.score_without_hint:
            raise ConfigError("judge=None gives no hints and score_without_hint=False scores "
                              "only hinted turns: no turn would ever be scored; set a judge or "
                              "score_without_hint=True")
        self._check_teacher()
        self._check_judge()

    def _check_teacher(self) -> None:
        from opd_gym import specs

        teacher = self.teacher
        if hasattr(teacher, "score") and hasattr(teacher, "tokenizer"):
            if self.teacher_options:
                raise ConfigError(f"teacher_options {sorted(self.teacher_options)} need a "
                                  "teacher spec, not a teacher object (build it with them)")
            return
        if not isinstance(teacher, str | Mapping):
            raise ConfigError(f"teacher must be a spec ({specs.known('teacher')}), a mapping "
                              f"{{'spec': ..., **options}} or a Teacher object, got "
                              f"{type(teacher).__name__}")
        specs.check("teacher", teacher)
        spec = teacher["spec"] if isinstance(teacher, Mapping) else teacher
        options = {**(teacher if isinstance(teacher, Mapping) else {}), **self.teacher_options}
        options.pop("spec", None)
        specs.check_teacher_options(spec, options)
        if self.teacher_temperature != 1.0 and specs.parse("teacher", spec).scheme in (
                "vllm", "vllm-engine"):
            raise ConfigError("teacher_temperature applies to hf: teachers (tiny, smollm2, "
                              "hf:PATH); vLLM returns prompt logprobs at temperature 1 only")

    def _check_judge(self) -> None:
        from opd_gym import specs

        judge = self.judge
        llm = False
        if isinstance(judge, str):
            llm = specs.parse("judge", judge).scheme in ("openai", "vllm")
        elif isinstance(judge, Mapping):
            kind = judge.get("type", "openai")
            if kind not in ("rule", "openai", "vllm"):
                raise ConfigError(f"unknown judge type {kind!r}; use rule, openai or vllm")
            if kind != "rule" and "url" not in judge:
                raise ConfigError(f"a {kind} judge mapping needs a 'url'")
            llm = kind != "rule"
        elif judge is not None and not callable(judge):
            raise ConfigError(f"judge must be a spec ({specs.known('judge')}), a mapping, a "
                              f"callable (turn, next_state) -> hint or None, got "
                              f"{type(judge).__name__}")
        if self.judge_options and not llm:
            raise ConfigError(f"judge_options {sorted(self.judge_options)} apply to an LLM "
                              f"judge (openai:URL or vllm:URL), not to {judge!r}")
        if llm:
            options = {**self.judge_options, **(judge if isinstance(judge, Mapping) else {})}
            check_judge_options(votes=options.get("votes", self.votes),
                                rule=options.get("rule", self.vote_rule),
                                hint_choice=options.get("hint_choice", self.hint_choice),
                                max_tokens=options.get("max_tokens", 256))

    # -- derived settings ----------------------------------------------------------------------
    @property
    def judge_defaults(self) -> dict[str, Any]:
        """Options an LLM judge is built with: votes and vote combination, then judge_options."""
        return {"votes": self.votes, "rule": self.vote_rule, "hint_choice": self.hint_choice,
                **self.judge_options}

    def to_kwargs(self) -> dict[str, Any]:
        """The options as `OPDWrapper` keyword arguments (plain dicts; objects as they are)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.init}
        if self._derived:
            out["delivery"] = None  # still derived from the scope when rebuilt
        out["teacher_options"] = dict(self.teacher_options)
        out["judge_options"] = dict(self.judge_options)
        return out

    def replace(self, **changes: Any) -> OPDConfig:
        """A copy with `changes` applied (validated again); unknown names are refused."""
        return OPDConfig.from_kwargs(self, **changes)

    @classmethod
    def from_kwargs(cls, base: OPDConfig | None = None, **options: Any) -> OPDConfig:
        """A config from keyword options over `base` (default: the defaults)."""
        names = {f.name for f in dataclasses.fields(cls) if f.init}
        unknown = sorted(set(options) - names)
        if unknown:
            raise ConfigError(f"unknown OPD option(s) {unknown}; known: {sorted(names)}")
        if base is None:
            return cls(**options)
        return cls(**{**base.to_kwargs(), **options})


__all__ = ["DEFAULT_TOPK", "DELIVERIES", "UNCHECKED", "OPDConfig"]
