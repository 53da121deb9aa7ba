"""PPO losses (pure functions): clipped policy loss and clipped value loss.

Aggregation is AReaL's: a token mean over the minibatch's active tokens (the
aligned loss mask), so every generated token weighs the same.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from areal_adv.api.cli_args import PPOActorConfig


@dataclass
class PolicyLossStats:
    """Detached diagnostics of one policy-loss evaluation (token means over active tokens)."""

    clip_frac: float
    dual_clip_frac: float
    approx_kl: float
    importance_weight: float
    behav_mask_frac: float


def policy_loss_settings(config: PPOActorConfig) -> dict[str, Any]:
    """`ppo_policy_loss`'s settings from the actor config: clip range, dual clip, behaviour cap, decoupled form.

    The update and the diagnostics' gradient probe both read them here, so the gradients
    the probe measures are of the loss the update minimises.
    """
    return {
        "eps_clip": config.eps_clip,
        "eps_clip_higher": config.eps_clip_higher,
        "c_clip": config.c_clip,
        "behav_imp_weight_cap": config.behav_imp_weight_cap,
        "decoupled": config.use_decoupled_loss,
    }


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean over active positions; 0 when there are none (an empty minibatch)."""
    mask = mask.to(x.dtype)
    return (x * mask).sum() / mask.sum().clamp(min=1.0)


def ppo_policy_loss(
    logprobs: torch.Tensor,
    proximal_logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    loss_mask: torch.Tensor,
    *,
    eps_clip: float,
    eps_clip_higher: float | None = None,
    c_clip: float | None = None,
    behav_imp_weight_cap: float | None = None,
    decoupled: bool = False,
) -> tuple[torch.Tensor, PolicyLossStats]:
    """Clipped surrogate with optional dual clip and decoupled (behaviour-weighted) form.

    The ratio is taken against the proximal policy. In the decoupled form each
    token is additionally weighted by the behaviour importance weight
    `exp(proximal - old)`, and tokens whose weight exceeds `behav_imp_weight_cap`
    are dropped. `c_clip` caps the loss of negative-advantage tokens at
    `-c_clip * A` (dual clip).
    """
    mask = loss_mask.bool()
    ratio = torch.exp(torch.where(mask, logprobs - proximal_logprobs, torch.zeros_like(logprobs)))
    high = eps_clip if eps_clip_higher is None else eps_clip_higher
    clipped = ratio.clamp(1.0 - eps_clip, 1.0 + high)
    loss_unclipped = -advantages * ratio
    loss_clipped = -advantages * clipped
    pg_loss = torch.maximum(loss_unclipped, loss_clipped)
    clip_mask = (loss_unclipped.detach() < loss_clipped.detach()) & mask
    dual_mask = torch.zeros_like(mask)
    if c_clip is not None:
        dual_bound = -c_clip * advantages
        dual_mask = (advantages < 0) & (pg_loss.detach() > dual_bound.detach()) & mask
        pg_loss = torch.where(advantages < 0, torch.minimum(pg_loss, dual_bound), pg_loss)
    behav_keep = mask
    weight = torch.ones_like(ratio)
    if decoupled:
        weight = torch.exp(torch.where(mask, proximal_logprobs - old_logprobs, torch.zeros_like(logprobs))).detach()
        if behav_imp_weight_cap is not None:
            behav_keep = mask & (weight <= behav_imp_weight_cap)
            weight = torch.where(behav_keep, weight, torch.zeros_like(weight))
        pg_loss = pg_loss * weight
    loss = masked_mean(pg_loss, mask)
    n = mask.sum().clamp(min=1).float()
    stats = PolicyLossStats(
        clip_frac=float(clip_mask.sum() / n),
        dual_clip_frac=float(dual_mask.sum() / n),
        approx_kl=float(masked_mean((proximal_logprobs - logprobs).detach(), mask)),
        importance_weight=float(masked_mean(weight, mask)),
        behav_mask_frac=float(behav_keep.sum() / n),
    )
    return loss, stats


def clipped_value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    loss_mask: torch.Tensor,
    *,
    value_eps_clip: float,
) -> tuple[torch.Tensor, float]:
    """0.5·max((V−R)², (V_clip−R)²) with V_clip within ±eps of the rollout values; token mean."""
    clipped = old_values + (values - old_values).clamp(-value_eps_clip, value_eps_clip)
    loss_raw = (values - returns) ** 2
    loss_clip = (clipped - returns) ** 2
    loss = 0.5 * masked_mean(torch.maximum(loss_raw, loss_clip), loss_mask)
    clip_frac = float(masked_mean((loss_clip > loss_raw).float(), loss_mask))
    return loss, clip_frac
