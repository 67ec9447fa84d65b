"""The package's import graph, read from the source: no cycles, and no module imports from a
layer above its own (lazy imports inside functions count: they tie two modules together too).
"""

from __future__ import annotations

import ast
from pathlib import Path

import opd_gym

ROOT = Path(opd_gym.__file__).parent

# bottom up; a module belongs to the layer of its longest matching prefix ("" is the package)
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    # records: the task, policy protocol, episode row and OPD record every layer shares
    ("foundations", ("errors", "resources", "actions", "spaces", "pyast", "nodeids",
                     "records")),
    # grading's source readers (pure AST over test sources, nothing of the package above
    # the ground floor): the canaries, held sites, computed and near expectations and
    # sentinels the grader builds its variants from, and the one question suites ask before
    # any sandbox runs (grading.earning: which tests can earn)
    ("parts", ("models", "sandboxes", "tasks", "tools", "specs", "grading.canary",
               "grading.inherited", "grading.held", "grading.computed", "grading.near",
               "grading.sentinel", "grading.earning")),
    ("judgement", ("grading", "rewards", "transcript")),
    # offline task authoring (synthesis, statements, validation, the repo suite's generator)
    ("authoring", ("authoring",)),
    # the files rows are kept in: written by the recorder, read by anyone
    ("run files", ("runs.directory", "wrappers")),
    ("episode", ("episode", "env", "registration")),
    ("actors", ("agents", "proxy")),  # proxy: the model-call recorder agents talk through
    ("opd", ("opd",)),
    ("runs", ("runs",)),
    ("rollout core", ("rollout_core",)),  # a run config becomes an env stack, and plays
    ("runners", ("rollout", "distributed", "trl", "sb3", "exports", "viewer", "loggers",
                 "harness", "serve")),
    ("faces", ("cli", "compat", "")),
]


def _modules() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _imports(name: str, path: Path, known: set[str]) -> dict[str, int]:
    """Package modules `path` imports (every import statement, every name of it: `from X
    import a, b` ties `path` to X.a and X.b where they are modules), with the first line of
    each."""
    found: dict[str, int] = {}
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            # a name that is a submodule ties `path` to it; any other to the module itself
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base
                       for a in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.setdefault(target, node.lineno)
    return found


def _graph() -> dict[str, dict[str, int]]:
    modules = _modules()
    return {m: _imports(m, p, set(modules)) for m, p in modules.items()}


def layer(module: str) -> int:
    """Index in LAYERS of `module` ("opd_gym.x.y"); KeyError for a module no layer claims."""
    rel = module.removeprefix("opd_gym").removeprefix(".")
    best: tuple[int, int] | None = None
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if rel == prefix or (prefix and rel.startswith(prefix + ".")):
                if best is None or len(prefix) > best[1]:
                    best = (index, len(prefix))
    if best is None:
        raise KeyError(f"{module} is in no layer: add it to LAYERS in {__file__}")
    return best[0]


def _cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, recursive)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_every_module_has_a_layer():
    assert [m for m in _modules() if _safe_layer(m) is None] == []


def _safe_layer(module: str) -> int | None:
    try:
        return layer(module)
    except KeyError:
        return None


# Upward arrows known and owed: each names why and where it goes (the list may only shrink;
# a new upward import fails the test, and so does an entry whose arrow is gone).
KNOWN_UPWARD: set[tuple[str, str]] = set()


def _upward(graph: dict[str, dict[str, int]]) -> dict[tuple[str, str], int]:
    return {(m, d): line for m, deps in sorted(graph.items()) for d, line in deps.items()
            if _safe_layer(m) is not None and _safe_layer(d) is not None
            and layer(d) > layer(m)}


def test_no_module_imports_from_a_layer_above_its_own():
    upward = [f"{m} ({LAYERS[layer(m)][0]}) line {line} imports {d} ({LAYERS[layer(d)][0]})"
              for (m, d), line in _upward(_graph()).items() if (m, d) not in KNOWN_UPWARD]
    assert upward == []


def test_the_known_upward_imports_still_exist():
    """An arrow fixed leaves KNOWN_UPWARD too, so the list says what is still owed."""
    assert KNOWN_UPWARD <= set(_upward(_graph()))


def test_every_name_of_an_import_is_read():
    """`from opd_gym.grading import canary, computed, held, near, sentinel` ties the module
    to each of them (before, only the first name of a statement was read, and repo_suite's
    upward imports went unseen)."""
    graph = _graph()
    for name in ("canary", "computed", "held", "near", "sentinel"):
        assert f"opd_gym.grading.{name}" in graph["opd_gym.grading.earning"]


def test_the_package_has_no_import_cycles():
    graph = _graph()
    assert len(graph) > 100 and sum(map(len, graph.values())) > 300  # the graph was read
    assert _cycles(graph) == []


def test_the_checks_see_a_cycle_and_an_upward_import():
    """The two checks above fail on what they forbid (a graph built by hand)."""
    graph = {"opd_gym.specs": {"opd_gym.agents.policies": 1},
             "opd_gym.agents.policies": {"opd_gym.specs": 2}}
    assert _cycles(graph) == [["opd_gym.agents.policies", "opd_gym.specs"]]
    assert layer("opd_gym.agents.policies") > layer("opd_gym.specs")
    assert (layer("opd_gym.records.rows") < layer("opd_gym.agents.hf")
            < layer("opd_gym.rollout_core"))


def test_old_import_paths_are_served_from_one_place():
    """Moved names and modules still import, as the very objects of their new homes."""
    from opd_gym.agents.policies import make_policy
    from opd_gym.exports import formats
    from opd_gym.opd import exporters
    from opd_gym.opd.teachers import make_teacher
    from opd_gym.specs import make_policy as old_policy
    from opd_gym.specs import make_teacher as old_teacher
    from opd_gym.transcript import prompt_ids

    assert exporters is formats
    import opd_gym.tasks.model

    import opd_gym.records.task

    assert opd_gym.tasks.model is opd_gym.records.task
    import opd_gym.runs.core
    import opd_gym.tasks.synth
    from opd_gym.tasks.synth import Mutation, build_task

    import opd_gym.authoring.synth
    import opd_gym.rollout_core

    assert opd_gym.runs.core is opd_gym.rollout_core
    assert opd_gym.tasks.synth is opd_gym.authoring.synth
    from opd_gym.tasks.manifest import build_task as new_build_task
    from opd_gym.tasks.mutation import Mutation as new_mutation

    assert (Mutation, build_task) == (new_mutation, new_build_task)
    from opd_gym.agents.base import Policy
    from opd_gym.runs.schema import EpisodeRow

    from opd_gym.records import EpisodeRow as row
    from opd_gym.records import Policy as policy

    assert (Policy, EpisodeRow) == (policy, row)
    assert (old_teacher, old_policy) == (make_teacher, make_policy)
    from opd_gym.models.tokenizer import prompt_ids as old_prompt_ids

    assert old_prompt_ids is prompt_ids
    import opd_gym.specs

    try:
        opd_gym.specs.no_such_name  # noqa: B018
    except AttributeError as exc:
        assert "no_such_name" in str(exc)
    else:
        raise AssertionError("an unknown name must still raise AttributeError")


def test_a_planted_upward_import_in_a_from_form_fails(tmp_path):
    """A module of the parts layer that writes `from opd_gym.grading import canary, grader`
    (canary is its own layer's; grader is a floor up) is caught by the second name, lazy or
    not."""
    planted = tmp_path / "planted.py"
    planted.write_text("def lazy():\n    from opd_gym.grading import canary, grader\n")
    name = "opd_gym.tasks.planted"
    graph = {**_graph(), name: _imports(name, planted, set(_modules()) | {name})}
    assert (name, "opd_gym.grading.grader") in _upward(graph)
    assert (name, "opd_gym.grading.canary") not in _upward(graph)
