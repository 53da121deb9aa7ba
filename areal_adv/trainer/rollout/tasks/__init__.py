"""Tasks: text-in/text-out environments, built-in or plugins (see `base`).

`areal_adv.api.task_specs` validates built-in kwargs at config load (torch-free);
`make_task` builds the task object on every rank at trainer start-up.
"""

from areal_adv.trainer.rollout.tasks.base import Environment, StepResult, Task
from areal_adv.trainer.rollout.tasks.registry import make_task

__all__ = ["Environment", "StepResult", "Task", "make_task"]
