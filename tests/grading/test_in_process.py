"""in_process.imports_any: which test sources can run the solution in pytest's process."""

import pytest

from opd_gym.grading.in_process import imports_any

SOLUTION = frozenset({"calc", "pkg"})


@pytest.mark.parametrize("source", [
    "import calc\n",
    "import pkg.sub as s\n",
    "from pkg.sub import f\n",
    "from calc import add\n",
    "def test():\n    from calc import add\n",
    "from . import helpers\n",
    "import importlib\nm = importlib.import_module('c' + 'alc')\n",
    "m = __import__('calc')\n",
    "import pytest\ncalc = pytest.importorskip('calc')\n",
    "import runpy\nrunpy.run_path('main.py')\n",
    "exec(open('calc.py').read())\n",
    "def broken(:\n",
])
def test_a_source_that_imports_or_loads_the_solution_counts(source):
    assert imports_any(["import os\n", source], SOLUTION)


@pytest.mark.parametrize("source", [
    "import os\nimport calculator\n",
    "from opd_grading import run\nrun(['python3', 'calc.py'])\n",
    "import subprocess\nsubprocess.run(['python3', '-c', 'import calc'])\n",
    "x = 'calc'\n",
])
def test_a_source_that_only_starts_a_child_does_not(source):
    assert not imports_any([source], SOLUTION)
