"""Metric sinks for rollouts: JSONL (no dependency), Weights & Biases, TensorBoard."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Protocol

from opd_gym.errors import ConfigError

LOGGERS = ("jsonl", "wandb", "tensorboard")


class MetricsLogger(Protocol):
    def log(self, metrics: dict[str, float], step: int) -> None: ...

    def close(self) -> None: ...


class JsonlLogger:
    """One JSON object per logged step in `metrics.jsonl` (NaN written as null)."""

    def __init__(self, out_dir: Path) -> None:
        self.path = Path(out_dir) / "metrics.jsonl"
        self._fh = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()

    def log(self, metrics: dict[str, float], step: int) -> None:
        clean = {
            k: (None if isinstance(v, float) and not math.isfinite(v) else v)
            for k, v in metrics.items()
        }
        self._fh.write(json.dumps({"step": step, "time": time.time(), **clean}) + "\n")
        self._fh.flush()

    def close(self) -> None:
        self._fh.close()


class WandbLogger:
    def __init__(self, out_dir: Path, config: dict) -> None:
        import wandb

        self._run = wandb.init(project="opd_gym", dir=str(out_dir), config=config)

    def log(self, metrics: dict[str, float], step: int) -> None:
        self._run.log(metrics, step=step)

    def close(self) -> None:
        self._run.finish()


class TensorboardLogger:
    def __init__(self, out_dir: Path) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self._writer = SummaryWriter(str(Path(out_dir) / "tensorboard"))

    def log(self, metrics: dict[str, float], step: int) -> None:
        for key, value in metrics.items():
            if isinstance(value, int | float) and math.isfinite(value):
                self._writer.add_scalar(key, value, step)

    def close(self) -> None:
        self._writer.close()


def make_logger(kind: str, out_dir: Path, config: dict | None = None) -> MetricsLogger:
    """The logger `kind` names; a clear ImportError when its package is not installed."""
    if kind == "jsonl":
        return JsonlLogger(out_dir)
    try:
        if kind == "wandb":
            return WandbLogger(out_dir, config or {})
        if kind == "tensorboard":
            return TensorboardLogger(out_dir)
    except ImportError as exc:
        raise ImportError(
            f"--log {kind} needs the '{exc.name or kind}' package: pip install "
            f"'opd_gym[{kind}]' (or use --log jsonl, which needs nothing)"
        ) from exc
    raise ConfigError(f"unknown logger {kind!r}: use one of {', '.join(LOGGERS)}")
