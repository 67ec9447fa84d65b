"""CodingEnv through its public API on the local backend (no Docker needed)."""

from __future__ import annotations

import json
import subprocess
import sys

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import opd_gym
from opd_gym import CodingEnv, TokenText
from opd_gym.tools import format_tool_call

pytestmark = pytest.mark.filterwarnings("ignore:opd_gym local sandbox")

SOLUTION = "def add(a, b):\n    return a + b\n"


def call(name, **arguments):
    return format_tool_call(name, arguments)


@pytest.fixture
def env(toy_task, make_task):
    tasks = [toy_task, make_task("toy_two"), make_task("toy_three")]
    env = CodingEnv(tasks=tasks, sandbox="local", pool_size=1, max_turns=6)
    yield env
    env.close()


def test_init_is_lazy_and_close_is_idempotent(toy_task):
    env = CodingEnv(tasks=[toy_task], sandbox={"backend": "docker", "image": "no-such-image:0"})
    assert env.pool is None and env.sandbox is None
    env.close()
    env.close()
    with pytest.raises(RuntimeError, match="closed"):
        env.reset()


def test_reset_returns_prompt_messages_and_tools(env):
    obs, info = env.reset(options={"task_id": "toy_add"})
    assert obs.startswith("Implement add(a, b)") and obs.endswith("Files in the workspace: calc.py")
    assert info["task_id"] == "toy_add" and info["turns"] == 0 and info["max_turns"] == 6
    assert [m["role"] for m in info["messages"]] == ["system", "user"]
    assert info["messages"][1]["content"] == obs
    assert "<tool_call>" in info["messages"][0]["content"]
    names = [t["function"]["name"] for t in info["tools"]]
    assert names == ["terminal", "read_file", "write_file", "edit_file", "submit"]
    assert env.sandbox.read_file("calc.py").startswith(b"def add")
    assert obs in env.observation_space


def test_full_episode_write_run_submit(env):
    env.reset(options={"task_id": "toy_add"})
    obs, reward, term, trunc, info = env.step(call("write_file", path="calc.py", content=SOLUTION))
    assert (obs, reward, term, trunc) == ("Wrote 32 bytes to calc.py.", 0.0, False, False)
    assert info["tool_calls"][0]["name"] == "write_file" and info["errors"] == []
    assert info["tool_results"][0] | {"duration": 0} == {
        "call_id": "call_0_0", "name": "write_file", "ok": True, "error": "", "exit_code": -1,
        "timed_out": False, "truncated": False, "duration": 0}
    check = call("terminal", command="python3 -c 'import calc; print(calc.add(2, 3))'")
    obs, reward, term, trunc, info = env.step("Now test it.\n" + check)
    assert obs == "5\n[exit code: 0]" and info["tool_results"][0]["exit_code"] == 0
    obs, reward, term, trunc, info = env.step(call("submit"))
    assert term and not trunc
    assert obs == "Submitted. Hidden tests: 3 of 3 passed."
    assert info["end_reason"] == "submitted" and info["grade"]["score"] == 1.0
    breakdown = info["reward_breakdown"]
    assert breakdown["correctness"] == 1.0 and breakdown["tool_use"] == 1.0
    assert breakdown["efficiency"] == pytest.approx(1 - 2 / 6)
    assert reward == pytest.approx(breakdown["total"]) and info["turns"] == 3
    roles = [m["role"] for m in info["messages"]]
    assert roles == ["system", "user"] + ["assistant", "tool"] * 3
    assert info["messages"][4]["content"] == "Now test it."  # parsed block removed from content
    assert env.turns[1].text.startswith("Now test it.\n<tool_call>")  # raw text kept
    with pytest.raises(RuntimeError, match="reset"):
        env.step(call("submit"))


def test_all_in_one_turn_and_calls_after_submit_are_skipped(env):
    env.reset(options={"task_id": "toy_add"})
    text = (call("write_file", path="calc.py", content=SOLUTION) + call("terminal", command="ls")
            + call("submit") + call("terminal", command="rm calc.py"))
    obs, reward, term, trunc, info = env.step(text)
    assert term and reward == pytest.approx(1.0)
    assert [r["error"] for r in info["tool_results"]] == ["", "", "", "skipped"]
    assert "[submit]\nSubmitted. Hidden tests: 3 of 3 passed." in obs
    assert "not run: submit() ended the episode" in obs
    tool_ids = [m["tool_call_id"] for m in info["messages"] if m["role"] == "tool"]
    assert tool_ids == [c["id"] for c in info["messages"][2]["tool_calls"]]


def test_format_errors_explain_and_end_the_episode_after_the_limit(env):
    env.reset(options={"task_id": "toy_add"})
    obs, reward, term, trunc, info = env.step("I'll just describe the solution.")
    assert obs.startswith("Format error: No tool call found") and not (term or trunc)
    assert info["format_error_streak"] == 1 and info["turn"]["format_error"]
    assert info["messages"][-1]["role"] == "user"
    obs, *_ , info = env.step('<tool_call>{"name": "terminal", "arguments": {}}</tool_call>')
    assert "Missing required argument 'command'" in obs and info["format_error_streak"] == 2
    obs, *_, info = env.step(call("terminal", command="true"))  # a valid call resets the streak
    assert info["format_error_streak"] == 0
    for _ in range(2):
        obs, reward, term, trunc, info = env.step("<tool_call>{broken</tool_call>")
        assert "not valid JSON" in obs
    obs, reward, term, trunc, info = env.step(None)  # not even a string
    assert trunc and not term and info["end_reason"] == "format_errors"
    assert "must be the model's text" in obs and "Episode over: 3 turns in a row" in obs
    assert info["grade"]["score"] == 0.0 and reward == pytest.approx(
        info["reward_breakdown"]["total"])


def test_turn_limit_truncates_and_grades(toy_task):
    env = CodingEnv(tasks=[toy_task], sandbox="local", pool_size=1, max_turns=2)
    try:
        env.reset()
        *_, trunc, info = env.step(call("write_file", path="calc.py", content=SOLUTION))
        assert not trunc
        obs, reward, term, trunc, info = env.step(call("terminal", command="echo done"))
        assert trunc and not term and info["end_reason"] == "max_turns"
        assert "turn limit (2)" in obs and info["grade"]["passed"] == 3
        assert info["reward_breakdown"]["correctness"] == 1.0 and reward > 0.7
    finally:
        env.close()


def test_token_ids_and_openai_message_actions_are_kept(env):
    env.reset(options={"task_id": "toy_add"})
    text = call("terminal", command="echo hi")
    *_, info = env.step(TokenText(text, token_ids=[11, 12, 13], logprobs=[-0.1, -0.2, -0.3]))
    assert info["turn"] == {"index": 0, "context_len": 2, "end_len": 4, "num_calls": 1,
                            "format_error": False, "has_token_ids": True, "num_tokens": 3}
    env.step({"text": call("terminal", command="echo again"), "token_ids": [7], "logprobs": [-1.0]})
    message = {"role": "assistant", "content": "Submitting.", "tool_calls": [
        {"id": "xyz", "type": "function", "function": {"name": "submit", "arguments": "{}"}}]}
    *_, term, _, info = env.step(message)
    assert term and info["messages"][-1]["tool_call_id"] == "xyz"
    turns = env.turns
    assert turns[0].token_ids == (11, 12, 13) and turns[0].logprobs == (-0.1, -0.2, -0.3)
    assert turns[1].token_ids == (7,) and turns[2].token_ids is None
    assert turns[2].grade is not None and turns[2].grade.score == 0.0
    messages = env.messages
    for turn in turns:
        assert messages[turn.context_len]["role"] == "assistant"
        follow = messages[turn.context_len + 1 : turn.end_len]
        assert follow and all(m["role"] in ("tool", "user") for m in follow)
    assert turns[-1].end_len == len(messages)
    record = json.loads(json.dumps([t.to_dict() for t in turns]))
    assert record[2]["grade"]["task_id"] == "toy_add"


def test_info_is_fresh_every_call(env):
    _, info0 = env.reset(options={"task_id": "toy_add"})
    info0["messages"].append({"role": "user", "content": "injected"})
    info0["tools"][0]["function"]["name"] = "hacked"
    *_, info1 = env.step(call("terminal", command="true"))
    *_, info2 = env.step(call("terminal", command="true"))
    assert all(m["content"] != "injected" for m in info1["messages"])
    assert info1["tools"][0]["function"]["name"] == "terminal"
    assert info1["messages"] is not info2["messages"]
    assert info1["messages"][2] is not info2["messages"][2]
    info2["messages"][2]["tool_calls"][0]["function"]["name"] = "x"
    assert env.messages[2]["tool_calls"][0]["function"]["name"] == "terminal"
    forbidden = {"episode", "final_obs", "final_info", "terminal_observation",
                 "TimeLimit.truncated"}
    assert not forbidden & set(info2) and not any(k.startswith("_") for k in info2)


def test_task_choice_is_seeded_and_overridable(env):
    picks = [env.reset(seed=s)[1]["task_id"] for s in (1, 2, 3, 1)]
    assert picks[0] == picks[3]
    assert env.reset(options={"task_id": "toy_three"})[1]["task_id"] == "toy_three"
    with pytest.raises(ValueError, match="unknown task_id 'nope'"):
        env.reset(options={"task_id": "nope"})


def test_sandbox_death_truncates_with_reason(env):
    env.reset(options={"task_id": "toy_add"})
    obs, reward, term, trunc, info = env.step(call("terminal", command="kill -9 $PPID; sleep 5"))
    assert trunc and not term and info["end_reason"] == "sandbox_died"
    assert "sandbox stopped" in obs and "grade" not in info
    assert info["tool_results"][0]["error"] == "sandbox_died"
    obs, info = env.reset(options={"task_id": "toy_add"})  # a fresh sandbox next episode
    assert env.step(call("terminal", command="echo alive"))[0] == "alive\n[exit code: 0]"


def test_render_modes(toy_task, capsys):
    env = CodingEnv(tasks=[toy_task], sandbox="local", pool_size=1, render_mode="ansi")
    env.reset()
    env.step(call("terminal", command="echo hi"))
    text = env.render()
    assert "=== system ===" in text and "=== tool (terminal) ===\nhi\n[exit code: 0]" in text
    assert '-> terminal({"command": "echo hi"})' in text
    env.close()
    env = CodingEnv(tasks=[toy_task], sandbox="local", pool_size=1, render_mode="human")
    env.reset()
    assert "=== user ===\nImplement add" in capsys.readouterr().out
    env.step(call("terminal", command="echo shown"))
    out = capsys.readouterr().out
    assert out.startswith("=== assistant ===") and "shown" in out and "=== user" not in out
    env.close()
    with pytest.raises(ValueError, match="render_mode"):
        CodingEnv(tasks=[toy_task], render_mode="rgb_array")


def test_options_tool_subset_bash_blocks_and_call_limit(toy_task):
    env = CodingEnv(tasks=[toy_task], sandbox="local", pool_size=1, tools=["terminal", "submit"],
                    parse_bash_blocks=True, max_calls_per_turn=2)
    try:
        _, info = env.reset()
        assert [t["function"]["name"] for t in info["tools"]] == ["terminal", "submit"]
        assert "write_file" not in info["messages"][0]["content"]
        obs, *_ = env.step(call("write_file", path="a", content="b"))
        assert "Unknown tool 'write_file'. The tools are: terminal, submit." in obs
        obs, *_ = env.step("Let me check:\n```bash\necho from-fence\n```")
        assert obs == "from-fence\n[exit code: 0]"
        obs, *_, info = env.step(call("terminal", command="echo 1") * 3)
        assert [r["error"] for r in info["tool_results"]] == ["", "", "call_limit"]
    finally:
        env.close()


def test_messages_render_through_a_qwen_style_chat_template(env):
    jinja2 = pytest.importorskip("jinja2.sandbox")
    template = (
        "{%- for m in messages %}"
        "{%- if m.role == 'tool' %}"
        "{%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}"
        "<|im_start|>user{% endif %}"
        "\n<tool_response>\n{{ m.content }}\n</tool_response>"
        "{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}<|im_end|>\n{% endif %}"
        "{%- else %}<|im_start|>{{ m.role }}\n{{ m.content or '' }}"
        "{%- for c in m.tool_calls or [] %}\n<tool_call>\n"
        '{"name": "{{ c.function.name }}", "arguments": '
        "{{ c.function.arguments if c.function.arguments is string "
        "else c.function.arguments | tojson }}}\n</tool_call>{%- endfor %}<|im_end|>\n"
        "{%- endif %}{%- endfor %}<|im_start|>assistant\n"
    )
    render = jinja2.ImmutableSandboxedEnvironment().from_string(template).render
    env.reset(options={"task_id": "toy_add"})
    env.step("plan<think>hm</think>" + call("write_file", path="calc.py", content=SOLUTION)
             + call("terminal", command="echo hi"))
    env.step("no call here")
    env.step(call("submit"))
    def calls_in(text):
        return [n for n in ("write_file", "terminal", "submit")
                for _ in range(text.count(f'<tool_call>\n{{"name": "{n}", "arguments": {{'))]

    text = render(messages=env.messages)
    assert calls_in(text) == ["write_file", "terminal", "submit"]  # each call rendered once
    assert text.count("<tool_response>") == 3 and "Format error" in text
    assert "plan<think>hm</think><|im_end|>" not in text and "plan<think>hm</think>\n<tool" in text
    assert calls_in(render(messages=opd_gym.messages_for_template(env.messages))) == [
        "write_file", "terminal", "submit"]


@pytest.mark.filterwarnings("ignore:.*not having a spec")
def test_check_env_passes_on_local_backend(toy_task):
    env = gym.make("opd_gym/Coding-v0", tasks="coding", sandbox="local", pool_size=1)
    check_env(env.unwrapped)
    env.close()
    raw = CodingEnv(tasks=[toy_task], sandbox="local", pool_size=1)
    check_env(raw)
    raw.close()


def test_registration_and_make():
    spec = gym.spec("opd_gym/Coding-v0")
    assert spec.nondeterministic and spec.entry_point == "opd_gym.env:CodingEnv"
    json.dumps(spec.kwargs)  # plain config only
    env = gym.make("opd_gym:opd_gym/Coding-v0", sandbox="local", max_turns=15, tasks=["fizzbuzz"])
    assert env.unwrapped.max_turns == 15 and [t.id for t in env.unwrapped.tasks] == ["fizzbuzz"]
    assert env.unwrapped.pool is None
    env.close()
    with pytest.raises(ValueError, match="unknown task id"):
        gym.make("opd_gym/Coding-v0", tasks=["no_such_task"])


def test_import_stays_light():
    code = ("import sys, opd_gym; heavy = [m for m in ('torch', 'transformers', 'docker') "
            "if m in sys.modules]; print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_step_time_budget_bounds_chained_calls(toy_task):
    env = CodingEnv(tasks=[toy_task], sandbox="local", pool_size=1, step_time_budget=1.5)
    try:
        env.reset(seed=0)
        chain = "\n".join(call("terminal", command="sleep 1; echo ok", timeout=5)
                          for _ in range(6))
        _, _, terminated, truncated, info = env.step(chain)
        kinds = [r["error"] for r in info["tool_results"]]
        assert not terminated and not truncated
        assert kinds[0] == "" and kinds[1] == "timeout"
        assert kinds[2:] == ["step_budget"] * 4
        assert sum(r["duration"] for r in info["tool_results"]) < 3
    finally:
        env.close()


def test_hostile_arguments_never_raise(toy_task):
    env = CodingEnv(tasks=[toy_task], sandbox="local", pool_size=1, max_format_errors=10)
    deep = "[" * 100000 + "]" * 100000
    try:
        env.reset(seed=0)
        for action in (
            f'<tool_call>{{"name": "terminal", "arguments": {deep}}}</tool_call>',
            {"tool_calls": [{"function": {"name": "terminal",
                                          "arguments": '{"command":' + deep}}]},
            call("write_file", path="a.py", content="x\ud800"),
            call("read_file", path="\udcff"),
            call("terminal", command="echo big", timeout=10**400),
        ):
            obs, *_ = env.step(action)
            assert obs.strip()
        outputs = [m["content"] for m in env.messages if m["role"] == "tool"]
        assert any("lone surrogate" in o for o in outputs)
        assert outputs[-1] == "big\n[exit code: 0]"
    finally:
        env.close()


def test_verify_tasks_refuses_or_skips_a_task_no_grade_can_vouch_for(toy_task):
    """`verify_tasks=True`: a task is calibrated before its episode; one whose every test the
    untouched starter passes (no test can earn) is refused with UnverifiableTaskError naming
    it, or with `skip_unverifiable` another task is drawn; one asked for by id is refused."""
    import dataclasses

    from opd_gym.errors import UnverifiableTaskError

    passing = dataclasses.replace(toy_task, id="all-gates", files=dict(toy_task.solution))
    with gym.make("opd_gym/Coding-v0", tasks=[passing, toy_task], sandbox="local",
                  pool_size=1, verify_tasks=True) as env:
        assert env.unwrapped.verify() == {"all-gates": env.unwrapped.unverifiable["all-gates"]}
        assert "starter-passes" in env.unwrapped.unverifiable["all-gates"]
        with pytest.raises(UnverifiableTaskError, match="all-gates: the task cannot be verified"):
            env.reset(options={"task_id": "all-gates"})
        env.reset(options={"task_id": toy_task.id})  # a verifiable one plays
    with gym.make("opd_gym/Coding-v0", tasks=[passing, toy_task], sandbox="local",
                  pool_size=1, verify_tasks=True, skip_unverifiable=True) as env:
        for seed in range(4):
            env.reset(seed=seed)
            assert env.unwrapped.task.id == toy_task.id
    with gym.make("opd_gym/Coding-v0", tasks=[passing], sandbox="local", pool_size=1,
                  verify_tasks=True, skip_unverifiable=True) as env:
        with pytest.raises(UnverifiableTaskError, match="1 of 1 task"):
            env.reset(seed=0)


def test_a_calibration_that_cannot_finish_refuses_nothing_at_reset(make_task):
    """A calibration that fails (here a test module importing a package the sandbox lacks) is
    no verdict on the task: `verify()` names it without remembering it, and a reset with
    `verify_tasks=True` plays the episode, whose grade is then an infra error (masked in
    rows and exports), so a sandbox lost mid-run never costs an episode its row."""
    task = make_task(tests={"test_calc.py": (
        "import opd_no_such_dependency\nfrom calc import add\n\n\n"
        "def test_add():\n    assert add(2, 3) == 5\n")})
    with gym.make("opd_gym/Coding-v0", tasks=[task], sandbox="local", pool_size=1,
                  verify_tasks=True) as env:
        found = env.unwrapped.verify()
        assert "its calibration failed" in found[task.id]
        assert "opd_no_such_dependency" in found[task.id]
        assert env.unwrapped.unverifiable == {}  # not remembered: the next check tries again
        env.reset(seed=0)
        _, reward, terminated, _, info = env.step(call("submit"))
        assert terminated and reward == 0.0
        assert env.unwrapped.grade.infra_error and "opd_no_such_dependency" in \
            env.unwrapped.grade.reason
