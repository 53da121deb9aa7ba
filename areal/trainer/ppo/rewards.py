"""Outcome-reward arithmetic of the default pipeline: length penalty, scaling, normalisation.

Pure tensor functions; nothing here loops over rows or tokens.
"""

from __future__ import annotations

import torch

from areal.utils.data import Normalization, TrajBatchMeta


def overlong_penalty(
    rewards: torch.Tensor,
    loss_mask: torch.Tensor,
    *,
    max_new_tokens: int,
    overlong_tokens: int,
    overlong_penalty_factor: float,
) -> torch.Tensor:
    """DAPO-style soft length penalty, applied to a new tensor (never in place)."""
    lengths = loss_mask.sum(dim=-1)
    exceed = lengths - (max_new_tokens - overlong_tokens)
    penalty = torch.clamp(-exceed / overlong_tokens * overlong_penalty_factor, max=0)
    return rewards + penalty


def scale_scores(rewards: torch.Tensor, *, bias: float, scaling: float, clip: float) -> torch.Tensor:
    """clip((r + bias) * scaling, ±clip)."""
    return torch.clip((rewards + bias) * scaling, min=-clip, max=clip)


def logical_layout(meta: TrajBatchMeta, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per logical rollout: first row, row->rollout index, explicit reference and whether it is given.

    Rows without a `RolloutGroup` are their own logical rollout.
    """
    groups = meta.rollout_groups or (None,) * meta.n_trajs
    counts: list[torch.Tensor] = []
    refs: list[torch.Tensor] = []
    for group, rows in zip(groups, meta.traj_group_sizes):
        if group is None:
            counts.append(torch.ones(rows, dtype=torch.long))
            refs.append(torch.full((rows,), float("nan"), dtype=torch.float64))
        else:
            counts.append(torch.as_tensor(group.row_counts, dtype=torch.long))
            if group.rewards is None:
                refs.append(torch.full((len(group.row_counts),), float("nan"), dtype=torch.float64))
            else:
                refs.append(group.rewards.detach().to("cpu", torch.float64))
    repeats = torch.cat(counts).to(device)
    reference = torch.cat(refs).to(device)
    starts = torch.cumsum(repeats, 0) - repeats
    member = torch.repeat_interleave(torch.arange(repeats.numel(), device=device), repeats)
    return starts, member, reference, ~torch.isnan(reference)


def normalize_rollout_rewards(
    row_rewards: torch.Tensor,
    norm: Normalization,
    meta: TrajBatchMeta,
    *,
    bias: float,
    scaling: float,
    clip: float,
    unpenalized_rewards: torch.Tensor | None = None,
    shaped_references: torch.Tensor | None = None,
    reduce_group=None,
) -> torch.Tensor:
    """Normalise row scores against one reference per logical rollout.

    The statistics come from the references (one per logical rollout, grouped by
    `meta.logical_group_sizes`); every row is then mapped through its rollout's
    baseline and scale. Explicit references bypass the row length penalty; a
    rollout without one takes its rows' common value, and rows that differ are
    an error. `shaped_references` (from a custom outcome stage) replace all
    references.
    """
    scores = scale_scores(row_rewards, bias=bias, scaling=scaling, clip=clip)
    if norm.mean_level is None and norm.std_level is None:
        return scores.float()
    device = row_rewards.device
    starts, member, reference, supplied = logical_layout(meta, device)
    if shaped_references is not None:
        reference = shaped_references.to(device, torch.float64)
        supplied = torch.ones_like(supplied)
    first = row_rewards[starts]
    derived = ~supplied[member]
    differs = derived & (row_rewards != first[member])
    if unpenalized_rewards is not None:
        differs |= derived & (unpenalized_rewards != unpenalized_rewards[starts][member])
    if bool(differs.any()):
        row = int(differs.nonzero()[0, 0])
        rollout = int(member[row])
        raise ValueError(
            "reward normalisation over split rollouts: rows of logical rollout "
            f"{rollout} have different rewards (row {row}: {float(row_rewards[row])!r} vs first row "
            f"{int(starts[rollout])}: {float(first[rollout])!r}); supply an explicit reference per logical "
            "rollout (RolloutGroup.rewards) or, from a custom outcome stage, OutcomeResult.normalization_rewards"
        )
    reference = torch.where(supplied, reference, first.to(torch.float64))
    reference = scale_scores(reference, bias=bias, scaling=scaling, clip=clip)
    mean, scale = norm.statistics(reference, group_sizes=list(meta.logical_group_sizes), reduce_group=reduce_group)
    mean = mean.expand_as(reference)
    scale = scale.expand_as(reference)
    if norm.std_level is not None:
        scale = torch.where(scale <= 2 * norm.eps, torch.ones_like(scale), scale)
    return ((scores.to(torch.float64) - mean[member]) / scale[member]).float()
