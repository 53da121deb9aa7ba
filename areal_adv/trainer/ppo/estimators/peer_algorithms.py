"""Stage functions that express peer frameworks' estimators (OPO, GPG, LitePPO, pass@k, ReMax, MaxRL, REINFORCE).

Registered by name with `@register_stage` (`areal_adv.api.stage_registry`), so a
config can say `outcome_reward_shaping: {implementation: gpg}` or
`estimator: {implementation: reinforce_return}`. Together with `reward_norm` and
`adv_norm` they let every algorithm in `docs/algorithms.md` be a preset of the one
pipeline (the presets, `areal_adv/presets/*.yaml`) instead of a separate code path.

Outcome stages work on *logical* rollouts: a sampled episode exported as several
tensor rows is one sample of its prompt group. Group statistics (baselines, stds,
the best sample, GPG's batch factor, LitePPO's batch std) are computed once per logical rollout, from
its explicit reference reward (`RolloutGroup.rewards`) when the rollout gives one,
else from its rows' common reward. Each row is then shaped with its group's
statistics, so a per-row reward change (e.g. a length penalty) survives; the
shaped per-rollout values are also returned as `normalization_rewards` so that a
`reward_norm` configured on top sees consistent references.

Estimators are critic-free Monte-Carlo returns; they never read `values`.
Everything is vectorised: no Python loop over rows, tokens or groups.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from areal_adv.api.config_checks import is_number
from areal_adv.api.stage_registry import register_stage
from areal_adv.trainer.ppo import gae as gae_kernels
from areal_adv.trainer.ppo.rewards.scores import logical_layout
from areal_adv.trainer.ppo.stage_types import OutcomeResult, OutcomeRewardInputs, TemporalInputs, TemporalResult
from areal_adv.utils.call_agreement import before_collective
from areal_adv.utils.collectives import collectives_active

__all__ = [
    "GPG_ALPHA_MODES",
    "LogicalRollouts",
    "logical_rollouts",
    "opo",
    "gpg",
    "lite_ppo",
    "passk",
    "remax",
    "maxrl",
    "credit_to_steps",
    "reinforce_return",
    "turn_reinforce_return",
]

GPG_ALPHA_MODES: tuple[str, ...] = ("valid_groups", "nonzero_rewards", "none")


def _outcome(name: str) -> str:
    return f"outcome_reward_shaping {name!r}"


# ---------------------------------------------------------------------------
# Logical rollouts and segment statistics
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class LogicalRollouts:
    """One reward per logical rollout (sampled episode), and how rows and groups map to it."""

    rewards: torch.Tensor  # [N] float64: explicit reference, else the rows' common reward
    row_rollout: torch.Tensor  # [B] long: each row's logical rollout
    rollout_group: torch.Tensor  # [N] long: each rollout's prompt group
    group_sizes: torch.Tensor  # [G] float64: logical rollouts per prompt group
    split: bool  # True when the batch metadata has split rollouts

    @property
    def n_rollouts(self) -> int:
        return self.rewards.shape[0]

    @property
    def n_groups(self) -> int:
        return self.group_sizes.shape[0]

    @property
    def row_group(self) -> torch.Tensor:
        """[B] long: each row's prompt group."""
        return self.rollout_group[self.row_rollout]


def logical_rollouts(inputs: OutcomeRewardInputs, name: str) -> LogicalRollouts:
    """Collapse the batch to one reward per logical rollout (rows of a rollout must agree)."""
    meta = inputs.meta
    row_rewards = inputs.data["rewards"].to(torch.float64)
    device = row_rewards.device
    sizes = torch.as_tensor(meta.logical_group_sizes, dtype=torch.float64, device=device)
    if meta.rollout_groups is None:
        index = torch.arange(row_rewards.shape[0], device=device)
        return LogicalRollouts(row_rewards, index, meta.row_group_index(device), sizes, split=False)
    starts, member, reference, supplied = logical_layout(meta, device)
    first = row_rewards[starts]
    differs = ~supplied[member] & (row_rewards != first[member])
    rollout_group = meta.logical_group_index(device)
    if bool(differs.any()):
        row = int(differs.nonzero()[0, 0])
        rollout = int(member[row])
        raise ValueError(
            f"{_outcome(name)}: rows of logical rollout {rollout} (group {int(rollout_group[rollout])}) have "
            f"different rewards (row {row}: {float(row_rewards[row])!r} vs row {int(starts[rollout])}: "
            f"{float(first[rollout])!r}); group statistics need one reward per logical rollout, so give an "
            "explicit reference per rollout (RolloutGroup.rewards)"
        )
    rewards = torch.where(supplied, reference.to(torch.float64), first)
    return LogicalRollouts(rewards, member, rollout_group, sizes, split=True)


def _group_sum(x: torch.Tensor, group: torch.Tensor, n_groups: int) -> torch.Tensor:
    return torch.zeros(n_groups, dtype=x.dtype, device=x.device).index_add_(0, group, x)


def _group_reduce(x: torch.Tensor, group: torch.Tensor, n_groups: int, how: str) -> torch.Tensor:
    """Per-group amax / amin (every group has at least one member)."""
    out = torch.zeros(n_groups, dtype=x.dtype, device=x.device)
    return out.scatter_reduce(0, group, x, reduce=how, include_self=False)


def _group_mean(logical: LogicalRollouts) -> torch.Tensor:
    return _group_sum(logical.rewards, logical.rollout_group, logical.n_groups) / logical.group_sizes


def _group_std(logical: LogicalRollouts, mean: torch.Tensor) -> torch.Tensor:
    """Unbiased group std (as `torch.std`); 1 for a singleton group, where it is undefined."""
    squares = _group_sum((logical.rewards - mean[logical.rollout_group]) ** 2, logical.rollout_group, logical.n_groups)
    std = torch.sqrt(squares / torch.clamp(logical.group_sizes - 1, min=1))
    return torch.where(logical.group_sizes > 1, std, torch.ones_like(std))


def _std_scale(logical: LogicalRollouts, eps: float) -> torch.Tensor:
    """Group std + eps as a divisor; a zero divisor (equal rewards, eps 0) becomes 1, its numerators are 0."""
    scale = _group_std(logical, _group_mean(logical)) + eps
    return torch.where(scale > 0, scale, torch.ones_like(scale))


def _shaped(rows: torch.Tensor, rollouts: torch.Tensor, logical: LogicalRollouts) -> OutcomeResult:
    """Row rewards, plus the per-rollout values as references when rollouts are split."""
    references = rollouts.to(torch.float32) if logical.split else None
    return OutcomeResult(rewards=rows.to(torch.float32), normalization_rewards=references)


def _check_flag(where: str, name: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise ValueError(f"{where}: {name} must be true or false, got {value!r}")


def _check_eps(where: str, eps: Any) -> float:
    if not is_number(eps, low=0.0):
        raise ValueError(f"{where}: eps must be a finite number >= 0, got {eps!r}")
    return float(eps)


def _all_reduce_sum(values: torch.Tensor) -> torch.Tensor:
    """Sum over data-parallel ranks when torch.distributed runs (batch-level statistics)."""
    if collectives_active():
        values = values.clone()
        before_collective()  # the ranks agree on any failure first (areal_adv.utils.call_agreement)
        dist.all_reduce(values, op=dist.ReduceOp.SUM)
    return values


# ---------------------------------------------------------------------------
# Outcome stages
# ---------------------------------------------------------------------------


@register_stage("outcome_reward_shaping", "opo")
def opo(inputs: OutcomeRewardInputs) -> OutcomeResult:
    """OPO: subtract the length-weighted group baseline b = sum(l_i r_i) / sum(l_i).

    On-Policy RL with Optimal reward baseline (arXiv:2505.23585); reference code:
    verl `verl/trainer/ppo/core_algos.py:compute_opo_outcome_advantage`.

    l is the number of generated tokens of a logical rollout (all its rows). The
    length weighting approximates OPO's optimal (gradient-norm weighted)
    baseline. A singleton group is its own baseline (advantage 0); a group
    without generated tokens falls back to the plain mean.
    """
    logical = logical_rollouts(inputs, "opo")
    row_length = inputs.data["loss_mask"].to(torch.float64).sum(dim=-1)
    length = _group_sum(row_length, logical.row_rollout, logical.n_rollouts)
    weighted = _group_sum(length * logical.rewards, logical.rollout_group, logical.n_groups)
    total = _group_sum(length, logical.rollout_group, logical.n_groups)
    baseline = torch.where(total > 0, weighted / torch.clamp(total, min=1.0), _group_mean(logical))
    rows = inputs.data["rewards"].to(torch.float64) - baseline[logical.row_group]
    return _shaped(rows, logical.rewards - baseline[logical.rollout_group], logical)


def _batch_std(logical: LogicalRollouts) -> torch.Tensor:
    """Unbiased std (0-d float64) of every logical rollout's reward over the batch, all ranks; 0 below two."""
    count = torch.full((), float(logical.n_rollouts), dtype=torch.float64, device=logical.rewards.device)
    count, total = _all_reduce_sum(torch.stack([count, logical.rewards.sum()])).unbind(0)
    mean = total / torch.clamp(count, min=1.0)
    squares = _all_reduce_sum(((logical.rewards - mean) ** 2).sum())
    std = torch.sqrt(squares / torch.clamp(count - 1, min=1.0))
    return torch.where(count > 1, std, torch.zeros_like(std))


@register_stage("outcome_reward_shaping", "lite_ppo")
def lite_ppo(inputs: OutcomeRewardInputs, *, eps: float = 1e-4) -> OutcomeResult:
    """LitePPO: (r - group mean) / (batch std + eps), the std taken over the raw rewards of the whole batch.

    "Tricks or Traps? A Deep Dive into RL for LLM Reasoning" (arXiv:2508.08221):
    the group mean as baseline and the batch's standard deviation as scale, which
    stays robust where a group's own std is tiny (nearly uniform groups would get
    huge advantages). Reference code: TRL 1.16 `GRPOTrainer` with
    `scale_rewards="batch"` (`nanstd` of the rewards, Bessel-corrected, + 1e-4).
    This is not `reward_norm: {mean_level: group, std_level: batch}`, whose std
    pools the deviations from each group's own mean (AReaL's definition) and so
    leaves out the spread between groups. The std is over logical rollouts,
    all-reduced over data-parallel ranks; fewer than two in the batch give std 0
    (as TRL). A zero divisor (equal rewards, eps 0) counts as 1: its numerators are 0.
    """
    eps = _check_eps(_outcome("lite_ppo"), eps)
    logical = logical_rollouts(inputs, "lite_ppo")
    mean = _group_mean(logical)
    scale = _batch_std(logical) + eps
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    rows = (inputs.data["rewards"].to(torch.float64) - mean[logical.row_group]) / scale
    return _shaped(rows, (logical.rewards - mean[logical.rollout_group]) / scale, logical)


def _gpg_alpha(logical: LogicalRollouts, mode: str) -> torch.Tensor:
    """GPG's batch factor B / B_valid (0-d float64); B_valid < 1 counts as 1 (all advantages are 0 then)."""
    if mode == "none":
        return torch.ones((), dtype=torch.float64, device=logical.rewards.device)
    if mode == "valid_groups":
        g, n = logical.rollout_group, logical.n_groups
        spread = _group_reduce(logical.rewards, g, n, "amax") != _group_reduce(logical.rewards, g, n, "amin")
        n_valid = (logical.group_sizes * spread).sum()
    else:
        n_valid = (logical.rewards != 0).sum().to(torch.float64)
    n_total = torch.full((), float(logical.n_rollouts), dtype=torch.float64, device=logical.rewards.device)
    total, valid = _all_reduce_sum(torch.stack([n_total, n_valid])).unbind(0)
    return total / torch.clamp(valid, min=1.0)


@register_stage("outcome_reward_shaping", "gpg")
def gpg(
    inputs: OutcomeRewardInputs,
    *,
    f_norm: bool = False,
    alpha: str = "valid_groups",
    eps: float = 1e-6,
) -> OutcomeResult:
    """GPG: alpha * (r - group mean) / F_norm.

    Group Policy Gradient (arXiv:2504.02546); reference code: the GPG authors'
    trainer and verl `verl/trainer/ppo/core_algos.py:compute_gpg_outcome_advantage`.

    `alpha` corrects the gradient for samples that carry no signal:
    `valid_groups` (the paper's alpha = B / (B - M), M = samples in groups whose
    rewards are all equal, as in the authors' code), `nonzero_rewards` (verl's
    `compute_gpg_outcome_advantage`: B / samples with a non-zero reward) or
    `none` (alpha = 1). B counts logical rollouts, all-reduced over data-parallel
    ranks. `f_norm=True` divides by the group's unbiased std + eps. A singleton
    group is its own baseline (advantage 0) and counts as invalid.
    """
    where = _outcome("gpg")
    if alpha not in GPG_ALPHA_MODES:
        raise ValueError(f"{where}: alpha must be one of {list(GPG_ALPHA_MODES)}, got {alpha!r}")
    _check_flag(where, "f_norm", f_norm)
    eps = _check_eps(where, eps)
    logical = logical_rollouts(inputs, "gpg")
    mean = _group_mean(logical)
    scale = _std_scale(logical, eps) if f_norm else torch.ones_like(mean)
    factor = _gpg_alpha(logical, alpha)
    rows = factor * (inputs.data["rewards"].to(torch.float64) - mean[logical.row_group]) / scale[logical.row_group]
    rollouts = factor * (logical.rewards - mean[logical.rollout_group]) / scale[logical.rollout_group]
    return _shaped(rows, rollouts, logical)


@register_stage("outcome_reward_shaping", "passk")
def passk(inputs: OutcomeRewardInputs, *, norm_by_std: bool = True, eps: float = 1e-6) -> OutcomeResult:
    """pass@k advantage: only the group's best sample gets (max - second max), others 0.

    "Optimizing Language Models for Inference Time Objectives using Reinforcement
    Learning" (arXiv:2503.19595); reference code: verl
    `verl/trainer/ppo/core_algos.py:compute_grpo_passk_outcome_advantage`.

    With `norm_by_std` the gap is divided by the group's unbiased std + eps (as
    verl's `compute_grpo_passk_outcome_advantage`). Ties at the top give 0. Every
    row of the best logical rollout gets its value. Needs >= 2 samples per group.
    """
    where = _outcome("passk")
    _check_flag(where, "norm_by_std", norm_by_std)
    eps = _check_eps(where, eps)
    logical = logical_rollouts(inputs, "passk")
    small = logical.group_sizes < 2
    if bool(small.any()):
        group = int(small.nonzero()[0, 0])
        raise ValueError(
            f"{where}: group {group} has {int(logical.group_sizes[group])} logical rollout(s); the pass@k "
            "advantage (max minus second max) needs at least 2 samples per prompt"
        )
    g, n = logical.rollout_group, logical.n_groups
    index = torch.arange(logical.n_rollouts, device=g.device)
    top = _group_reduce(logical.rewards, g, n, "amax")
    sentinel = torch.full_like(index, logical.n_rollouts)
    best = _group_reduce(torch.where(logical.rewards == top[g], index, sentinel), g, n, "amin")
    is_best = index == best[g]
    second = _group_reduce(logical.rewards.masked_fill(is_best, -math.inf), g, n, "amax")
    gap = top - second
    if norm_by_std:
        gap = gap / _std_scale(logical, eps)
    rollouts = torch.where(is_best, gap[g], torch.zeros_like(logical.rewards))
    return _shaped(rollouts[logical.row_rollout], rollouts, logical)


def _reward_baselines(data: Any, n_rows: int, device: torch.device) -> torch.Tensor:
    """The rollout's per-row ReMax baselines as float64 [B], or a clear error."""
    where = _outcome("remax")
    value = data.get("reward_baselines")
    if value is None:
        raise ValueError(
            f"{where}: the batch has no 'reward_baselines'; ReMax subtracts, per row, the reward of the "
            "prompt's greedy (argmax) response, which the rollout must add as a float tensor of shape "
            f"[B] = [{n_rows}]"
        )
    if not torch.is_tensor(value):
        raise ValueError(f"{where}: 'reward_baselines' is {type(value).__name__}, expected a float tensor [{n_rows}]")
    if tuple(value.shape) != (n_rows,):
        raise ValueError(
            f"{where}: 'reward_baselines' has shape {tuple(value.shape)}, expected ({n_rows},) (one per row)"
        )
    if value.dtype == torch.bool or value.is_complex():
        raise ValueError(f"{where}: 'reward_baselines' has dtype {value.dtype}, expected a real (float) tensor")
    if value.device != device:
        raise ValueError(f"{where}: 'reward_baselines' is on {value.device}, expected {device} like 'rewards'")
    value = value.to(torch.float64)
    bad = ~torch.isfinite(value)
    if bool(bad.any()):
        row = int(bad.nonzero()[0, 0])
        raise ValueError(f"{where}: 'reward_baselines'[{row}] is {float(value[row])!r}, expected a finite number")
    return value


@register_stage("outcome_reward_shaping", "remax")
def remax(inputs: OutcomeRewardInputs) -> OutcomeResult:
    """ReMax: r - b, b = the greedy response's reward, from the batch's `reward_baselines` [B].

    ReMax (Li et al. 2023, arXiv:2310.10505); reference code: verl
    `verl/trainer/ppo/core_algos.py:compute_remax_outcome_advantage`.

    No group statistics; rows of one logical rollout must share their baseline.
    """
    rewards = inputs.data["rewards"]
    baselines = _reward_baselines(inputs.data, rewards.shape[0], rewards.device)
    logical = logical_rollouts(inputs, "remax")
    rows_index = torch.arange(baselines.shape[0], device=baselines.device)
    first = baselines[_group_reduce(rows_index, logical.row_rollout, logical.n_rollouts, "amin")]
    differs = baselines != first[logical.row_rollout]
    if bool(differs.any()):
        row = int(differs.nonzero()[0, 0])
        raise ValueError(
            f"{_outcome('remax')}: 'reward_baselines' differ within logical rollout "
            f"{int(logical.row_rollout[row])} (row {row}: {float(baselines[row])!r}); a rollout's rows share one baseline"
        )
    rows = rewards.to(torch.float64) - baselines
    return _shaped(rows, logical.rewards - first, logical)


def _maxrl_scale(logical: LogicalRollouts, mean: torch.Tensor, eps: float) -> torch.Tensor:
    """Per group mean + eps (1 for a singleton).

    A zero divisor over equal rewards (all 0 with eps 0) counts as 1, its
    numerators being 0; over different rewards it is an error naming the group.
    """
    scale = torch.where(logical.group_sizes > 1, mean + eps, torch.ones_like(mean))
    g, n = logical.rollout_group, logical.n_groups
    spread = _group_reduce(logical.rewards, g, n, "amax") != _group_reduce(logical.rewards, g, n, "amin")
    undefined = (scale == 0) & spread
    if bool(undefined.any()):
        group = int(undefined.nonzero()[0, 0])
        raise ValueError(
            f"{_outcome('maxrl')}: group {group} has mean reward {float(mean[group])!r}, so mean + eps "
            f"({eps!r}) is 0 and (r - mean) / (mean + eps) is undefined; MaxRL expects success rewards >= 0 "
            "(a pass rate): shift the task's rewards or change eps"
        )
    return torch.where(scale == 0, torch.ones_like(scale), scale)


@register_stage("outcome_reward_shaping", "maxrl")
def maxrl(inputs: OutcomeRewardInputs, *, eps: float = 1e-6) -> OutcomeResult:
    """MaxRL: A = (r - mean_g) / (mean_g + eps); a singleton group keeps its raw reward.

    Maximum Likelihood RL (Tajwar et al. 2026, arXiv:2602.02710), as SkyRL 0.3.0
    `skyrl/backends/skyrl_train/utils/ppo_utils.py::compute_maxrl_advantage`
    computes it. With 0/1 rewards the group mean is the pass rate p, so a correct
    sample gets (1 - p) / p: the 1/p weighting of the maximum-likelihood gradient,
    which puts more weight on hard prompts than GRPO's (r - p) / std. A group of
    one sample has mean 0 and no divisor there (SkyRL's rule), so its advantage is
    its reward. Groups are of logical rollouts; every row gets its rollout's
    group statistics applied to its own reward (as `gpg`).
    """
    eps = _check_eps(_outcome("maxrl"), eps)
    logical = logical_rollouts(inputs, "maxrl")
    mean = torch.where(logical.group_sizes > 1, _group_mean(logical), torch.zeros_like(logical.group_sizes))
    scale = _maxrl_scale(logical, mean, eps)
    rows = (inputs.data["rewards"].to(torch.float64) - mean[logical.row_group]) / scale[logical.row_group]
    rollouts = (logical.rewards - mean[logical.rollout_group]) / scale[logical.rollout_group]
    return _shaped(rows, rollouts, logical)


# ---------------------------------------------------------------------------
# Critic-free estimators
# ---------------------------------------------------------------------------


def credit_to_steps(rewards: torch.Tensor, steps: torch.Tensor) -> torch.Tensor:
    """Move rewards off non-step positions onto the latest step at or before them.

    Positions before a row's first step go to that first step; rows without any
    step keep nothing. This keeps an outcome score placed after trailing
    environment tokens (multi-turn rows) on the episode's last generated token.
    """
    n_rows, n_pos = rewards.shape
    position = torch.arange(n_pos, device=rewards.device).expand(n_rows, n_pos)
    latest = torch.cummax(torch.where(steps, position, torch.full_like(position, -1)), dim=1).values
    first = torch.where(steps.any(dim=1), steps.to(torch.int8).argmax(dim=1), n_pos)
    target = torch.where(latest >= 0, latest, first[:, None])
    credited = torch.zeros((n_rows, n_pos + 1), dtype=torch.float64, device=rewards.device)
    credited.scatter_add_(1, target, rewards.to(torch.float64))
    return credited[:, :n_pos].to(torch.float32)


@register_stage("estimator", "reinforce_return")
def reinforce_return(inputs: TemporalInputs) -> TemporalResult:
    """REINFORCE / REINFORCE++ return: G_t = r_t + discount * G_next over generated tokens.

    REINFORCE++ (arXiv:2501.03262); reference code: OpenRLHF's `reinforce` advantage and verl
    `verl/trainer/ppo/core_algos.py:compute_reinforce_plus_plus_outcome_advantage`.

    r = KL + outcome + folded process rewards (REINFORCE++ keeps the KL penalty
    in the token reward). Non-generated positions are not time steps: they are
    skipped, and a reward sitting on one is credited to the latest generated
    token before it. No critic: values and bootstrap are ignored, and
    returns = advantages (zero off generated tokens).
    """
    rewards = inputs.kl_rewards + inputs.outcome_rewards + inputs.process_rewards
    steps = inputs.loss_mask != 0
    steps[:, -1] = False  # the last aligned position predicts nothing (as in token GAE)
    credited = credit_to_steps(rewards, steps)
    returns, _ = gae_kernels.token_gae_tensors(
        credited,
        torch.zeros_like(credited),
        steps.to(torch.float32),
        discount=inputs.discount,
        lam=1.0,
        bootstrap=0.0,
    )
    returns = returns * steps
    return TemporalResult(advantages=returns, returns=returns.clone(), total_rewards=rewards)


@register_stage("estimator", "turn_reinforce_return")
def turn_reinforce_return(inputs: TemporalInputs, *, turn_discount: float | None = None) -> TemporalResult:
    """Turn-level REINFORCE: G_k = R_k + turn_discount * G_{k+1} over generated turns.

    The REINFORCE return (Williams 1992) with a generated turn as the time step, as
    `turn_gae` takes turns; no paper or reference code defines this variant.

    R_k sums the outcome and folded process rewards of turn k; a reward outside
    every turn (e.g. a score after trailing environment tokens) belongs to the
    latest turn before it, so per-turn rewards credit their own and earlier turns. G_k is
    broadcast to the turn's tokens; token KL is a local actor penalty added to the
    advantages, never to `returns` (as in turn GAE). `turn_discount` defaults to
    `actor.discount`. No critic: values and bootstrap are ignored.
    """
    where = "estimator 'turn_reinforce_return'"
    if inputs.turn_ids is None:
        raise ValueError(
            f"{where}: the batch has no 'turn_ids'; turn-level returns need the rollout to provide "
            "turn_ids [B, T] (turn index on generated tokens, -1 elsewhere)"
        )
    gamma = inputs.discount if turn_discount is None else turn_discount
    if not is_number(gamma, low=0.0, high=1.0):
        raise ValueError(f"{where}: turn_discount must be a number in [0, 1], got {turn_discount!r}")
    rewards = inputs.outcome_rewards + inputs.process_rewards
    steps = inputs.turn_ids >= 0
    credited = credit_to_steps(rewards, steps)  # a reward off the turns belongs to the latest turn
    turn_returns, _ = gae_kernels.turn_gae_tensors(
        credited,
        torch.zeros_like(credited),
        inputs.loss_mask,
        inputs.turn_ids,
        discount=float(gamma),
        lam=1.0,
        bootstrap=0.0,
    )
    return TemporalResult(
        advantages=turn_returns + inputs.kl_rewards,
        returns=turn_returns,
        total_rewards=rewards + inputs.kl_rewards,
    )
