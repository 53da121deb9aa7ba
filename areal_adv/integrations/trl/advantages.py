"""Pipeline advantages for a TRL GRPO generation batch, and each process's share of them.

GRPOTrainer gathers every process's rewards, computes the advantages of the whole
generation batch identically in every process, and keeps its own rows. The
pipeline does the same here, so its batch-level statistics must not be
all-reduced a second time: the call runs inside `single_process_collectives`
(`areal_adv.utils.collectives`), which turns the pipeline's reductions off for that
call, so every rank computes on the full batch what one process would.

Groups are TRL's: consecutive blocks of `num_generations` completions in the
gathered order. A completion every reward function scored `None` (NaN) is left
out of its group, as TRL leaves it out of the baseline, and gets advantage 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from areal_adv.integrations.response_layout import (
    ResponseBatch,
    response_advantages,
    response_advantages_with_diagnostics,
)
from areal_adv.utils.collectives import single_process_collectives

if TYPE_CHECKING:
    from areal_adv.trainer.ppo.actor import PPOActor

__all__ = [
    "GatheredRollouts",
    "weighted_rewards",
    "group_advantages",
    "group_advantages_and_diagnostics",
    "process_rows",
    "single_process_collectives",
]


@dataclass(frozen=True)
class GatheredRollouts:
    """The whole generation batch, gathered from every process (N completions, C positions)."""

    rewards: torch.Tensor  # [N] float, NaN = unscorable
    loss_mask: torch.Tensor  # [N, C] completion_mask x tool_mask: 1 at generated tokens
    lengths: torch.Tensor  # [N] completion lengths (generated and tool tokens)
    is_truncated: torch.Tensor  # [N] bool: no EOS at the end
    num_generations: int
    token_rewards: torch.Tensor | None = None  # [N, C] per-token process rewards
    logprobs: torch.Tensor | None = None  # [N, C] the sampling policy's log-probs (when a stage reads Σπ²)
    sum_pi_squared: torch.Tensor | None = None  # [N, C] Σπ² of each token's next-token distribution


def weighted_rewards(rewards_per_func: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """TRL's reward: the weighted nan-sum over reward functions; NaN where every function gave None."""
    rewards = (rewards_per_func * weights.to(rewards_per_func.device).unsqueeze(0)).nansum(dim=1)
    return rewards.masked_fill(torch.isnan(rewards_per_func).all(dim=1), float("nan"))


def group_advantages(actor: PPOActor, rollouts: GatheredRollouts) -> torch.Tensor:
    """[N, C] advantages of the gathered batch from `actor` (a `PPOActor`), 0 off the loss mask."""
    return group_advantages_and_diagnostics(actor, rollouts, ())[0]


def group_advantages_and_diagnostics(
    actor: PPOActor, rollouts: GatheredRollouts, estimators: Sequence[str]
) -> tuple[torch.Tensor, dict[str, float]]:
    """`group_advantages`, and the `diagnostics/*` metrics of the shadow `estimators` on the scorable rows.

    The metrics are computed in every process on the whole gathered batch (the
    same numbers everywhere); `noise_proxy` needs the log-probs and Σπ², which
    the batch carries only when a configured stage reads Σπ².
    """
    N, C = rollouts.loss_mask.shape
    k = rollouts.num_generations
    if N % k:
        raise ValueError(f"AReaLGRPOTrainer: {N} gathered completions are not whole groups of num_generations={k}")
    out = torch.zeros((N, C), dtype=torch.float32, device=rollouts.loss_mask.device)
    scorable = ~torch.isnan(rollouts.rewards)
    if not bool(scorable.any()):
        return out, {}
    rows = scorable.nonzero()[:, 0]
    pick = None if bool(scorable.all()) else rows

    def select(value: torch.Tensor | None) -> torch.Tensor | None:
        return value if value is None or pick is None else value.index_select(0, pick)

    batch = ResponseBatch(
        response_mask=select(rollouts.loss_mask),
        rewards=select(rollouts.rewards),
        group_ids=(rows // k).tolist(),
        lengths=select(rollouts.lengths),
        is_truncated=select(rollouts.is_truncated),
        token_rewards=select(rollouts.token_rewards),
        logprobs=select(rollouts.logprobs),
        sum_pi_squared=select(rollouts.sum_pi_squared),
        names=(
            ("response_mask", "completion_mask"),
            ("rewards", "rewards"),
            ("lengths", "completion lengths"),
            ("token_rewards", "token_reward_func output"),
            ("logprobs", "completion log-probs"),
            ("sum_pi_squared", "completion sum_pi_squared"),
        ),
    )
    metrics: dict[str, float] = {}
    with torch.no_grad(), single_process_collectives():
        if estimators:
            advantages, _, metrics = response_advantages_with_diagnostics(actor, batch, estimators)
        else:
            advantages, _ = response_advantages(actor, batch)
    out.index_copy_(0, rows, advantages.to(out.dtype))
    return out, metrics


def process_rows(n_local: int, process_index: int) -> slice:
    """The rows of the gathered batch that belong to `process_index` (GRPOTrainer's `process_slice`)."""
    return slice(process_index * n_local, (process_index + 1) * n_local)
