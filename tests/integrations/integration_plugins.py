"""User plugins for the integration tests (imported by dotted path from pipeline YAMLs)."""

from __future__ import annotations

from areal_adv.trainer.ppo.advantage import OutcomeResult, OutcomeRewardInputs

CALLS: list[int] = []


def flip_outcome(inputs: OutcomeRewardInputs, *, offset: float) -> OutcomeResult:
    """r -> offset - r; records each call's batch size so a test can see it ran."""
    rewards = inputs.data["rewards"]
    CALLS.append(int(rewards.shape[0]))
    return OutcomeResult(rewards=offset - rewards.double())
