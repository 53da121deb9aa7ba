"""An outcome-shaping plugin that only imports on rank 0 (simulates a worker missing a dependency)."""

from __future__ import annotations

import os

from areal_adv.trainer.ppo.advantage import OutcomeResult

if os.environ.get("RANK") == "1":
    raise ImportError("dist_rank_plugin: simulated missing dependency on rank 1")


def halve(inputs):
    """Halve the task reward (any working plugin would do)."""
    return OutcomeResult(rewards=inputs.data["rewards"].float() * 0.5)
