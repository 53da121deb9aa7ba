"""Task name → environment class. Task modules are imported only when built."""

from __future__ import annotations

import importlib
from typing import Any

from areal.trainer.tasks.specs import build_task_spec

_TASK_CLASSES: dict[str, str] = {
    "arith": "areal.trainer.tasks.arith.ArithTask",
    "guess": "areal.trainer.tasks.guess.GuessTask",
}


def make_task(name: str, kwargs: dict[str, Any] | None = None) -> Any:
    """Build the environment for `task.name` with validated `task.kwargs`."""
    spec = build_task_spec(name, dict(kwargs or {}))
    module, _, cls = _TASK_CLASSES[name].rpartition(".")
    return getattr(importlib.import_module(module), cls)(spec)
