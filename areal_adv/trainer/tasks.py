"""The task interface at its earlier path, for task plugins written against it.

The tasks live in `areal_adv.trainer.rollout.tasks`; this module re-exports the
names a plugin imports, as the same objects.
"""

from areal_adv.trainer.rollout.tasks import Environment, StepResult, Task, make_task

__all__ = ["Environment", "StepResult", "Task", "make_task"]
