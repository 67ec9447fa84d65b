"""Locally built models for tests and benchmarks (no downloads)."""

from opd_gym.models.tiny import build_tiny_model, default_model_dir, ensure_tiny_model

__all__ = ["build_tiny_model", "default_model_dir", "ensure_tiny_model"]
