"""The optimal token baseline (OTB): a per-token group baseline weighted by cumulative path variance.

    A_t = G_t - B_t,   B_t = sum_i G_{i,t} W_{i,t} / (sum_i W_{i,t} + eps),   W_t = sum_{j <= t} w_j,
    w_j = (1 - 2 pi_j + sum_a pi(a)^2) * rho_j^2

over the trajectories i of a prompt group, G_t the undiscounted reward-to-go and
pi_j = exp(old log-prob) of the sampled token. w_j = ||e_j - pi||^2 is the squared
norm of the token's score function with respect to the logits, so W_t is the
variance a trajectory's log-likelihood gradient has accumulated up to t, and B_t
the variance-weighted mean return: the baseline that minimises the gradient's
variance token by token. rho_j are the rollout importance weights when the batch
has them (`rollout_is_weights`, verl's truncated IS correction).

Source: Li, Xu, Li et al., "The Optimal Token Baseline: Variance Reduction for
Long-Horizon LLM-RL" (PMLR vol. 306, 2026; w_j is their logit-gradient proxy), and
its reference code, verl 0.9.1 `verl/trainer/ppo/core_algos.py`,
`compute_optimal_token_baseline_advantage` (`optimal_token_baseline`) and
`compute_multi_turn_optimal_token_baseline_advantage` (`tir_optimal_token_baseline`),
called by `verl/trainer/ppo/ray_trainer.py::compute_advantage` with
`sum_pi_squared`, `old_log_probs` and `rollout_is_weights` from the batch.

The two differ in what "token t" means across a group's trajectories:
`optimal_token_baseline` lines them up by position in the response (a multi-turn
row's environment tokens take positions too), `tir_optimal_token_baseline` by
the index of the generated token (tool-integrated reasoning: the k-th generated
token of every trajectory). A group of one trajectory has no baseline (A = G).
With `handle_zero_tail` (verl's default, True for both), a group's single
longest trajectory gets no baseline past the second-longest one's length, where
it would otherwise be its own baseline (A ~ 0).

Vectorised: one scatter-add into a [groups x positions] grid, no Python loop
over rows, groups or tokens.
"""

from __future__ import annotations

from typing import Any

import torch

from areal_adv.api.config_checks import is_number
from areal_adv.api.stage_registry import register_stage
from areal_adv.trainer.ppo.checks.aux_fields import check_sum_pi_squared_covers_pi
from areal_adv.trainer.ppo.estimators.peer_algorithms import credit_to_steps
from areal_adv.trainer.ppo.stage_types import TemporalInputs, TemporalResult

__all__ = ["optimal_token_baseline", "tir_optimal_token_baseline"]


def _where(name: str) -> str:
    return f"estimator {name!r}"


def _check_inputs(inputs: TemporalInputs, name: str, handle_zero_tail: Any, eps: Any) -> None:
    where = _where(name)
    if not isinstance(handle_zero_tail, bool):
        raise ValueError(f"{where}: handle_zero_tail must be true or false, got {handle_zero_tail!r}")
    if not is_number(eps, low=0.0, low_open=True):
        raise ValueError(f"{where}: eps must be a finite number > 0, got {eps!r}")
    if inputs.discount != 1.0:
        raise ValueError(
            f"{where}: the optimal token baseline uses undiscounted returns; actor.discount must be "
            f"1.0, got {inputs.discount!r}"
        )
    if inputs.sum_pi_squared is None:
        raise ValueError(
            f"{where}: the batch has no 'sum_pi_squared'; the baseline's variance proxy 1 - 2*pi_t + sum(pi^2) "
            "needs, per generated token, the sum of squared probabilities of the distribution that sampled it, "
            "a float tensor [B, T] stored like logprobs (the trainer adds it for this estimator)"
        )
    if inputs.old_logp is None:
        raise ValueError(f"{where}: TemporalInputs.old_logp is None; the variance proxy needs pi_t = exp(old log-prob)")


def _positions(steps: torch.Tensor, by_generated_token: bool) -> torch.Tensor:
    """[B, T] long: each step's position in its trajectory (response position, or generated-token index)."""
    if by_generated_token:
        return steps.long().cumsum(dim=1) - 1
    n_pos = steps.shape[1]
    column = torch.arange(n_pos, device=steps.device)
    start = torch.where(steps.any(dim=1), steps.to(torch.int8).argmax(dim=1), 0)
    return (column[None, :] - start[:, None]).clamp(min=0, max=n_pos - 1)


def _zero_tail(
    lengths: torch.Tensor, group: torch.Tensor, member: torch.Tensor, n_groups: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row: whether it is its group's single longest member, and the group's second-longest length."""
    length = torch.where(member, lengths, torch.full_like(lengths, -1))
    top = torch.full((n_groups,), -1, dtype=torch.long, device=lengths.device)
    top = top.scatter_reduce(0, group, length, reduce="amax")
    at_top = member & (length == top[group])
    n_top = torch.zeros(n_groups, dtype=torch.long, device=lengths.device).index_add_(0, group, at_top.long())
    below = torch.where(member & (length < top[group]), length, torch.full_like(length, -1))
    second = torch.full((n_groups,), -1, dtype=torch.long, device=lengths.device)
    second = second.scatter_reduce(0, group, below, reduce="amax")
    return at_top & (n_top[group] == 1), second[group]


def _variance_weights(inputs: TemporalInputs, steps: torch.Tensor) -> torch.Tensor:
    """[B, T] float64 W_t: the cumulative sum of w_j = (1 - 2 pi_j + sum pi^2) rho_j^2 over the row's steps.

    w_j = ||e_j - pi||^2 = (1 - pi_j)^2 + (sum pi^2 - pi_j^2) >= 0. A sum pi^2 below
    pi_j^2 beyond rounding is refused (`check_sum_pi_squared_covers_pi`, naming the
    row and position); within rounding, w_j of a near-deterministic token can come
    out slightly negative, and only that is clamped at 0.
    """
    check_sum_pi_squared_covers_pi(inputs.sum_pi_squared, inputs.old_logp, steps)
    pi = torch.exp(inputs.old_logp.to(torch.float64))
    w = (1.0 - 2.0 * pi + inputs.sum_pi_squared.to(torch.float64)).clamp(min=0.0)
    if inputs.rollout_is_weights is not None:
        w = w * inputs.rollout_is_weights.to(torch.float64) ** 2
    return (w * steps).cumsum(dim=1)


def _otb(
    inputs: TemporalInputs, name: str, by_generated_token: bool, handle_zero_tail: bool, eps: float
) -> TemporalResult:
    _check_inputs(inputs, name, handle_zero_tail, eps)
    rewards = inputs.kl_rewards + inputs.outcome_rewards + inputs.process_rewards
    steps = inputs.loss_mask != 0
    steps[:, -1] = False  # the last aligned position predicts nothing (as in the other estimators)
    credited = credit_to_steps(rewards, steps).to(torch.float64) * steps
    returns = credited.flip(dims=[1]).cumsum(dim=1).flip(dims=[1])  # G_t: the reward-to-go
    cumulative = _variance_weights(inputs, steps)
    n_rows, n_pos = steps.shape
    group = inputs.meta.row_group_index(steps.device)
    n_groups = len(inputs.meta.traj_group_sizes)
    lengths = steps.sum(dim=1)
    member = lengths > 0 if by_generated_token else torch.ones_like(lengths, dtype=torch.bool)
    members = torch.zeros(n_groups, dtype=torch.long, device=steps.device).index_add_(0, group, member.long())
    rows, cols = steps.nonzero(as_tuple=True)
    position = _positions(steps, by_generated_token)[rows, cols]
    cell = group[rows] * n_pos + position
    grid = torch.zeros(2, n_groups * n_pos, dtype=torch.float64, device=steps.device)
    grid[0].index_add_(0, cell, returns[rows, cols] * cumulative[rows, cols])
    grid[1].index_add_(0, cell, cumulative[rows, cols])
    baseline = grid[0, cell] / (grid[1, cell] + eps)
    keep = members[group[rows]] >= 2
    if handle_zero_tail:
        longest, second = _zero_tail(lengths, group, member, n_groups)
        keep &= ~(longest[rows] & (position >= second[rows]))
    baseline = torch.where(keep, baseline, torch.zeros_like(baseline))
    advantages = torch.zeros((n_rows, n_pos), dtype=torch.float32, device=steps.device)
    advantages[rows, cols] = (returns[rows, cols] - baseline).to(torch.float32)
    return TemporalResult(advantages=advantages, returns=(returns * steps).to(torch.float32), total_rewards=rewards)


@register_stage("estimator", "optimal_token_baseline")
def optimal_token_baseline(
    inputs: TemporalInputs, *, handle_zero_tail: bool = True, eps: float = 1e-8
) -> TemporalResult:
    """OTB: A_t = G_t - sum_i G_{i,t} W_{i,t} / (sum_i W_{i,t} + eps), trajectories lined up by response position.

    Li, Xu, Li et al. 2026 (PMLR 306); verl 0.9.1 `core_algos.py`,
    `compute_optimal_token_baseline_advantage`. G_t sums the KL, outcome and folded process rewards from
    t on (no discount); W_t accumulates 1 - 2 pi_j + sum pi^2 (times the squared
    rollout IS weight when the batch has `rollout_is_weights`). Position t of
    every row counts from its first generated token. Needs `sum_pi_squared`.
    """
    return _otb(inputs, "optimal_token_baseline", False, handle_zero_tail, eps)


@register_stage("estimator", "tir_optimal_token_baseline")
def tir_optimal_token_baseline(
    inputs: TemporalInputs, *, handle_zero_tail: bool = True, eps: float = 1e-8
) -> TemporalResult:
    """TIR-OTB: the optimal token baseline with trajectories lined up by generated-token index.

    Li, Xu, Li et al. 2026 (PMLR 306); verl 0.9.1 `core_algos.py`,
    `compute_multi_turn_optimal_token_baseline_advantage`: the k-th
    generated token of every trajectory of a group shares a baseline, whatever
    environment (tool) tokens came before it; rows without generated tokens are
    left out of their group. Needs `sum_pi_squared`.
    """
    return _otb(inputs, "tir_optimal_token_baseline", True, handle_zero_tail, eps)


optimal_token_baseline.batch_fields = ("sum_pi_squared", "rollout_is_weights")
tir_optimal_token_baseline.batch_fields = ("sum_pi_squared", "rollout_is_weights")
