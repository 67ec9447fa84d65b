"""Locate the data shipped with opd_gym (`envs/`, `sandbox/`) in a wheel or a source checkout."""

from __future__ import annotations

from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent


def data_roots() -> list[Path]:
    """Candidate data roots, in lookup order: the wheel's `_data` dir, then the repo root."""
    return [_PACKAGE_DIR / "_data", _PACKAGE_DIR.parent]


def data_path(*parts: str) -> Path:
    """Return shipped data `parts` (e.g. `data_path("envs", "coding")`) wherever it lives."""
    for root in data_roots():
        candidate = root.joinpath(*parts)
        if candidate.exists():
            return candidate
    where = " or ".join(str(root) for root in data_roots())
    raise FileNotFoundError(f"shipped data {'/'.join(parts)!r} not found under {where}")
