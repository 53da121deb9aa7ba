"""Multi-dimensional rewards: `rewards` [B, K] with named components, and what stage 2 sees.

A rollout scored by several reward functions may hand the pipeline every
component: `rewards` [B, K] plus `meta.reward_keys` (K names) and optionally
`meta.reward_weights` (K weights, default 1), which `concat_batch` takes from the
trajectory groups' `reward_keys` / `reward_weights` entries. The outcome reward is
the weighted sum sum_k w_k r_k, so:

* the identity stage, the other scalar built-ins (OPO, GPG, pass@k, ReMax, KRPO,
  SPO), reward scaling and normalisation see exactly the [B] reward a rollout
  that summed the components itself would have given: today's behaviour;
* component-aware built-ins (`gdpo`) and every custom outcome stage see all K
  components (`inputs.data["rewards"]` [B, K], names in `inputs.meta.reward_keys`)
  and return one reward per row; `weighted_sum(inputs)` is the identity's reduction;
* the length penalty (`actor.overlong_reward_penalty`) is one more component,
  `overlong_penalty` with weight 1, so the weighted sum is the penalised reward
  and GDPO normalises the penalty like any other component.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import torch

from areal_adv.api.cli_args import PPOActorConfig
from areal_adv.trainer.ppo.checks.batch_checks import BatchError
from areal_adv.trainer.ppo.checks.contracts import ResolvedStage, StageContractError
from areal_adv.trainer.ppo.rewards.scores import apply_length_penalty, overlong_penalty
from areal_adv.trainer.ppo.stage_types import OutcomeResult, OutcomeRewardInputs
from areal_adv.utils.data import TrajBatchMeta

__all__ = [
    "COMPONENT_STAGES",
    "LENGTH_PENALTY_KEY",
    "component_weights",
    "outcome_stage_inputs",
    "check_reduced",
    "weighted_sum",
]

#: The component the length penalty becomes when rewards have several.
LENGTH_PENALTY_KEY = "overlong_penalty"
#: Built-in outcome stages that read the components themselves (custom stages always do).
COMPONENT_STAGES = frozenset({"gdpo"})


def _check_components(rewards: torch.Tensor, meta: TrajBatchMeta) -> None:
    keys = meta.reward_keys
    if keys is None:
        raise BatchError(
            f"rewards: shape {tuple(rewards.shape)} holds {rewards.shape[1]} reward components per row, but "
            "meta.reward_keys is missing; name the components (trajectory groups' 'reward_keys' entry, "
            "collected by concat_batch)"
        )
    if len(keys) != rewards.shape[1]:
        raise BatchError(
            f"rewards: shape {tuple(rewards.shape)} has {rewards.shape[1]} components, but meta.reward_keys names "
            f"{len(keys)}: {list(keys)}"
        )
    if not rewards.is_floating_point():
        raise BatchError(f"rewards: [B, K] reward components must be floating, got {rewards.dtype}")


def component_weights(meta: TrajBatchMeta, device: torch.device) -> torch.Tensor:
    """float64 [K]: `meta.reward_weights`, or ones."""
    keys = meta.reward_keys or ()
    weights = meta.reward_weights if meta.reward_weights is not None else (1.0,) * len(keys)
    return torch.tensor(weights, dtype=torch.float64, device=device)


def weighted_sum(inputs: OutcomeRewardInputs) -> torch.Tensor:
    """float32 [B]: sum_k w_k r_k of an [B, K] reward (a [B] reward comes back as it is)."""
    rewards = inputs.data["rewards"]
    if rewards.ndim == 1:
        return rewards
    return (rewards.to(torch.float64) @ component_weights(inputs.meta, rewards.device)).to(torch.float32)


def _with_penalty(
    data: Mapping[str, Any], config: PPOActorConfig, meta: TrajBatchMeta, values: torch.Tensor
) -> tuple[torch.Tensor, TrajBatchMeta]:
    """The components plus the length penalty as one more, weight-1 component."""
    if LENGTH_PENALTY_KEY in meta.reward_keys:
        raise BatchError(
            f"rewards: meta.reward_keys already has a component named {LENGTH_PENALTY_KEY!r}, the name "
            "the length penalty (actor.overlong_reward_penalty) takes; rename that reward"
        )
    penalty = overlong_penalty(
        torch.zeros(values.shape[0], dtype=torch.float64, device=values.device),
        data["loss_mask"],
        max_new_tokens=config.max_new_tokens,
        overlong_tokens=config.overlong_tokens,
        overlong_penalty_factor=config.overlong_penalty_factor,
    )
    weights = tuple(component_weights(meta, values.device).tolist()) + (1.0,)
    meta = dataclasses.replace(meta, reward_keys=(*meta.reward_keys, LENGTH_PENALTY_KEY), reward_weights=weights)
    return torch.cat([values, penalty.to(values.dtype)[:, None]], dim=1), meta


def outcome_stage_inputs(
    data: Mapping[str, Any], config: PPOActorConfig, meta: TrajBatchMeta, stage: ResolvedStage
) -> tuple[OutcomeRewardInputs, torch.Tensor | None]:
    """Steps 1-2's hand-over: (the outcome stage's inputs, the [B] reward before the penalty or None).

    [B] rewards: the length-penalised reward, as always. [B, K] rewards: every
    component (penalty included) for component-aware and custom stages, their
    weighted sum for the other built-ins.
    """
    rewards = data["rewards"]
    if rewards.ndim == 1:
        penalised, unpenalized = apply_length_penalty(data, config)
        return OutcomeRewardInputs({**data, "rewards": penalised}, config, meta), unpenalized
    _check_components(rewards, meta)
    values = rewards.to(torch.float32)
    unpenalized = None
    if config.overlong_reward_penalty:
        unpenalized = weighted_sum(OutcomeRewardInputs(data, config, meta))
        values, meta = _with_penalty(data, config, meta, values)
    inputs = OutcomeRewardInputs({**data, "rewards": values}, config, meta)
    if stage.custom or stage.implementation in COMPONENT_STAGES:
        return inputs, unpenalized
    return OutcomeRewardInputs({**data, "rewards": weighted_sum(inputs)}, config, meta), unpenalized


def check_reduced(stage: ResolvedStage, result: Any, inputs: OutcomeRewardInputs) -> None:
    """A custom stage given [B, K] components must return one reward per row; say how."""
    rewards = getattr(result, "rewards", None) if isinstance(result, OutcomeResult) else None
    components = inputs.data["rewards"]
    if components.ndim == 2 and torch.is_tensor(rewards) and rewards.ndim == 2:
        raise StageContractError(
            stage.stage,
            stage.implementation,
            f"rewards: returned shape {tuple(rewards.shape)}; the batch has {components.shape[1]} reward components "
            f"per row ({list(inputs.meta.reward_keys or ())}) and the stage must reduce them to one reward per row "
            "(shape (B,)), e.g. with areal_adv.trainer.ppo.rewards.components.weighted_sum(inputs)",
        )
