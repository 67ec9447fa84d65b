"""Validate exported ATIF trajectories with Harbor's own model, in Harbor's own venv.

Harbor (`harbor` 0.26.0) needs Python >= 3.12, newer than the suite may run on, so its models
live in a venv of their own (`scripts/setup.sh`, step 6, makes `.venv-harbor`). The check runs
that venv's python on the files: `harbor.models.trajectories.Trajectory.model_validate_json`,
the strict pydantic model Harbor itself reads trajectories with, and ATIF-v1.8.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
VALIDATE = """\
import json, sys
from harbor.models.trajectories import Trajectory
out = {}
for path in sys.argv[1:]:
    try:
        t = Trajectory.model_validate_json(open(path, encoding="utf-8").read())
        out[path] = "ok" if t.schema_version == "ATIF-v1.8" else t.schema_version
    except Exception as exc:  # pydantic's ValidationError: its message, per file
        out[path] = f"{type(exc).__name__}: {exc}"
print(json.dumps(out))
"""


def harbor_python() -> Path:
    """The python of the venv holding harbor (OPD_GYM_HARBOR_VENV, else the repo's
    .venv-harbor); fails, never skips, when it is missing: the check is part of the suite."""
    venv = Path(os.environ.get("OPD_GYM_HARBOR_VENV") or ROOT / ".venv-harbor")
    python = venv / "bin" / "python"
    if not python.is_file():
        pytest.fail(f"no harbor venv at {venv}: run scripts/setup.sh (step 6 makes it with a "
                    "Python 3.12 and harbor==0.26.0), or set OPD_GYM_HARBOR_VENV to one")
    return python


def harbor_validate(paths: list[Path]) -> dict[str, str]:
    """Each file's verdict ("ok", or the validation error) under Harbor's `Trajectory`."""
    proc = subprocess.run([str(harbor_python()), "-c", VALIDATE, *map(str, paths)],
                          capture_output=True, text=True, timeout=120)
    if proc.returncode:
        pytest.fail(f"harbor's python could not validate: {proc.stderr.strip()[-2000:]}")
    return json.loads(proc.stdout)
