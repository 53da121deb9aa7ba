"""Synthetic verifiable environments generated in code (no downloads).

`specs` is torch-free (used when a config is validated); the environments
themselves are built with `make_task`.
"""

from areal.trainer.tasks.registry import make_task

__all__ = ["make_task"]
