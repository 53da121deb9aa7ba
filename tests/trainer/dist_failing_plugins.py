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


_CALLS: list[int] = []


def reward_dying_on_rank1(prompts, completions, *, how: str = "exit", at_call: int = 1, **columns):
    """A reward function that, on rank 1 at its `at_call`-th call (0-based: step 1), exits hard or hangs.

    `how`: `exit` ends the process with os._exit(3) (no exception, no report, no error file);
    `hang` sleeps for an hour (a rank whose main thread never returns); `raise` raises.
    """
    _CALLS.append(len(completions))
    if os.environ.get("RANK") == "1" and len(_CALLS) - 1 == at_call:
        if how == "exit":
            os._exit(3)
        if how == "hang":
            time.sleep(3600)
        raise RuntimeError("simulated reward-function failure on rank 1")
    return [0.0 for _ in completions]
