"""Pipeline stages that reproduce TRL-specific reward scaling.

TRL's `scale_rewards="batch"` divides each group-centred reward by the std of the
raw rewards over the whole batch. The pipeline's `reward_norm.std_level: batch`
pools the deviations from each group's own mean instead (AReaL's definition), so
the two differ by the between-group spread. `batch_std_scale` divides the rewards
by TRL's batch std first; a group-mean `reward_norm` without std then gives TRL's
advantages exactly:

    actor:
      reward_norm: {mean_level: group, std_level: null}
      advantage:
        outcome_reward_shaping:
          implementation: areal_adv.integrations.trl.stages.batch_std_scale
          kwargs: {eps: 1.0e-4}
"""

from __future__ import annotations

import torch

from areal_adv.api.config_checks import is_number
from areal_adv.trainer.ppo.advantage import OutcomeResult, OutcomeRewardInputs

__all__ = ["batch_std_scale"]


def batch_std_scale(inputs: OutcomeRewardInputs, *, eps: float = 1e-4) -> OutcomeResult:
    """r / (std(r) + eps), std unbiased over every row of the batch (TRL's `nanstd`; 0 for one row)."""
    if not is_number(eps, low=0.0):
        raise ValueError(f"batch_std_scale: eps must be a finite number >= 0, got {eps!r}")
    rewards = inputs.data["rewards"].to(torch.float64)
    std = rewards.std() if rewards.numel() > 1 else torch.zeros((), dtype=torch.float64)
    if float(std) + eps == 0.0:
        raise ValueError("batch_std_scale: every reward is equal and eps is 0; the scale would divide by zero")
    return OutcomeResult(rewards=rewards / (std + eps))
