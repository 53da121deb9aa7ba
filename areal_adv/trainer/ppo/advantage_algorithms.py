"""Built-in stage functions of the advantage pipeline.

Every built-in is a small pure function on the public stage types
(`areal_adv.trainer.ppo.stage_types`, re-exported here for plugins that import
`TemporalInputs` & co. from this seed path), so a user plugin written against the
same types is a drop-in replacement (`actor.advantage.<stage>`).
"""

from __future__ import annotations

import torch

from areal_adv.api.cli_args import AdvantageShaping, check_gvpo_values
from areal_adv.api.stage_registry import STAGE_REGISTRY, register_stage
from areal_adv.trainer.ppo import gae as gae_kernels
from areal_adv.trainer.ppo.stage_types import (
    GAELambdaSpec,
    OutcomeResult,
    OutcomeRewardInputs,
    ProcessAdvantageInputs,
    TemporalInputs,
    TemporalResult,
)

__all__ = [
    "BUILTIN_ESTIMATORS",
    "BUILTIN_OUTCOME",
    "BUILTIN_PROCESS",
    "GAELambdaSpec",
    "ProcessAdvantageInputs",
    "TemporalInputs",
    "TemporalResult",
    "additive",
    "check_gvpo_params",
    "gvpo",
    "identity_outcome",
    "process_weighted",
    "require_turn_ids",
    "token_gae",
    "turn_gae",
]


# ---------------------------------------------------------------------------
# Outcome reward shaping
# ---------------------------------------------------------------------------


@register_stage("outcome_reward_shaping", "identity")
def identity_outcome(inputs: OutcomeRewardInputs) -> OutcomeResult:
    """Keep the (length-penalised) task reward as is, integer dtype included."""
    return OutcomeResult(rewards=inputs.data["rewards"])


# ---------------------------------------------------------------------------
# Temporal estimators
# ---------------------------------------------------------------------------


@register_stage("estimator", "token_gae")
def token_gae(inputs: TemporalInputs) -> TemporalResult:
    """Token-level GAE: A_t = δ_t + γλ·A_{t+1}, δ_t = r_t + γ·V_{t+1} − V_t, r_t = KL + outcome + process.

    GAE (arXiv:1506.02438; verl `compute_gae_advantage_return`) over every generated
    token, by `areal_adv.trainer.ppo.gae.token_gae`; the KL reward enters the recursion.
    """
    rewards = inputs.kl_rewards + inputs.outcome_rewards
    rewards += inputs.process_rewards  # in place: `rewards` is ours
    advantages, returns = gae_kernels.token_gae_tensors(
        rewards,
        inputs.values,
        inputs.loss_mask,
        discount=inputs.discount,
        lam=inputs.compute_lambda("token"),
        bootstrap=inputs.truncated_bootstrap(),
    )
    return TemporalResult(advantages=advantages, returns=returns, total_rewards=rewards)


def require_turn_ids(turn_ids: torch.Tensor | None) -> None:
    """Turn GAE cannot run without turn ids: say what the rollout must provide."""
    if turn_ids is None:
        raise ValueError(
            "estimator 'turn_gae': the batch has no 'turn_ids'; turn-level GAE needs the rollout to "
            "provide turn_ids [B, T] (turn index on generated tokens, -1 elsewhere)"
        )


@register_stage("estimator", "turn_gae")
def turn_gae(inputs: TemporalInputs) -> TemporalResult:
    """Turn-level GAE: A_k = δ_k + γλ·A_{k+1}, δ_k = R_k + γ·V_{k+1} − V_k, R_k the turn's reward sum.

    GAE (arXiv:1506.02438) with a generated turn as the step, by
    `areal_adv.trainer.ppo.gae.turn_gae`. Token KL is a local actor penalty: it is added to the advantages after the
    recursion and never reaches the critic returns.
    """
    require_turn_ids(inputs.turn_ids)
    rewards = inputs.outcome_rewards + inputs.process_rewards
    advantages, returns = gae_kernels.turn_gae_tensors(
        rewards,
        inputs.values,
        inputs.loss_mask,
        inputs.turn_ids,
        discount=inputs.discount,
        lam=inputs.compute_lambda("turn"),
        bootstrap=inputs.truncated_bootstrap(),
    )
    return TemporalResult(
        advantages=advantages + inputs.kl_rewards,
        returns=returns,
        total_rewards=rewards + inputs.kl_rewards,
    )


# ---------------------------------------------------------------------------
# Process advantage shaping
# ---------------------------------------------------------------------------


@register_stage("process_adv_shaping", "additive")
def additive(inputs: ProcessAdvantageInputs) -> torch.Tensor:
    """A' = A + p_t, p_t the token's process reward (`token_rewards`); AReaL's default PRM shaping.

    Source: AReaL's process-reward shaping mode `additive` (`rollout.prm.advantage_shaping.mode`).
    """
    if inputs.token_rewards is None:
        return inputs.advantages
    return inputs.advantages + inputs.token_rewards


def check_gvpo_params(negative_scale: float, zero_penalty: float, zero_eps: float, *, where: str = "gvpo") -> None:
    values = {"negative_scale": negative_scale, "zero_penalty": zero_penalty, "zero_eps": zero_eps}
    check_gvpo_values(values, f"{where}: {{name}}")


@register_stage("process_adv_shaping", "gvpo")
def gvpo(
    inputs: ProcessAdvantageInputs,
    *,
    negative_scale: float = AdvantageShaping.negative_scale,
    zero_penalty: float = AdvantageShaping.zero_penalty,
    zero_eps: float = AdvantageShaping.zero_eps,
) -> torch.Tensor:
    """On failed steps (p_t < 0): A' = A·(1 + negative_scale) if A < −zero_eps, −zero_penalty if |A| ≤ zero_eps, else 0.

    Sharpens outcome advantages where the process signal marks a failed step; every
    other token keeps its advantage. Source: AReaL's process-reward shaping mode
    `gvpo` (`rollout.prm.advantage_shaping`, defaults 0.2 / 0.4 / 1e-6); the docs cite
    no paper for it.
    """
    check_gvpo_params(negative_scale, zero_penalty, zero_eps)
    advantages = inputs.advantages
    if inputs.token_rewards is None:
        return advantages
    failed = (inputs.token_rewards < 0) & inputs.loss_mask.bool()
    shaped = torch.where(failed & (advantages < -zero_eps), advantages * (1.0 + negative_scale), advantages)
    shaped = torch.where(failed & (advantages.abs() <= zero_eps), torch.full_like(shaped, -zero_penalty), shaped)
    return shaped.masked_fill(failed & (advantages > zero_eps), 0.0)


@register_stage("process_adv_shaping", "process_weighted")
def process_weighted(inputs: ProcessAdvantageInputs) -> torch.Tensor:
    """A' = A·p if A ≥ 0, else p if p > 0, else A, with process rewards p in [0, 1].

    Weights outcome advantages by the process rewards: a negative advantage becomes p
    when the step was still judged useful (p > 0). Source: AReaL's process-reward
    shaping mode `process_weighted` (`rollout.prm.advantage_shaping.mode`).
    """
    advantages = inputs.advantages
    p = inputs.token_rewards
    if p is None:
        return advantages
    active = inputs.loss_mask.bool()
    out_of_range = active & ~((p >= 0) & (p <= 1))
    if bool(out_of_range.any()):
        row, col = (int(i) for i in out_of_range.nonzero()[0])
        raise ValueError(
            "process_adv_shaping 'process_weighted': token_rewards must lie in [0, 1] on generated tokens; "
            f"found {float(p[row, col])!r} at row {row}, aligned position {col}"
        )
    shaped = torch.where(advantages >= 0, advantages * p, torch.where(p > 0, p, advantages))
    return torch.where(active, shaped, advantages)


#: This module's built-ins by stage, read back from the registry (which holds every built-in).
BUILTIN_OUTCOME = STAGE_REGISTRY.defined_in("outcome_reward_shaping", __name__)
BUILTIN_ESTIMATORS = STAGE_REGISTRY.defined_in("estimator", __name__)
BUILTIN_PROCESS = STAGE_REGISTRY.defined_in("process_adv_shaping", __name__)
