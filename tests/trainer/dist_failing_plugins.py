"""Plugins that fail on one rank only, at call time (for the torchrun failure tests)."""

from __future__ import annotations

import os
import time

from areal.trainer.ppo.advantage import OutcomeResult


def fail_on_rank1(inputs, *, delay_s: float = 0.0):
    """An outcome-shaping stage that imports everywhere but raises when called on rank 1.

    `delay_s` first lets the other ranks walk into the next collective (a batch-level
    normalisation all-reduce), so the test covers a peer blocked in a collective.
    """
    if os.environ.get("RANK") == "1":
        time.sleep(delay_s)
        raise ValueError("simulated plugin failure on rank 1")
    return OutcomeResult(rewards=inputs.data["rewards"].float())


def reward_failing_on_rank0(prompts, completions, **columns):
    """A TRL-style reward function (`reward: [{implementation: ...}]`) that raises when called on rank 0."""
    if os.environ.get("RANK") == "0":
        raise ZeroDivisionError("simulated reward-function failure on rank 0")
    return [0.0 for _ in completions]
