"""Wrappers around CodingEnv (trajectory recording)."""

from opd_gym.wrappers.recorder import TrajectoryRecorder

__all__ = ["TrajectoryRecorder"]
