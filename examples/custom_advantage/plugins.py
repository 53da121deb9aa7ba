"""Example advantage plugins, one per replaceable stage (see docs/custom-advantage.md).

Referenced from YAML by dotted path, e.g.
`actor.advantage.outcome_reward_shaping.implementation: examples.custom_advantage.plugins.scale_outcome`.
The module must be importable on every actor worker (run from the repository root,
or put it in an installed package).
"""

from __future__ import annotations

import torch

from areal_adv.trainer.ppo.advantage import (
    AdvantageInputs,
    AdvantageResult,
    OutcomeResult,
    OutcomeRewardInputs,
    compute_default_advantages,
)
from areal_adv.trainer.ppo.advantage_algorithms import ProcessAdvantageInputs, TemporalInputs, TemporalResult
from areal_adv.trainer.ppo.gae import compute_gae_lambda, token_gae_tensors


def scale_outcome(inputs: OutcomeRewardInputs, *, factor: float) -> OutcomeResult:
    """A custom outcome stage: multiply every row's outcome reward by `factor`."""
    return OutcomeResult(rewards=inputs.data["rewards"] * factor)


def scale_outcome_with_references(inputs: OutcomeRewardInputs, *, factor: float) -> OutcomeResult:
    """Like `scale_outcome`, but also transforms explicit logical-rollout references.

    Needed when reward normalisation runs over split rollouts that carry explicit
    references (`RolloutGroup.rewards`): the same transform is applied to each
    reference, before bias, scaling and clipping.
    """
    rewards = inputs.data["rewards"] * factor
    groups = inputs.meta.rollout_groups
    if groups is None:
        return OutcomeResult(rewards=rewards)
    refs = []
    row = 0
    for group, n_rows in zip(groups, inputs.meta.traj_group_sizes):
        counts = group.row_counts if group is not None else (1,) * n_rows
        if group is not None and group.rewards is not None:
            refs.append(group.rewards.to(rewards.device, torch.float32) * factor)
        else:  # no explicit reference: the first row of each logical rollout
            starts = torch.tensor((0, *counts[:-1]), device=rewards.device).cumsum(0) + row
            refs.append(rewards[starts].float())
        row += n_rows
    return OutcomeResult(rewards=rewards, normalization_rewards=torch.cat(refs))


def token_gae_turn_lambda(inputs: TemporalInputs) -> TemporalResult:
    """Token-level GAE whose (callable) lambda is resolved in *turn* units.

    Shows `compute_gae_lambda`: a custom estimator chooses the unit in which a
    length-adaptive lambda sees trajectory lengths.
    """
    lam = compute_gae_lambda(
        inputs.gae_lambda,
        loss_mask=inputs.loss_mask,
        turn_ids=inputs.turn_ids,
        timestep_unit="turn" if inputs.turn_ids is not None else "token",
        gae_lambda_kwargs=inputs.gae_lambda_kwargs,
        source=inputs.gae_lambda_source,
    )
    rewards = inputs.kl_rewards + inputs.outcome_rewards + inputs.process_rewards
    advantages, returns = token_gae_tensors(
        rewards,
        inputs.values,
        inputs.loss_mask,
        discount=inputs.discount,
        lam=lam,
        bootstrap=inputs.truncated_bootstrap(),
    )
    return TemporalResult(advantages=advantages, returns=returns, total_rewards=rewards)


def clipped_additive(inputs: ProcessAdvantageInputs, *, weight: float = 0.5, clip: float = 1.0) -> torch.Tensor:
    """A + weight * clip(process reward): a bounded process bonus."""
    if inputs.token_rewards is None:
        return inputs.advantages
    return inputs.advantages + weight * inputs.token_rewards.clamp(-clip, clip) * inputs.loss_mask


def default_replica(inputs: AdvantageInputs) -> AdvantageResult:
    """A full replacement that reproduces the default pipeline exactly.

    Start here to post-process the default result (the replacement owns every
    output field, so anything it changes is what the PPO update sees).
    """
    return compute_default_advantages(inputs)


def sequence_reinforce(inputs: AdvantageInputs) -> AdvantageResult:
    """A self-contained full replacement: REINFORCE with a per-prompt mean baseline.

    Owns alignment: the loss mask and log-probs are rolled to next-token
    prediction here, and the sequence advantage is broadcast to generated tokens.
    """
    data, meta = inputs.data, inputs.meta
    rewards = data["rewards"].to(torch.float32)
    group = meta.row_group_index().to(rewards.device)
    sums = torch.zeros(meta.n_trajs, device=rewards.device).index_add_(0, group, rewards)
    sizes = torch.tensor(meta.traj_group_sizes, device=rewards.device, dtype=torch.float32)
    baseline = (sums / sizes)[group]
    loss_mask = torch.roll(data["loss_mask"].to(torch.float32), shifts=-1, dims=-1)
    logprobs = torch.roll(data["logprobs"], shifts=-1, dims=-1) * loss_mask
    advantages = (rewards - baseline).unsqueeze(-1) * loss_mask
    zeros = torch.zeros_like(advantages)
    return AdvantageResult(
        advantages=advantages,
        returns=advantages.clone(),
        loss_mask=loss_mask,
        logprobs=logprobs,
        rewards=rewards,
        total_rewards=zeros,
        kl_rewards=zeros.clone(),
        extras={"prox_logp": logprobs},
    )
