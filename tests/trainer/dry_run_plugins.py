"""Plugins that resolve (they import and take their kwargs) but break their contract when run."""

from __future__ import annotations

import torch

from areal.trainer.ppo.advantage import AdvantageResult, OutcomeResult, compute_default_advantages
from areal.trainer.ppo.advantage_algorithms import TemporalResult, token_gae


def outcome_wrong_shape(inputs, *, factor: float = 1.0):
    return OutcomeResult(rewards=inputs.data["rewards"].float()[:-1] * factor)


def estimator_int_dtype(inputs):
    r = token_gae(inputs)
    return TemporalResult(advantages=r.advantages.long(), returns=r.returns, total_rewards=r.total_rewards)


def process_wrong_shape(inputs):
    return inputs.advantages[:, :-1]


def replacement_float_truncation(inputs):
    r = compute_default_advantages(inputs)
    return AdvantageResult(**{**r.__dict__, "extras": {**r.extras, "is_truncated": r.extras["is_truncated"].float()}})


def needs_split_rollouts(inputs):
    """Works only when the batch has split rollouts (as the per_turn export has)."""
    assert inputs.meta.rollout_groups is not None, "expected split rollouts"
    return OutcomeResult(rewards=inputs.data["rewards"].float())


def needs_process_rewards(inputs):
    assert inputs.token_rewards is not None, "expected process rewards"
    return inputs.advantages + inputs.token_rewards
