"""A task plugin that only imports on rank 0 (simulates a worker missing a dependency)."""

from __future__ import annotations

import os

from examples.custom_task.tasks import make_max_task

if os.environ.get("RANK") == "1":
    raise ImportError("rank_task: simulated missing dependency on rank 1")

__all__ = ["make_max_task"]
