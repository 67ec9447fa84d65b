"""Episode on its own (no Gymnasium env): turn loop, end rules, frozen turns, settings."""

from __future__ import annotations

import dataclasses

import pytest

from opd_gym.episode import FORMAT_ERRORS, MAX_TURNS, SUBMITTED, Episode, EpisodeSettings
from opd_gym.errors import ConfigError, DatasetError
from opd_gym.grading import Grader
from opd_gym.tools.parsing import format_tool_call

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # local backend notice

WRITE = format_tool_call("write_file", {"path": "calc.py",
                                        "content": "def add(a, b):\n    return a + b\n"})


def test_an_episode_plays_grades_and_gives_its_sandbox_back(local_pool, toy_task):
    episode = Episode(toy_task, local_pool, EpisodeSettings(max_turns=5))
    assert episode.prompt.endswith("Files in the workspace: calc.py")
    assert episode.sandbox is not None and not episode.done and episode.reward == 0.0
    first = episode.play(WRITE)
    assert not first.end_reason and first.tool_results[0].ok and episode.reward == 0.0
    last = episode.play(format_tool_call("submit"))
    assert last.end_reason == SUBMITTED and episode.done
    assert episode.grade is not None and episode.grade.passed == episode.grade.total == 3
    assert last.grade is episode.grade and first.grade is None
    assert episode.reward == pytest.approx(episode.reward_breakdown.total) and episode.reward > 0.7
    assert episode.sandbox is None  # released at the end, before anyone asks
    with pytest.raises(dataclasses.FrozenInstanceError):
        last.end_reason = "tampered"  # type: ignore[misc]
    with pytest.raises(RuntimeError, match="episode is over"):
        episode.play(WRITE)
    info = episode.info(last)
    assert info["turn_snapshot"] is last and info["task_prompt"] == toy_task.prompt
    assert info["end_reason"] == SUBMITTED and info["grade"]["passed"] == 3


def test_an_episode_of_a_calibrated_task_draws_its_grade_while_the_agent_works(local_pool,
                                                                              toy_task):
    """The first grade of a task calibrates it; from then on an episode's start draws its
    grade's runs (`Grader.prepare`), and its submit's grade takes that draw."""
    grader = Grader(local_pool)
    played = []
    for _ in range(2):
        episode = Episode(toy_task, local_pool, EpisodeSettings(max_turns=5), grader)
        drawn_now = grader.prepare(toy_task)  # None: not calibrated yet, or drawn already
        assert drawn_now is None
        episode.play(WRITE)
        assert episode.play(format_tool_call("submit")).end_reason == SUBMITTED
        played.append(episode.grade)
    assert [g.passed for g in played] == [3, 3] and played[1].score == 1.0
    # the second grade took its episode's draw: the task has none left, one is drawn again
    assert grader.prepare(toy_task) is not None


@pytest.mark.parametrize("script,settings,reason", [
    (["no call", "still none"], {"max_format_errors": 2}, FORMAT_ERRORS),
    ([WRITE, WRITE], {"max_turns": 2}, MAX_TURNS),
])
def test_end_rules(local_pool, toy_task, script, settings, reason):
    episode = Episode(toy_task, local_pool, EpisodeSettings(**settings))
    turns = [episode.play(text) for text in script]
    assert [t.end_reason for t in turns] == ["", reason]
    assert episode.grade is not None  # truncated episodes are graded too
    assert "[Episode over" in turns[-1].observation


@pytest.mark.parametrize("options,message", [
    ({"max_turns": 0}, "max_turns"),
    ({"step_time_budget": -1}, "step_time_budget"),
    ({"tool_timeout": 0}, "tool_timeout"),
    ({"tool_names": ("terminal",)}, "submit"),
    ({"reward_weights": {"speed": 1.0}}, "unknown reward weight"),
    ({"tool_format": "yaml"}, "unknown tool_format"),
])
def test_settings_refuse_bad_options_once(options, message):
    with pytest.raises(ConfigError, match=message):
        EpisodeSettings(**options)


def test_settings_derive_the_default_prompt_for_their_format():
    hermes, qwen = EpisodeSettings(), EpisodeSettings(tool_format="qwen3_coder")
    assert "<tool_call>" in hermes.system_prompt and "<function=" in qwen.system_prompt
    assert EpisodeSettings(system_prompt="Be brief.").system_prompt == "Be brief."
    assert [t["function"]["name"] for t in hermes.tools][-1] == "submit"


def test_paths_the_snapshot_cannot_carry_are_named_in_the_grade(local_pool, toy_task):
    """Nothing left out silently: a FIFO and a symlink beside the solution are named, with
    their reasons, in info["grade"] and in the agent's last message; the grade stands."""
    episode = Episode(toy_task, local_pool, EpisodeSettings(max_turns=5))
    episode.play(WRITE)
    episode.play(format_tool_call("terminal", {"command": "mkfifo pipe && ln -s calc.py link"}))
    last = episode.play(format_tool_call("submit"))
    grade = episode.info(last)["grade"]
    assert grade["score"] == 1.0
    assert grade["not_carried_count"] == 2
    assert sorted(grade["not_carried"]) == ["link: symlink", "pipe: not a regular file"]
    assert "2 workspace path(s) were not carried to grading" in last.observation


def test_a_clean_workspace_adds_no_not_carried_notes(local_pool, toy_task):
    episode = Episode(toy_task, local_pool, EpisodeSettings(max_turns=5))
    episode.play(WRITE)
    last = episode.play(format_tool_call("submit"))
    grade = episode.info(last)["grade"]
    assert grade["score"] == 1.0 and "not_carried" not in grade
    assert "not carried" not in last.observation


def test_the_untouched_starter_earns_nothing(local_pool):
    """Nothing for nothing: fix_lru_cache's starter passes 4 of its 6 tests (they gate), yet
    looking around and submitting it unchanged scores correctness 0 and reward 0."""
    from opd_gym.tasks import load_suite

    task = next(t for t in load_suite("coding") if t.id == "fix_lru_cache")
    episode = Episode(task, local_pool, EpisodeSettings(max_turns=5))
    episode.play(format_tool_call("terminal", {"command": "ls"}))
    episode.play(format_tool_call("submit"))
    assert episode.grade is not None and episode.grade.passed >= 4
    assert episode.reward_breakdown.to_dict() == {"correctness": 0.0, "efficiency": 0.0,
                                                  "tool_use": 0.0, "total": 0.0}
    assert episode.reward == 0.0


def test_a_tasks_binary_assets_are_in_the_workspace_and_graded_with(local_pool, make_task):
    """Assets (bytes no Task text can hold) are in the workspace at reset, beside the
    starter files, and in the grade: a test reading one passes on the reference."""
    blob = bytes(range(256))
    tests = {"test_blob.py": "import pathlib\n\nfrom calc import add\n\n\n"
                             "def test_blob():\n    data = pathlib.Path('blob.bin').read_bytes()\n"
                             "    assert add(len(data), 1) == 257\n"}
    task = make_task("blob", tests=tests, assets={"blob.bin": blob})
    episode = Episode(task, local_pool, EpisodeSettings(max_turns=5))
    assert episode.sandbox is not None and episode.sandbox.read_file("blob.bin") == blob
    episode.play(WRITE)
    episode.play(format_tool_call("submit"))
    assert episode.grade is not None and episode.grade.score == 1.0, episode.grade.reason
    with pytest.raises(DatasetError, match="assets must map path strings to bytes"):
        make_task("bad", assets={"blob.bin": "text"})
