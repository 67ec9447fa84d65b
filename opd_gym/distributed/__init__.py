"""Rollouts on a Ray cluster (optional extra `ray`): worker actors, a shared teacher service.

Import-light: `ray` is imported only when a cluster is used.
"""

from opd_gym.distributed.runner import EpisodeResult, RayOptions, RayRollout, run_ray_rollout
from opd_gym.distributed.teacher import RemoteTeacher, TeacherService
from opd_gym.distributed.worker import RolloutWorker

__all__ = [
    "EpisodeResult",
    "RayOptions",
    "RayRollout",
    "RemoteTeacher",
    "RolloutWorker",
    "TeacherService",
    "run_ray_rollout",
]
