"""Contract tests: each trainer export has the fields, dtypes, shapes, shift and neutral
values of that trainer's own source (TRL async distillation, slime/OpenClaw, verl, tinker,
TRL SDFT/SDPO), and `opd-gym export --to` writes every format from a real rollout (Harbor's
ATIF too, validated by Harbor's own model: tests/harbor_check.py)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from opd_gym.errors import ConfigError
from opd_gym.exports import examples, export_run
from opd_gym.exports.run import FORMATS
from opd_gym.exports.trainers import (
    TRAINER_FORMATS,
    VERL_PAD_INDEX,
    VERL_PAD_LOGPROB,
    to_slime_sample,
    to_tinker_datum,
    to_trl_async_distillation,
    to_trl_privileged_rows,
    to_verl_batch,
)
from opd_gym.records.opd_record import OPDRecord

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

PROMPT = [5, 6, 7]


def _record(student: bool = True) -> OPDRecord:
    """Three sampled tokens, K=2: token 0 inside the teacher's top-K, token 1 outside it,
    token 2 unscored (mask False)."""
    nan = np.nan
    return OPDRecord(
        token_ids=np.array([10, 11, 12]),
        teacher_token_logprobs=np.array([-0.5, -4.0, nan], np.float32),
        teacher_topk_ids=np.array([[20, 10], [21, 22], [-1, -1]]),
        teacher_topk_logprobs=np.array([[-1.2, -0.5], [-0.3, -2.0], [nan, nan]], np.float32),
        mask=np.array([True, True, False]),
        student_logprobs=np.array([-1.0, -2.0, -3.0], np.float32) if student else None,
        hint="use a loop",
    )


def test_trl_async_distillation_rows_follow_the_rollout_sample_contract() -> None:
    """[L, K+1] rank-sorted rows scoring input_ids[i]; the sampled token in the extra column
    when outside the top-K; prompt and unscored rows all -1 / -inf; no NaN."""
    out = to_trl_async_distillation(_record(), PROMPT)
    ids, lps = out["teacher_topk_ids"], out["teacher_topk_logprobs"]
    assert out["input_ids"].dtype == np.int64 and out["input_ids"].tolist() == PROMPT + [10, 11, 12]
    assert out["completion_mask"].dtype == np.int64
    assert out["completion_mask"].tolist() == [0, 0, 0, 1, 1, 1]
    assert ids.shape == lps.shape == (6, 3) and ids.dtype == np.int64 and lps.dtype == np.float32
    assert not np.isnan(lps).any()
    assert (ids[:3] == -1).all() and np.isneginf(lps[:3]).all()  # prompt rows
    assert ids[3].tolist() == [10, 20, -1]  # sampled token already in top-K: rank order
    np.testing.assert_allclose(lps[3, :2], [-0.5, -1.2])
    assert ids[4].tolist() == [21, 22, 11]  # sampled token outside: appended as column K+1
    np.testing.assert_allclose(lps[4], [-0.3, -2.0, -4.0])
    assert (ids[5] == -1).all() and np.isneginf(lps[5]).all()  # unscored: no signal


def test_trl_async_rows_pass_through_trls_own_collator() -> None:
    """TRL's DataCollatorForRollout packs our rows as it packs its worker's samples."""
    from trl.experimental.async_distillation.async_distillation_trainer import (
        DataCollatorForRollout,
    )

    a = to_trl_async_distillation(_record(), PROMPT)
    b = to_trl_async_distillation(_record(), [1, 2])
    group = [{**a, "teacher_id": "t", "prompt_id": 0, "metrics": {}},
             {**b, "teacher_id": "t", "prompt_id": 1, "metrics": {}}]
    batch = DataCollatorForRollout(pad_token_id=0)([[group]])
    assert batch["input_ids"].shape == (1, 11)
    assert batch["teacher_topk_ids"].shape == (1, 11, 3)
    assert int(batch["global_n_tokens"][0]) == 6
    assert batch["completion_mask"][0].tolist() == [0, 0, 0, 1, 1, 1, 0, 0, 1, 1, 1]


def test_slime_sample_uses_the_students_logprob_where_there_is_no_signal() -> None:
    """teacher_log_probs per response token; OpenClaw's neutral (student's own) when unscored."""
    s = to_slime_sample(_record(), PROMPT, reward=1.0)
    assert s["tokens"] == PROMPT + [10, 11, 12] and s["response_length"] == 3
    assert s["teacher_log_probs"].dtype == np.float32
    np.testing.assert_allclose(s["teacher_log_probs"], [-0.5, -4.0, -3.0])
    np.testing.assert_allclose(s["rollout_log_probs"], [-1.0, -2.0, -3.0])
    assert s["loss_mask"].tolist() == [1, 1, 1]
    advantage = s["teacher_log_probs"] - s["rollout_log_probs"]
    assert advantage[2] == 0.0  # no hint, no distillation push
    masked = to_slime_sample(_record(), PROMPT, neutral="mask")
    assert masked["loss_mask"].tolist() == [1, 1, 0]
    assert not np.isnan(masked["teacher_log_probs"]).any()
    with pytest.raises(ValueError, match="no student_logprobs .*--policy tiny"):
        to_slime_sample(_record(student=False), PROMPT)  # never a 0.0 rollout logprob
    with pytest.raises(ValueError, match="neutral"):
        to_slime_sample(_record(), PROMPT, neutral="zero")


def test_verl_batch_is_response_aligned_with_left_padded_prompts() -> None:
    """responses/response_mask/ref_* are [B, R(,K)], input_ids = prompts ++ responses."""
    short = OPDRecord.unscored([30], "no hint: nothing to score", topk=2,
                               student_logprobs=[-0.7])
    batch = to_verl_batch([_record(), short], [PROMPT, [9]], pad_token_id=0)
    assert batch["prompts"].tolist() == [PROMPT, [0, 0, 9]]
    assert batch["responses"].tolist() == [[10, 11, 12], [30, 0, 0]]
    assert batch["input_ids"].shape == batch["attention_mask"].shape == (2, 6)
    assert batch["attention_mask"].tolist() == [[1] * 6, [0, 0, 1, 1, 0, 0]]
    assert batch["position_ids"][1, 2:4].tolist() == [0, 1]
    assert batch["response_mask"].tolist() == [[1, 1, 0], [0, 0, 0]]
    np.testing.assert_allclose(batch["ref_log_prob"][0], [-0.5, -4.0, -3.0])
    assert batch["ref_log_prob"][1, 0] == pytest.approx(-0.7)
    assert batch["ref_topk_indices"].shape == (2, 3, 2)
    assert batch["ref_topk_indices"].dtype == np.int64
    assert batch["ref_topk_log_probs"].dtype == np.float32
    assert batch["ref_topk_indices"][0, 1].tolist() == [21, 22]
    assert (batch["ref_topk_indices"][0, 2] == VERL_PAD_INDEX).all()
    assert (batch["ref_topk_log_probs"][1] == VERL_PAD_LOGPROB).all()
    for value in batch.values():
        assert not (value.dtype.kind == "f" and not np.isfinite(value).all())


def test_tinker_datum_is_shifted_by_one_with_zero_prompt_advantages() -> None:
    """model_input = tokens[:-1], target_tokens = tokens[1:]; sampler logprobs and advantages
    sit on the targets that are sampled tokens, 0.0 on prompt targets and unscored ones."""
    d = to_tinker_datum(_record(), PROMPT)
    tokens = PROMPT + [10, 11, 12]
    inputs = d["loss_fn_inputs"]
    assert d["model_input"] == tokens[:-1] and inputs["target_tokens"] == tokens[1:]
    assert len(inputs["logprobs"]) == len(inputs["advantages"]) == len(tokens) - 1
    assert inputs["logprobs"] == pytest.approx([0.0, 0.0, -1.0, -2.0, -3.0])
    assert inputs["advantages"] == pytest.approx([0.0, 0.0, 0.5, -2.0, 0.0])
    with pytest.raises(ValueError, match="student logprobs"):
        to_tinker_datum(_record(student=False), PROMPT)


def test_trl_privileged_rows_carry_the_hint_as_privileged_context() -> None:
    """SDFT/SDPO read `privileged_context`; turns without a hint are left out."""
    unhinted = OPDRecord.unscored([1], "no hint: nothing to score", topk=2)
    prompt = [{"role": "user", "content": "write fizzbuzz"}]
    rows = to_trl_privileged_rows([_record(), unhinted], [prompt, prompt], ["a", "b"])
    assert len(rows) == 1
    assert rows[0]["privileged_context"] == "use a loop"
    assert rows[0]["completion"] == [{"role": "assistant", "content": "a"}]
    assert "hint" not in rows[0]
    from trl.experimental.sdft import SDFTConfig

    template = SDFTConfig.__dataclass_fields__["teacher_prompt_template"].default
    assert template.format(prompt="p", privileged_context=rows[0]["privileged_context"])


def test_every_format_exports_a_real_run(student_run) -> None:
    """`opd-gym export --to` lists every trainer format and each writes parseable lines whose
    per-token arrays match the run's records; reports bytes per turn (x24 for the note)."""
    from transformers import AutoTokenizer

    out, student = student_run
    tokenizer = AutoTokenizer.from_pretrained(student)
    assert set(TRAINER_FORMATS) <= set(FORMATS)
    (episode,) = list(examples(out))
    turns = len(episode)
    sizes = {}
    for fmt in FORMATS:
        if fmt == "swebench-predictions":  # a repository run's patches, no token data: a run
            # of built-in tasks has none to give, so it refuses (tests/exports/test_predictions)
            with pytest.raises(ConfigError):
                export_run(out, fmt, out / f"x-{fmt}", tokenizer=tokenizer)
            continue
        path = export_run(out, fmt, out / f"x-{fmt}", tokenizer=tokenizer)
        if fmt == "atif":  # a folder, one Harbor trajectory per episode (tests below)
            (trajectory,) = path.glob("*/agent/trajectory.json")
            sizes[fmt] = trajectory.stat().st_size
            continue
        sizes[fmt] = path.stat().st_size
        if fmt == "parquet":
            continue
        lines = [json.loads(line) for line in path.read_text().splitlines()]
        assert lines, fmt
        if fmt == "trl-async-distillation":
            assert len(lines) == turns
            for line, ex in zip(lines, episode, strict=True):
                n = len(line["input_ids"])
                assert line["input_ids"][n - ex.record.num_tokens:] == ex.record.token_ids.tolist()
                assert all(len(row) == ex.record.topk + 1 for row in line["teacher_topk_ids"])
                assert "NaN" not in json.dumps(line["teacher_topk_logprobs"])
        elif fmt == "tinker":
            for line in lines:
                adv = line["loss_fn_inputs"]["advantages"]
                assert all(math.isfinite(a) for a in adv) and any(a != 0 for a in adv)
        elif fmt == "slime":
            for line, ex in zip(lines, episode, strict=True):
                assert len(line["teacher_log_probs"]) == line["response_length"]
                assert line["response_length"] == ex.record.num_tokens
        elif fmt == "verl":
            assert np.asarray(lines[0]["responses"]).shape[0] == turns
    per24 = {fmt: size / turns * 24 for fmt, size in sizes.items()}
    print("export bytes per 24 turns:", {k: int(v) for k, v in per24.items()})
    assert sizes["atropos-compact"] < sizes["atropos"] / 2


def _agent_steps(trajectory: dict) -> list[dict]:
    return [s for s in trajectory["steps"] if s["source"] == "agent"]


def test_atif_trajectories_validate_and_hold_the_runs_exact_tokens(student_run, tmp_path):
    """`--to atif` writes Harbor's trial layout, each trajectory valid under Harbor's own
    ATIF-v1.8 model (strict: a control with `metrics` on a user step is refused); recounted
    from trajectories.jsonl itself, every agent step holds the turn's exact prompt ids,
    sampled ids and logprobs, its stored OPD record under extra.opd (read back as an
    OPDRecord), and the final metrics the reward breakdown."""
    from harbor_check import harbor_validate

    from opd_gym.cli import main
    from opd_gym.exports.atif import OPD_KEY

    run, _ = student_run
    out = tmp_path / "atif"
    assert main(["export", str(run), "--to", "atif", "--out", str(out)]) == 0
    index = [json.loads(line) for line in (out / "index.jsonl").read_text().splitlines()]
    rows = [json.loads(line) for line in (run / "trajectories.jsonl").read_text().splitlines()]
    paths = [out / line["path"] for line in index]
    assert len(paths) == len(rows) == 1
    assert paths[0].relative_to(out).parts[1:] == ("agent", "trajectory.json")
    control = json.loads(paths[0].read_text())
    control["steps"][0]["metrics"] = {"prompt_tokens": 1}
    (tmp_path / "control.json").write_text(json.dumps(control))
    verdicts = harbor_validate([*paths, tmp_path / "control.json"])
    assert verdicts[str(paths[0])] == "ok"
    assert "only applicable when source is 'agent'" in verdicts[str(tmp_path / "control.json")]

    (row,) = rows
    trajectory = json.loads(paths[0].read_text())
    steps = trajectory["steps"]
    assert [s["step_id"] for s in steps] == list(range(1, len(steps) + 1))
    assert [s["source"] for s in steps[:2]] == ["system", "user"]
    agent = _agent_steps(trajectory)
    assert len(agent) == len(row["turns"]) == len(row["opd"]) == 3
    stored = {r["turn_index"]: r for r in row["opd"]}
    for step, turn in zip(agent, row["turns"], strict=True):
        metrics = step["metrics"]
        assert metrics["prompt_token_ids"] == turn["prompt_ids"]
        assert metrics["completion_token_ids"] == turn["token_ids"]
        assert metrics["logprobs"] == turn["logprobs"]  # the same floats, not close ones
        assert metrics["completion_tokens"] == len(turn["token_ids"])
        assert metrics["extra"]["reward"] == row["rewards"][turn["index"]]
        opd = step["extra"][OPD_KEY]
        assert opd == stored[turn["index"]]  # the whole record, as the run stored it
        assert opd["retokenized"] is False and opd["reconstructed"] is False
        record = OPDRecord.from_dict(opd)
        assert record.token_ids.tolist() == turn["token_ids"] and record.topk == 8
        follow = row["messages"][turn["context_len"] + 1:turn["end_len"]]
        results = step["observation"]["results"]  # the random model calls no tool: the
        assert [r["content"] for r in results] == [m["content"] for m in follow]  # feedback
        assert all(r["extra"] == {"role": "user"} and "source_call_id" not in r
                   for r in results)
        assert "tool_calls" not in step
    assert any(r["hint"] for r in row["opd"])  # the judge's hints travel with the records
    final = trajectory["final_metrics"]
    assert final["extra"]["reward_breakdown"] == row["reward_breakdown"]
    assert final["extra"]["reward"] == row["return"] and final["total_steps"] == len(steps)
    assert final["total_completion_tokens"] == sum(len(t["token_ids"]) for t in row["turns"])
    assert final["total_prompt_tokens"] == sum(len(t["prompt_ids"]) for t in row["turns"])
    assert trajectory["agent"]["name"] == "opd_gym" and trajectory["agent"]["version"]
    assert trajectory["agent"]["tool_definitions"] == row["tools"]


def test_atif_reconstructed_turns_are_refused_dropped_or_marked(student_run, tmp_path):
    """As every export: refused by default; on request the turn's record is left out (its
    step stays: a trajectory has no holes) or kept marked; a folder that is no ATIF export
    is never replaced, an earlier export is."""
    import shutil

    from harbor_check import harbor_validate

    from opd_gym.exports.atif import OPD_KEY, export_atif

    run = tmp_path / "run"
    shutil.copytree(student_run[0], run)
    rows = [json.loads(line) for line in (run / "trajectories.jsonl").read_text().splitlines()]
    rows[0]["opd"][1]["reconstructed"] = True
    rows[0]["turns"][1]["prompt_ids"] = None  # what a policy without prompt ids leaves
    (run / "trajectories.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(ConfigError, match="1 of 3 turns .* rebuilt"):
        export_run(run, "atif", tmp_path / "refused")
    assert not (tmp_path / "refused").exists() and not list(tmp_path.glob(".refused*"))
    notes: list[str] = []
    dropped = export_atif(run, tmp_path / "dropped", reconstructed="drop", note=notes.append)
    agent = _agent_steps(json.loads(next(dropped.glob("*/agent/trajectory.json")).read_text()))
    assert [OPD_KEY in s["extra"] for s in agent] == [True, False, True]
    assert "prompt_token_ids" not in agent[1]["metrics"]  # none recorded: none written
    assert "completion_token_ids" in agent[1]["metrics"]  # the policy's own ids stay
    assert len(notes) == 1 and "1 of 3 turns" in notes[0]
    marked = export_atif(run, tmp_path / "marked", reconstructed="allow")
    agent = _agent_steps(json.loads(next(marked.glob("*/agent/trajectory.json")).read_text()))
    assert [s["extra"][OPD_KEY]["reconstructed"] for s in agent] == [False, True, False]
    paths = [*dropped.glob("*/agent/trajectory.json"), *marked.glob("*/agent/trajectory.json")]
    assert set(harbor_validate(paths).values()) == {"ok"}
    other = tmp_path / "not-an-export"
    other.mkdir()
    (other / "keep.txt").write_text("mine")
    with pytest.raises(ConfigError, match="not an earlier ATIF export"):
        export_atif(run, other, reconstructed="allow")
    assert (other / "keep.txt").read_text() == "mine"
    assert export_atif(run, marked, reconstructed="allow") == marked


def test_atif_leaves_infra_error_episodes_out(student_run, tmp_path):
    """An infra error's grade is no verdict: its episode is left out and said; a run with
    nothing else is refused, nothing written."""
    import shutil

    from opd_gym.exports.atif import export_atif

    run = tmp_path / "run"
    shutil.copytree(student_run[0], run)
    rows = [json.loads(line) for line in (run / "trajectories.jsonl").read_text().splitlines()]
    rows[0]["grade"].update(infra_error=True, reason="the sandbox was lost")
    (run / "trajectories.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    notes: list[str] = []
    with pytest.raises(ConfigError, match="every episode .* infra error"):
        export_atif(run, tmp_path / "out", note=notes.append)
    assert notes and "1 episode(s) graded with an infra error" in notes[0]
    assert not (tmp_path / "out").exists()
