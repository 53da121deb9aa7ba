"""Steps 1 and 3 of the default pipeline: length penalty, reward scaling and normalisation.

Pure tensor functions on [B] rewards; nothing here loops over rows or tokens.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import torch

from areal_adv.api.cli_args import NormConfig, PPOActorConfig
from areal_adv.trainer.ppo.checks.contracts import ResolvedStage, StageContractError
from areal_adv.trainer.ppo.rewards.running_norm import running_normalise
from areal_adv.trainer.ppo.stage_state import StageState
from areal_adv.trainer.ppo.stage_types import OutcomeResult
from areal_adv.utils.data import Normalization, TrajBatchMeta
from areal_adv.utils.renamed import renamed_attributes


def apply_length_penalty(data: Mapping[str, Any], config: PPOActorConfig) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Step 1: (penalised rewards, the rewards before the penalty or None when it is off)."""
    rewards = data["rewards"]
    if not config.overlong_reward_penalty:
        return rewards, None
    penalised = overlong_penalty(
        rewards,
        data["loss_mask"],
        max_new_tokens=config.max_new_tokens,
        overlong_tokens=config.overlong_tokens,
        overlong_penalty_factor=config.overlong_penalty_factor,
    )
    return penalised, rewards


def overlong_penalty(
    rewards: torch.Tensor,
    loss_mask: torch.Tensor,
    *,
    max_new_tokens: int,
    overlong_tokens: int,
    overlong_penalty_factor: float,
) -> torch.Tensor:
    """r' = r + min(0, −(l − (max_new_tokens − overlong_tokens)) / overlong_tokens · factor).

    l is the row's number of generated tokens and `factor` is `overlong_penalty_factor`:
    DAPO's soft overlong punishment (arXiv:2503.14476); applied to a new tensor (never in place).
    """
    lengths = loss_mask.sum(dim=-1)
    exceed = lengths - (max_new_tokens - overlong_tokens)
    penalty = torch.clamp(-exceed / overlong_tokens * overlong_penalty_factor, max=0)
    return rewards + penalty


def scale_scores(rewards: torch.Tensor, *, bias: float, scaling: float, clip: float) -> torch.Tensor:
    """clip((r + bias) * scaling, ±clip): AReaL's `reward_bias`, `reward_scaling`, `reward_clip`."""
    return torch.clip((rewards + bias) * scaling, min=-clip, max=clip)


def logical_layout(
    meta: TrajBatchMeta, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per logical rollout: first row, row->rollout index, explicit reference and whether it is given.

    Rows without a `RolloutGroup` are their own logical rollout.
    """
    groups = meta.rollout_groups or (None,) * meta.n_trajs
    counts: list[torch.Tensor] = []
    refs: list[torch.Tensor] = []
    given: list[torch.Tensor] = []  # an explicit flag, not NaN as "absent": a NaN reference is an error
    for group, rows in zip(groups, meta.traj_group_sizes):
        n_logical = rows if group is None else group.n_logical
        counts.append(
            torch.ones(rows, dtype=torch.long) if group is None else torch.as_tensor(group.row_counts, dtype=torch.long)
        )
        if group is None or group.rewards is None:
            refs.append(torch.zeros(n_logical, dtype=torch.float64))
            given.append(torch.zeros(n_logical, dtype=torch.bool))
        else:
            refs.append(group.rewards.detach().to("cpu", torch.float64))
            given.append(torch.ones(n_logical, dtype=torch.bool))
    repeats = torch.cat(counts).to(device)
    reference = torch.cat(refs).to(device)
    starts = torch.cumsum(repeats, 0) - repeats
    member = torch.repeat_interleave(torch.arange(repeats.numel(), device=device), repeats)
    return starts, member, reference, torch.cat(given).to(device)


def normalise_rollout_rewards(
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
    """Row score s → (s − mean) / (std + eps), mean and std over one reference per logical rollout.

    AReaL's `Normalization` applied to split rollouts: the statistics come from the
    references (one per logical rollout, grouped by `meta.logical_group_sizes`);
    every row is then mapped through its rollout's baseline and scale. Explicit
    references bypass the row length penalty; a rollout without one takes its
    rows' common value, and rows that differ are an error. `shaped_references`
    (from a custom outcome stage) replace all references.
    """
    if norm.mean_level is None and norm.std_level is None:
        return scale_scores(row_rewards, bias=bias, scaling=scaling, clip=clip).float()
    # In float64, as the references: a row without an explicit reference is its rollout's reference, and a
    # float32 rounding of one against the other would be divided by the group's std (1.6e-4 for a
    # group of two rewards 7e-4 apart, measured).
    scores = scale_scores(row_rewards.to(torch.float64), bias=bias, scaling=scaling, clip=clip)
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
    return ((scores - mean[member]) / scale[member]).float()


class AdvantageWarning(UserWarning):
    """A valid configuration or batch whose result is probably not what was meant."""


SINGLETON_CENTERING = (
    "actor.reward_norm.mean_level='group': some prompts have a single (logical) rollout, and centering a "
    "group of one on its own mean sets its score to 0, erasing its task reward; sample several rollouts per "
    "prompt (rollout.n_samples > 1) or use mean_level 'batch'"
)


def warn_singleton_centering(norm: NormConfig, meta: TrajBatchMeta) -> None:
    """AReaL's warning: group-level centering of a one-member group leaves nothing to learn from."""
    if norm.mean_level == "group" and 1 in meta.logical_group_sizes:
        warnings.warn(SINGLETON_CENTERING, AdvantageWarning, stacklevel=2)


def _has_explicit_references(meta: TrajBatchMeta) -> bool:
    return any(g is not None and g.rewards is not None for g in (meta.rollout_groups or ()))


def _check_shaped_references(outcome: OutcomeResult, stage: ResolvedStage, meta: TrajBatchMeta) -> None:
    """Shaped references need full metadata; explicit references need shaped ones from a custom stage."""
    shaped_refs = outcome.normalization_rewards
    if shaped_refs is not None and not meta.complete:
        raise StageContractError(
            stage.stage,
            stage.implementation,
            "returned normalization_rewards, but the batch has no complete concat_batch metadata; shaped "
            "references need the TrajBatchMeta produced by concat_batch",
        )
    if stage.custom and shaped_refs is None and meta.complete and _has_explicit_references(meta):
        raise StageContractError(
            stage.stage,
            stage.implementation,
            "the batch has explicit per-logical-rollout reference rewards (meta.rollout_groups[*].rewards) and "
            "reward_norm is on, so a custom outcome stage must return OutcomeResult.normalization_rewards: one "
            f"transformed reference per logical rollout ({sum(meta.logical_group_sizes)} here), before bias, "
            "scaling and clipping",
        )


def normalise_scores(
    outcome: OutcomeResult,
    unpenalized: torch.Tensor | None,
    stage: ResolvedStage,
    config: PPOActorConfig,
    meta: TrajBatchMeta,
    running: StageState | None = None,
) -> torch.Tensor:
    """Step 3: r' = clip((r + bias)·scaling, ±clip), then (r' − mean) / (std + eps) per `reward_norm`.

    AReaL's reward scaling and `Normalization`; statistics per logical rollout when split.

    `running`: the state of `reward_norm` at level running (its statistics see one
    value per logical rollout: the scaled score of the rollout's first row).
    """
    scale_kw = dict(bias=config.reward_bias, scaling=config.reward_scaling, clip=config.reward_clip)
    if config.reward_norm is None:
        return scale_scores(outcome.rewards, **scale_kw)
    if running is not None:
        scores = scale_scores(outcome.rewards, **scale_kw)
        observed = None
        if meta.complete and meta.rollout_groups is not None:
            rows = meta.logical_row_index(scores.device)
            first = torch.full((meta.n_logical,), scores.shape[0], dtype=torch.long, device=scores.device)
            first = first.scatter_reduce(0, rows, torch.arange(scores.shape[0], device=scores.device), reduce="amin")
            observed = scores[first]
        return running_normalise(scores, None, config.reward_norm, running, observed)
    warn_singleton_centering(config.reward_norm, meta)
    norm = Normalization(config.reward_norm)
    _check_shaped_references(outcome, stage, meta)
    shaped_refs = outcome.normalization_rewards
    if meta.complete and (meta.rollout_groups is not None or shaped_refs is not None):
        return normalise_rollout_rewards(
            outcome.rewards, norm, meta, **scale_kw, unpenalized_rewards=unpenalized, shaped_references=shaped_refs
        )
    group_sizes = list(meta.traj_group_sizes) if meta.complete else None
    return norm(scale_scores(outcome.rewards, **scale_kw), group_sizes=group_sizes)


#: Former names, still importable (with a DeprecationWarning) for code written against them.
__getattr__ = renamed_attributes(__name__, {"normalize_rollout_rewards": "normalise_rollout_rewards"})
