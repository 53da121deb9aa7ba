"""GDPO (arXiv 2601.05242): normalise each reward component within its group, then sum.

GRPO on a summed multi-reward collapses distinct reward combinations onto the
same advantage; GDPO normalises every component separately inside the prompt
group, `A_k = (r_k - mean_g r_k) / (std_g r_k + eps)`, and sums them with weights,
`A = sum_k w_k A_k`. The preset then whitens A over the batch's generated tokens
(`adv_norm`), which is verl's `compute_gdpo_outcome_advantage` step 3.

The stage reads the [B, K] components and `meta.reward_keys` (see
`reward_components`); a [B] reward is one component (GDPO = GRPO then). Groups
are logical rollouts: the rows of a split rollout must carry the same component
values (their common value is the rollout's sample), and each row gets its
rollout's value.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from areal_adv.api.config_checks import is_number
from areal_adv.api.stage_registry import register_stage
from areal_adv.trainer.ppo.estimators.peer_algorithms import logical_rollouts
from areal_adv.trainer.ppo.rewards.components import component_weights
from areal_adv.trainer.ppo.rewards.scores import logical_layout
from areal_adv.trainer.ppo.stage_types import OutcomeResult, OutcomeRewardInputs

__all__ = ["gdpo"]

_WHERE = "outcome_reward_shaping 'gdpo'"


def _components(inputs: OutcomeRewardInputs) -> tuple[torch.Tensor, tuple[str, ...], torch.Tensor]:
    """(values [B, K] float64, names, default weights [K])."""
    rewards = inputs.data["rewards"]
    if rewards.ndim == 1:
        return (
            rewards.to(torch.float64)[:, None],
            ("reward",),
            torch.ones(1, dtype=torch.float64, device=rewards.device),
        )
    return rewards.to(torch.float64), tuple(inputs.meta.reward_keys), component_weights(inputs.meta, rewards.device)


def _select(names: tuple[str, ...], defaults: torch.Tensor, keys: Any, weights: Any) -> tuple[list[int], torch.Tensor]:
    """Column indices of the chosen components and their weights (kwargs checked here, naming the stage)."""
    if keys is None:
        chosen = list(names)
    elif isinstance(keys, Sequence) and not isinstance(keys, str) and keys and all(isinstance(k, str) for k in keys):
        unknown = [k for k in keys if k not in names]
        if unknown or len(set(keys)) != len(keys):
            raise ValueError(
                f"{_WHERE}: keys {list(keys)} must be distinct names among the batch's reward "
                f"components {list(names)} (unknown: {unknown})"
            )
        chosen = list(keys)
    else:
        raise ValueError(f"{_WHERE}: keys must be null or a non-empty list of reward component names, got {keys!r}")
    columns = [names.index(k) for k in chosen]
    if weights is None:
        return columns, defaults[columns]
    if isinstance(weights, Mapping):
        unknown = sorted(set(weights) - set(chosen))
        if unknown:
            raise ValueError(f"{_WHERE}: weights name {unknown}, which are not among the chosen components {chosen}")
        values = [weights.get(k, float(defaults[names.index(k)])) for k in chosen]
    elif isinstance(weights, Sequence) and not isinstance(weights, str) and len(weights) == len(chosen):
        values = list(weights)
    else:
        raise ValueError(
            f"{_WHERE}: weights must be a mapping name -> weight or a list of {len(chosen)} numbers "
            f"(one per component {chosen}), got {weights!r}"
        )
    for k, w in zip(chosen, values):
        if not is_number(w):
            raise ValueError(f"{_WHERE}: the weight of {k!r} must be a finite number, got {w!r}")
    return columns, torch.tensor(values, dtype=torch.float64, device=defaults.device)


def _rollout_values(inputs: OutcomeRewardInputs, values: torch.Tensor, names: Sequence[str]) -> torch.Tensor:
    """[N, K]: one value per logical rollout and component (rows of a rollout must agree)."""
    meta = inputs.meta
    if meta.rollout_groups is None:
        return values
    if values.shape[1] == 1 and inputs.data["rewards"].ndim == 1:
        return logical_rollouts(inputs, "gdpo").rewards[:, None]  # explicit references apply to a [B] reward
    starts, member, _, _ = logical_layout(meta, values.device)
    first = values[starts]
    differs = values != first[member]
    if bool(differs.any()):
        row, column = (int(i) for i in differs.nonzero()[0])
        rollout = int(member[row])
        raise ValueError(
            f"{_WHERE}: rows of logical rollout {rollout} differ in reward component {names[column]!r} (row {row}: "
            f"{float(values[row, column])!r} vs row {int(starts[rollout])}: {float(first[rollout, column])!r}); "
            "each component is normalised over logical rollouts, so a split rollout's rows must share its values"
        )
    return first


def _group_stats(x: torch.Tensor, group: torch.Tensor, sizes: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per group and column: mean and unbiased std ([G, K]); std 1 where a group has one member."""
    n_groups = sizes.shape[0]
    total = torch.zeros(n_groups, x.shape[1], dtype=x.dtype, device=x.device).index_add_(0, group, x)
    mean = total / sizes[:, None]
    squares = torch.zeros_like(total).index_add_(0, group, (x - mean[group]) ** 2)
    std = torch.sqrt(squares / torch.clamp(sizes - 1, min=1)[:, None])
    return mean, torch.where(sizes[:, None] > 1, std, torch.ones_like(std))


@register_stage("outcome_reward_shaping", "gdpo")
def gdpo(
    inputs: OutcomeRewardInputs,
    *,
    keys: list[str] | None = None,
    weights: list[float] | dict[str, float] | None = None,
    eps: float = 1e-6,
    norm_by_std: bool = True,
    allow_singletons: bool = False,
) -> OutcomeResult:
    """GDPO's decoupled group normalisation: sum_k w_k (r_k - mean_g r_k) / (std_g r_k + eps).

    GDPO (arXiv:2601.05242); reference code: verl 0.9.1
    `verl/trainer/ppo/core_algos.py:compute_gdpo_outcome_advantage`.

    `keys` picks components (default: all of `meta.reward_keys`); `weights` is a
    list aligned with them or a mapping name -> weight (default:
    `meta.reward_weights`, i.e. the reward functions' own weights, else 1);
    `norm_by_std: false` only centres (verl's `norm_adv_by_std_in_grpo`). Std is
    unbiased. A prompt group with one logical rollout has no group statistics:
    an error, or 0 with `allow_singletons: true` (the project's singleton rule).
    """
    if not is_number(eps, low=0.0):
        raise ValueError(f"{_WHERE}: eps must be a finite number >= 0, got {eps!r}")
    for name, flag in (("norm_by_std", norm_by_std), ("allow_singletons", allow_singletons)):
        if not isinstance(flag, bool):
            raise ValueError(f"{_WHERE}: {name} must be true or false, got {flag!r}")
    values, names, defaults = _components(inputs)
    columns, w = _select(names, defaults, keys, weights)
    meta = inputs.meta
    device = values.device
    sizes = torch.as_tensor(meta.logical_group_sizes, dtype=torch.float64, device=device)
    if not allow_singletons and bool((sizes < 2).any()):
        group = int((sizes < 2).nonzero()[0, 0])
        raise ValueError(
            f"{_WHERE}: prompt group {group} has 1 logical rollout; GDPO normalises each reward component within "
            "its prompt group and needs at least 2 samples per prompt (rollout.n_samples >= 2), or pass "
            "allow_singletons: true to give such groups 0"
        )
    values = values[:, columns]
    rollout_values = _rollout_values(inputs, values, [names[c] for c in columns])
    rollout_group = meta.logical_group_index(device)
    mean, std = _group_stats(rollout_values, rollout_group, sizes)
    scale = std + eps if norm_by_std else torch.ones_like(std)
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    row_group = meta.row_group_index(device)
    rows = ((values - mean[row_group]) / scale[row_group]) @ w
    rollouts = ((rollout_values - mean[rollout_group]) / scale[rollout_group]) @ w
    references = rollouts.to(torch.float32) if meta.rollout_groups is not None else None
    return OutcomeResult(rewards=rows.to(torch.float32), normalization_rewards=references)
