"""Exports of a real (local-sandbox) rollout round-trip to the records they came from."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from opd_gym.agents.policies import make_agent_factory
from opd_gym.exports import examples, export_run
from opd_gym.exports.formats import ATROPOS_PAD_ID, ATROPOS_PAD_LOGPROB
from opd_gym.models import build_tiny_model
from opd_gym.rollout import RolloutConfig, run_rollout
from opd_gym.tasks import load_suite

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    model = build_tiny_model(tmp_path_factory.mktemp("tiny") / "model", seed=0)
    out = tmp_path_factory.mktemp("run")
    config = RolloutConfig(
        out_dir=str(out),
        episodes=2,
        task_ids=["fizzbuzz", "flatten"],
        sandbox="local",
        parallel=1,
        opd_options={"topk": 4},
    )
    summary = run_rollout(
        config,
        make_agent_factory("demo", load_suite()),
        teacher=f"hf:{model}",
        judge="rule",
        progress=False,
    )
    assert summary.episodes == 2 and not summary.failures
    return out, model


def test_atropos_groups_cover_full_sequences(run_dir):
    out, model = run_dir
    from transformers import AutoTokenizer

    path = export_run(out, "atropos", tokenizer=AutoTokenizer.from_pretrained(model))
    groups = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(groups) == 2
    for group, episode in zip(groups, examples(out), strict=True):
        assert len(group["tokens"]) == len(episode) == 6
        for tokens, masks, ids, lps, ex in zip(
            group["tokens"],
            group["masks"],
            group["distill_token_ids"],
            group["distill_logprobs"],
            episode,
            strict=True,
        ):
            record = ex.record
            start = len(tokens) - record.num_tokens
            assert tokens[start:] == record.token_ids.tolist()
            assert len(ids) == len(lps) == len(tokens) and len(ids[0]) == 4
            assert all(row == [ATROPOS_PAD_ID] * 4 for row in ids[:start])  # prompt padding
            assert all(row == [ATROPOS_PAD_LOGPROB] * 4 for row in lps[:start])
            np.testing.assert_array_equal(np.array(ids[start:]), record.teacher_topk_ids)
            np.testing.assert_allclose(
                np.array(lps[start:]), record.teacher_topk_logprobs, rtol=1e-6
            )
            assert masks[:start] == [-100] * start and masks[start:] == tokens[start:]


def test_atropos_without_prompt_ids_or_tokenizer_says_what_to_do(run_dir):
    out, _ = run_dir
    with pytest.raises(ValueError, match="--tokenizer"):
        export_run(out, "atropos", out / "failed.jsonl")
    assert not (out / "failed.jsonl").exists()  # atomic: no partial or empty file
    assert not list(out.glob(".failed*"))


@pytest.mark.parametrize("fmt", ["tinker", "slime", "verl"])
def test_formats_needing_student_logprobs_refuse_a_run_without_them(run_dir, fmt, capsys):
    """The demo policy records no student logprobs: the export exits 2 naming the field and
    the policies that record it, and writes nothing (never a 0.0 filler, never 0 lines)."""
    from opd_gym.cli import main

    out, model = run_dir
    target = out / f"refused-{fmt}.jsonl"
    rc = main(["export", str(out), "--to", fmt, "--out", str(target),
               "--tokenizer", f"hf:{model}"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1
    assert "student_logprobs" in err and "12 of 12 turns" in err and "--policy tiny" in err
    assert not target.exists() and not list(out.glob(".refused-*"))


def test_trl_rows_and_advantages(run_dir):
    out, _ = run_dir
    rows = [json.loads(x) for x in export_run(out, "trl").read_text().splitlines()]
    assert len(rows) == 12
    first = rows[0]
    assert first["prompt"][0]["role"] == "system" and first["prompt"][-1]["role"] == "user"
    assert first["completion"][0]["role"] == "assistant"
    assert "<tool_call>" in first["completion"][0]["content"]
    assert sum(r["hint"] is not None for r in rows) >= 2  # the planted mistakes got hints
    adv = [json.loads(x) for x in export_run(out, "advantage").read_text().splitlines()]
    assert len(adv) == 12
    # Scripted turns carry no student logprobs: advantages are null, never a fake 0.0.
    assert all(a is None for row in adv for a in row["advantage"])
    assert all(len(row["advantage"]) == len(row["token_ids"]) for row in adv)


def test_parquet_round_trip(run_dir):
    import pyarrow.parquet as pq  # the datasets extra brings pyarrow (installed in CI)

    out, _ = run_dir
    table = pq.read_table(export_run(out, "parquet")).to_pylist()
    records = [ex.record for episode in examples(out) for ex in episode]
    assert len(table) == len(records) == 12
    for row, record in zip(table, records, strict=True):
        assert row["token_ids"] == record.token_ids.tolist()
        assert row["hint"] == record.hint
        np.testing.assert_allclose(row["teacher_token_logprobs"], record.teacher_token_logprobs)
        assert all(math.isfinite(x) for x in row["teacher_token_logprobs"])


def test_parquet_carries_every_record_field_through_datasets(run_dir):
    """Every OPDRecord field is a column (tail mass, copied mask, footing, ...), and the rows
    read back with the consumer's loader (`datasets`) equal the records, NaN for NaN."""
    import dataclasses

    import datasets

    out, _ = run_dir
    path = export_run(out, "parquet", out / "all.parquet")
    rows = datasets.Dataset.from_parquet(str(path)).to_list()
    records = [ex.record for episode in examples(out) for ex in episode]
    names = {f.name for f in dataclasses.fields(records[0])}
    assert names <= set(rows[0]) and {"prompt_ids", "episode", "reward"} <= set(rows[0])
    for row, record in zip(rows, records, strict=True):
        for name in ("teacher_tail_logprobs", "teacher_topk_logprobs", "teacher_token_logprobs"):
            np.testing.assert_array_equal(np.asarray(row[name], np.float32),
                                          getattr(record, name))
        assert row["teacher_topk_ids"] == record.teacher_topk_ids.tolist()
        assert row["copied"] == (None if record.copied is None else record.copied.tolist())
        assert row["mask"] == record.mask.tolist() and row["context"] == record.context
        assert row["teacher_temperature"] == 1.0 and row["student_logprobs"] is None
        assert row["reconstructed"] is False and row["retokenized"] is True


def test_unknown_format_is_refused(run_dir):
    with pytest.raises(ValueError, match="unknown export format"):
        export_run(run_dir[0], "csv")


def _with_reconstructed(out, target):
    """A copy of the run whose first episode's records were scored on a rebuilt context."""
    import shutil

    shutil.copytree(out, target)
    path = target / "trajectories.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    for record in rows[0]["opd"]:
        record["reconstructed"] = True
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return sum(len(row["opd"]) for row in rows), len(rows[0]["opd"])


def test_reconstructed_turns_are_refused_dropped_or_marked(run_dir, tmp_path):
    """Nothing inexact reaches a trainer silently (issue 31, point 4)."""
    from transformers import AutoTokenizer

    out, model = run_dir
    total, rebuilt = _with_reconstructed(out, tmp_path / "run")
    run = tmp_path / "run"
    tokenizer = AutoTokenizer.from_pretrained(model)
    for fmt in ("trl", "advantage", "atropos", "slime", "verl", "parquet"):
        with pytest.raises(ValueError, match=f"{rebuilt} of {total} turns .* rebuilt"):
            export_run(run, fmt, run / f"refused.{fmt}", tokenizer=tokenizer)
        assert not (run / f"refused.{fmt}").exists()
    notes: list[str] = []
    kept = export_run(run, "advantage", run / "kept.jsonl", reconstructed="drop",
                      note=notes.append)
    rows = [json.loads(line) for line in kept.read_text().splitlines()]
    assert len(rows) == total - rebuilt and notes == [
        f"left out {rebuilt} of {total} turns (reconstructed context)"]
    assert all("reconstructed" not in row for row in rows)  # exact rows keep their fields
    marked = export_run(run, "trl", run / "marked.jsonl", reconstructed="allow")
    rows = [json.loads(line) for line in marked.read_text().splitlines()]
    assert len(rows) == total
    assert [row["reconstructed"] for row in rows] == [True] * rebuilt + [False] * (
        total - rebuilt)
    groups = export_run(run, "atropos", run / "atropos.jsonl", tokenizer=tokenizer,
                        reconstructed="allow")
    first = json.loads(groups.read_text().splitlines()[0])
    assert first["reconstructed"] == [True] * rebuilt
    with pytest.raises(ValueError, match="reconstructed="):
        export_run(run, "trl", reconstructed="maybe")


def test_a_turn_that_does_not_extend_the_previous_is_marked_in_the_exports(run_dir, tmp_path):
    """A harness that rewrites its history: the record's `extends_previous` travels with the
    rows of the JSONL formats (per turn, or per episode row as a list) and Parquet's column;
    an export where every turn extends the one before keeps the format's own fields."""
    import shutil

    import pyarrow.parquet as pq
    from transformers import AutoTokenizer

    out, model = run_dir
    plain = [json.loads(line) for line in export_run(out, "trl", tmp_path / "plain.jsonl")
             .read_text().splitlines()]
    assert all("extends_previous" not in row for row in plain)
    run = tmp_path / "run"
    shutil.copytree(out, run)
    path = run / "trajectories.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    flags = [None] + [True] * (len(rows[0]["opd"]) - 1)
    flags[-1] = False if len(flags) > 1 else flags[-1]
    assert False in flags, "the fixture run's first episode needs two turns"
    for record, flag in zip(rows[0]["opd"], flags, strict=True):
        record["extends_previous"] = flag
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    trl = [json.loads(line) for line in export_run(run, "trl", tmp_path / "t.jsonl")
           .read_text().splitlines()]
    assert [row["extends_previous"] for row in trl[:len(flags)]] == flags
    assert all(row["extends_previous"] is None for row in trl[len(flags):])  # never said
    tokenizer = AutoTokenizer.from_pretrained(model)
    first = json.loads(export_run(run, "atropos", tmp_path / "a.jsonl", tokenizer=tokenizer)
                       .read_text().splitlines()[0])
    assert first["extends_previous"] == flags
    table = pq.read_table(export_run(run, "parquet", tmp_path / "p.parquet")).to_pylist()
    assert [r["extends_previous"] for r in table[:len(flags)]] == flags


def test_an_episode_graded_with_an_infra_error_is_left_out_and_said(run_dir, tmp_path):
    """An unverifiable task's grade (or any infra error) is no verdict on the answer: the
    exports leave its episode out and the note says how many (a recount of the rows)."""
    import shutil

    out, _ = run_dir
    target = tmp_path / "run"
    shutil.copytree(out, target)
    path = target / "trajectories.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    rows[0]["grade"].update(infra_error=True, unverifiable=True,
                            reason="the task cannot be verified: ...")
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    notes: list[str] = []
    kept = [json.loads(x) for x in export_run(target, "trl", note=notes.append)
            .read_text().splitlines()]
    whole = [json.loads(x) for x in export_run(out, "trl").read_text().splitlines()]
    assert len(kept) == len(whole) - len(rows[0]["opd"]) > 0
    assert any("1 episode(s) graded with an infra error" in n for n in notes), notes


def test_atif_refuses_a_run_without_the_policys_token_ids(run_dir, capsys):
    """The demo policy is scripted: its turns carry no sampled ids, and their records were
    scored on the teacher's tokenization of the text. `--to atif` exits 2 naming
    completion_token_ids and the policies that record them, and writes nothing (no ids
    are ever filled in from a re-tokenization)."""
    from opd_gym.cli import main

    out, _ = run_dir
    target = out / "refused-atif"
    assert main(["export", str(out), "--to", "atif", "--out", str(target)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "completion_token_ids" in err and "12 of 12 turns" in err
    assert "--policy tiny" in err and "demo" in err
    assert not target.exists() and not list(out.glob(".refused-atif*"))


def test_atif_steps_carry_the_tool_calls_and_their_output(run_dir, tmp_path):
    """`to_atif` (the mapping, which refuses nothing) on the demo run's rows, which call
    every tool: each call is an ATIF tool call answered by its own observation result
    (source_call_id), valid under Harbor's model; no token fields where the run has none."""
    from harbor_check import harbor_validate

    from opd_gym.exports.atif import to_atif
    from opd_gym.runs import RunDirectory

    out, model = run_dir
    paths = []
    for row in RunDirectory(out).episodes():
        trajectory = to_atif(row)
        paths.append(tmp_path / f"{row.episode}.json")
        paths[-1].write_text(json.dumps(trajectory, allow_nan=False))
        agent = [s for s in trajectory["steps"] if s["source"] == "agent"]
        assert len(agent) == len(row.turns) == 6
        for step, turn in zip(agent, row.turns, strict=True):
            calls = [(c["tool_call_id"], c["function_name"], c["arguments"])
                     for c in step["tool_calls"]]
            assert calls == [(c["id"], c["name"], c["arguments"]) for c in turn["tool_calls"]]
            follow = row.messages[turn["context_len"] + 1:turn["end_len"]]
            assert [(r.get("source_call_id"), r["content"])
                    for r in step["observation"]["results"]] == [
                (m.get("tool_call_id"), m["content"]) for m in follow]
            assert set(step["metrics"]) == {"extra"}  # the step's reward, no token fields
            assert step["extra"]["opd"]["retokenized"] is True  # the record says so
        assert {c["function_name"] for s in agent for c in s["tool_calls"]} >= {
            "terminal", "write_file", "edit_file", "submit"}
    assert set(harbor_validate(paths).values()) == {"ok"}
    # read back (tests/exports/test_atif_in.py): the transcript rebuilt from the steps, tool calls
    # and their messages included, scores each turn as the run did (retokenized, as the run's
    # own records are: the scripted policy gives no ids) and the judge reads the same tool
    # results from extra.turn: every record equal to the run's but its timing
    from opd_gym.exports.atif_in import score_trajectories

    scored, count, _ = score_trajectories(paths, tmp_path / "scored.jsonl",
                                          teacher=f"hf:{model}", topk=4, reconstruct=True)
    stored = [r for row in RunDirectory(out).episodes() for r in row.opd]
    got = [json.loads(line) for line in scored.read_text().splitlines()]
    assert count == len(stored) == 12 and any(r["hint"] for r in stored)
    assert [{k: v for k, v in r.items() if k != "timing"} for r in stored] == [
        {k: r[k] for k in stored[0] if k != "timing"} for r in got]
