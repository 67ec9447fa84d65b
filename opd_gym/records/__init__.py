"""The records several layers share, on the ground floor: a task (`Task`, `RepoInfo`), the
policy protocol agents implement (`Policy`), an episode's row (`EpisodeRow`) and the OPD
record of one turn (`OPDRecord`). They
import nothing of the package but its errors, so anything may import them.
"""

from opd_gym.records.opd_record import OPDRecord
from opd_gym.records.policy import Policy
from opd_gym.records.rows import EpisodeRow
from opd_gym.records.task import RepoInfo, Task

__all__ = ["EpisodeRow", "OPDRecord", "Policy", "RepoInfo", "Task"]
