"""Tasks: the Task record, the built-in suites, file/row loaders and dataset adapters."""

from opd_gym.records.task import HarborInfo, RepoInfo, Task
from opd_gym.tasks.adapters import (
    ADAPTERS,
    from_apps,
    from_code_contests,
    from_humaneval,
    from_mbpp,
)
from opd_gym.tasks.harbor import load_harbor, load_harbor_task
from opd_gym.tasks.loaders import (
    TaskList,
    convert_rows,
    load_hf_dataset,
    load_tasks,
    task_from_dict,
)
from opd_gym.tasks.suite import (
    available_suites,
    load_env_spec,
    load_suite,
    load_suite_dir,
    load_task_dir,
)
from opd_gym.tasks.swebench import load_swebench

__all__ = [
    "ADAPTERS",
    "HarborInfo",
    "RepoInfo",
    "Task",
    "TaskList",
    "available_suites",
    "convert_rows",
    "from_apps",
    "from_code_contests",
    "from_humaneval",
    "from_mbpp",
    "load_env_spec",
    "load_harbor",
    "load_harbor_task",
    "load_hf_dataset",
    "load_suite",
    "load_suite_dir",
    "load_swebench",
    "load_task_dir",
    "load_tasks",
    "task_from_dict",
]
