"""Fixtures shared by the env, tools, grading and wrapper tests: toy tasks and local sandboxes.

`docker_grader` is one Grader over one Docker pool for the whole session: a Grader calibrates
each task once (per content hash), so every module that grades the built-in suite or the
dataset fixtures on Docker shares those calibrations instead of repeating them (and the
xdist workers of one run share them through a folder).

The local backend runs commands unisolated on this host and warns so; the tests using it run
only trusted toy code and silence that warning with a `filterwarnings` mark.
"""

from __future__ import annotations

import hashlib
import os

import pytest

from opd_gym.sandboxes import make_pool
from opd_gym.tasks import Task

CALC_TESTS = """\
from calc import add


def test_small():
    assert add(1, 2) == 3


def test_negative():
    assert add(-1, -1) == -2


def test_zero():
    assert add(0, 0) == 0
"""


def make_toy_task(task_id: str = "toy_add", **overrides) -> Task:
    """A three-test task: implement add(a, b) in calc.py (starter raises NotImplementedError)."""
    fields = {
        "id": task_id,
        "prompt": "Implement add(a, b) in calc.py so it returns the sum.",
        "files": {"calc.py": "def add(a, b):\n    raise NotImplementedError\n"},
        "tests": {"test_calc.py": CALC_TESTS},
        "solution": {"calc.py": "def add(a, b):\n    return a + b\n"},
        "timeout": 60.0,
    }
    fields.update(overrides)
    return Task(**fields)


# Test files that are data: a Harbor task's own pytest file (tests/fixtures/harbor/*/tests/)
# runs inside that task's verifier, never in this session.
collect_ignore_glob = ["fixtures/*"]


# Files whose tests start the session's vLLM servers or its Ray cluster: under pytest-xdist
# they all go to one worker, so a run starts each once (two Ray heads would also share ports).
ONE_WORKER = ("tests/vllm/", "tests/distributed/", "tests/authoring/test_synth_ray.py")


def pytest_collection_modifyitems(config, items):
    """A vllm or ray test outside ONE_WORKER would start a second server or cluster under
    xdist: refuse the run and say where to list it."""
    for item in items:
        if (item.get_closest_marker("vllm") or item.get_closest_marker("ray")) \
                and not item.nodeid.startswith(ONE_WORKER):
            raise pytest.UsageError(f"{item.nodeid} is a vllm/ray test: add its file to "
                                    "ONE_WORKER in tests/conftest.py")


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist, absent under -p no:xdist
def pytest_xdist_make_scheduler(config, log):
    """`--dist loadfile` (the test command's), with every ONE_WORKER file in one unit: a
    module's tests share a worker, so its module fixtures are built once."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class ByFile(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return "vllm-ray" if path.startswith(ONE_WORKER) else path

    return ByFile(config, log)


@pytest.fixture(scope="session")
def docker_grader(tmp_path_factory):
    """Under pytest-xdist its calibrations persist in a folder the run's workers share, with
    a secret drawn from the run's id: each task is calibrated once per run, not per worker."""
    from opd_gym.grading import Grader

    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    shared = {} if not run else {
        "secret": hashlib.sha256(f"opd-gym tests {run}".encode()).digest(),
        "calibrations": tmp_path_factory.getbasetemp().parent / "calibrations"}
    pool = make_pool("docker", size=3, workers=3)
    yield Grader(pool, **shared)
    pool.close()


@pytest.fixture(scope="session")
def ray_cluster():
    """A real two-node Ray cluster on this host (head + one more node, 3 logical CPUs each:
    separate raylet processes on other ports), the driver connected; once per session, here
    so that tests/distributed and tests/vllm share it."""
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 3})
    cluster.add_node(num_cpus=3)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, log_to_driver=False)
    try:
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()


@pytest.fixture
def toy_task() -> Task:
    return make_toy_task()


@pytest.fixture
def make_task():
    """The toy-task factory, for tests that need variants (other tests, timeouts...)."""
    return make_toy_task


@pytest.fixture
def local_pool():
    """A warm pool of local (unisolated, fast) sandboxes, closed after the test."""
    pool = make_pool("local", size=2)
    yield pool
    pool.close()


@pytest.fixture
def local_sandbox(local_pool):
    sandbox = local_pool.acquire()
    yield sandbox
    local_pool.release(sandbox)


@pytest.fixture(scope="session")
def tiny_model_path(tmp_path_factory):
    """Folder of a tiny seeded model + tokenizer, built locally once per test session."""
    from opd_gym.models import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model", seed=0)


@pytest.fixture(scope="session")
def student_run(tmp_path_factory):
    """A real local-sandbox rollout: tiny student (seed 0) sampling, tiny teacher (seed 1),
    rule judge, top-8: (run folder, student model folder). Shared by the export tests and
    ATIF in (tests/exports/test_atif_in.py); tests that change it work on a copy."""
    from opd_gym.agents.policies import make_agent_factory
    from opd_gym.models import build_tiny_model
    from opd_gym.rollout import RolloutConfig, run_rollout
    from opd_gym.tasks import load_suite

    models = tmp_path_factory.mktemp("models")
    student = build_tiny_model(models / "student", seed=0)
    teacher = build_tiny_model(models / "teacher", seed=1)
    out = tmp_path_factory.mktemp("run")
    config = RolloutConfig(out_dir=str(out), episodes=1, task_ids=["fizzbuzz"], sandbox="local",
                           max_turns=3, opd_options={"topk": 8})
    summary = run_rollout(config, make_agent_factory(f"hf:{student}", load_suite(),
                                                     max_new_tokens=48, seed=0),
                          teacher=f"hf:{teacher}", judge="rule", progress=False)
    assert summary.episodes == 1 and not summary.failures
    return out, student


@pytest.fixture(scope="session")
def tiny_tokenizer(tiny_model_path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_path)


@pytest.fixture(scope="session")
def tiny_model(tiny_model_path):
    """The tiny model in fp32 eval mode (shared: do not cast or train it in a test)."""
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_model_path).eval()


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "terminal",
            "description": "Run a shell command in the workspace.",
            "parameters": {
                "type": "object",
                "properties": {"command": {"type": "string"}},
                "required": ["command"],
            },
        },
    }
]


@pytest.fixture(scope="session")
def tools():
    return TOOLS


@pytest.fixture(scope="session")
def make_episode(tiny_tokenizer):
    """`make(n_turns, output_lines)`: a synthetic episode (turns without hints, hint per turn).

    Each turn's student ids are the template's rendering of its assistant message up to and
    including <|im_end|>, i.e. exactly what a student following the template would sample.
    """
    from opd_gym.opd.chat import EpisodeTurn, make_hint_message, render_ids

    commands = ["ls -la", "cat main.py", "python -m pytest -q", "sed -n 1,20p main.py"]

    def make(n_turns: int, output_lines: int = 6):
        context = [
            {"role": "system", "content": "You are a careful coding assistant."},
            {"role": "user", "content": "The function total() returns the wrong value. Fix it."},
        ]
        turns, hints = [], []
        for i in range(n_turns):
            message = {
                "role": "assistant",
                "content": f"Step {i}: let me run a command to check the state of the code.",
                "tool_calls": [{"type": "function", "function": {
                    "name": "terminal", "arguments": {"command": commands[i % 4]}}}],
            }
            prompt = render_ids(tiny_tokenizer, context, TOOLS, add_generation_prompt=True)
            full = render_ids(tiny_tokenizer, [*context, message], TOOLS,
                              add_generation_prompt=False)
            block = full[len(prompt):]
            end = block.index(tiny_tokenizer.eos_token_id) + 1
            turns.append(EpisodeTurn(list(context), block[:end]))
            hints.append(make_hint_message(f"Turn {i} output showed the loop skips the last item."))
            output = f"exit code {i % 2}\n" + "\n".join(
                f"line {j}: value = {i * j}" for j in range(output_lines))
            context = [*context, message, {"role": "tool", "content": output}]
        return turns, hints

    return make


@pytest.fixture(scope="session")
def episode(make_episode):
    """A 4-turn synthetic episode (see `make_episode`)."""
    return make_episode(4)
