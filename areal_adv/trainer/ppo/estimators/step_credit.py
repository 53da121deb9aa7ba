"""Step-level credit for multi-turn agents: GiGPO and an MT-GRPO-style turn-level advantage.

Both are critic-free estimators over *steps*: a step is one generated turn of a
logical rollout (an episode). With one row per episode the steps are the row's
turns; with split rollouts (`rollout.export: per_turn`) a rollout's steps are its
rows' turns in row order, so both layouts give the same per-step advantages.

Rewards per step: the folded process rewards on the step's tokens (per-turn
rewards, `actor.token_rewards_as_adv: false`) plus, on the rollout's last step,
its outcome score. A split rollout's rows each carry the episode's score; it is
taken once, from the rollout's last row.

* `gigpo` (arXiv 2505.10978, verl-agent's `compute_gigpo_outcome_advantage`):
  A = A_episode + step_weight * A_step. A_episode normalises each rollout's total
  reward within its prompt group; A_step normalises each step's discounted return
  G_t = r_t + gamma G_{t+1} among the steps of the same prompt group that act in
  the same anchor state (`anchor_ids`, one key per turn from the rollout). The
  group's episode-level mean and std are taken over its steps by default, as
  verl-agent's `episode_norm_reward` does (`compute_mean_std_cross_steps=True`:
  each step row carries its episode's total reward, so an episode of k turns
  counts k times); `episode_stats: episodes` counts every episode once.
* `mt_grpo` (arXiv 2505.11821, the authors' `MTGRPOEnvTrainer`): the outcome is
  normalised within the group, each turn's reward within the group's rollouts at
  the same turn index, and turn k's tokens get A_outcome + turn_weight * (the sum
  of the normalised turn rewards from turn k on; `turn_credit: own` keeps only
  turn k's). For the authors' two-turn case (a turn reward on the first turn
  only) both are their advantage. `turn_baseline: unbiased` replaces the sum of
  per-turn-index baselines, whose length is the episode's own stopping turn, by a
  baseline that does not depend on the episode's own actions (see `mt_grpo`).

Token KL is a local penalty added to the advantages (as in the turn-level GAE and
REINFORCE estimators); `returns` hold each step's discounted return (GiGPO) or
the advantage (MT-GRPO). Loops run over the position of a step inside a rollout
(at most the largest number of turns), vectorised over rollouts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from areal_adv.api.config_checks import is_number
from areal_adv.api.stage_registry import register_stage
from areal_adv.trainer.ppo.stage_types import TemporalInputs, TemporalResult

__all__ = [
    "GIGPO_EPISODE_STATS",
    "GIGPO_MODES",
    "MT_GRPO_BASELINES",
    "MT_GRPO_CREDIT",
    "StepLayout",
    "gigpo",
    "mt_grpo",
    "step_layout",
]

GIGPO_MODES = ("mean_norm", "mean_std_norm")
#: What the episode-level group statistics run over: every step (verl-agent's default) or every episode once.
GIGPO_EPISODE_STATS = ("steps", "episodes")
MT_GRPO_CREDIT = ("to_go", "own")
MT_GRPO_BASELINES = ("per_turn", "unbiased")


@dataclass(frozen=True, eq=False)
class StepLayout:
    """Where the steps (generated turns) are and which rollout and prompt group they belong to."""

    token_step: torch.Tensor  # [B, T] long: the step of each generated token, -1 elsewhere
    row: torch.Tensor  # [S] long: each step's row
    first_token: torch.Tensor  # [S] long: column of each step's first token
    rollout: torch.Tensor  # [S] long: each step's logical rollout
    index: torch.Tensor  # [S] long: the step's position inside its rollout
    last: torch.Tensor  # [S] bool: the rollout's last step
    rollout_group: torch.Tensor  # [N] long: each logical rollout's prompt group
    group_sizes: torch.Tensor  # [G] float64: logical rollouts per prompt group

    @property
    def n_steps(self) -> int:
        return self.row.shape[0]

    @property
    def n_rollouts(self) -> int:
        return self.rollout_group.shape[0]

    @property
    def group(self) -> torch.Tensor:
        """[S] long: each step's prompt group."""
        return self.rollout_group[self.rollout]


def step_layout(inputs: TemporalInputs, where: str) -> StepLayout:
    """Index the generated turns of every row as steps of their logical rollouts."""
    turn_ids = inputs.turn_ids
    if turn_ids is None:
        raise ValueError(
            f"{where}: the batch has no 'turn_ids'; step-level credit needs the rollout to provide "
            "turn_ids [B, T] (turn index on generated tokens, -1 elsewhere)"
        )
    meta = inputs.meta
    device = turn_ids.device
    generated = turn_ids >= 0
    prev_max = torch.cummax(turn_ids, dim=1).values
    prev_max = torch.cat([torch.full_like(prev_max[:, :1], -1), prev_max[:, :-1]], dim=1)
    starts = generated & (turn_ids > prev_max)
    per_row = starts.sum(dim=1)
    offset = torch.cumsum(per_row, 0) - per_row
    local = torch.cumsum(starts.long(), dim=1) - 1
    token_step = torch.where(generated, offset[:, None] + local, torch.full_like(local, -1))
    row, first_token = starts.nonzero(as_tuple=True)  # row-major: the global step order
    rollout = meta.logical_row_index(device)[row]
    n_rollouts, n_steps = meta.n_logical, row.shape[0]
    step_range = torch.arange(n_steps, device=device)
    first = torch.full((n_rollouts,), n_steps, dtype=torch.long, device=device)
    first = first.scatter_reduce(0, rollout, step_range, reduce="amin", include_self=True)
    index = step_range - first[rollout]
    count = torch.bincount(rollout, minlength=n_rollouts)
    sizes = torch.as_tensor(meta.logical_group_sizes, dtype=torch.float64, device=device)
    return StepLayout(
        token_step,
        row,
        first_token,
        rollout,
        index,
        index == count[rollout] - 1,
        meta.logical_group_index(device),
        sizes,
    )


def step_rewards(inputs: TemporalInputs, steps: StepLayout) -> tuple[torch.Tensor, torch.Tensor]:
    """(per-step process rewards [S], per-rollout outcome [N]) in float64.

    A step owns the positions from its first token up to the next step's first
    token (environment tokens after a turn belong to it); a row's first step also
    owns the positions before it. Per-step sums are differences of one row-wise
    cumulative sum, so the [B, T] tensor is read once. Rows without a step
    contribute nothing.
    """
    device = steps.token_step.device
    n_pos = steps.token_step.shape[1]
    cumulative = torch.nn.functional.pad(torch.cumsum(inputs.process_rewards.to(torch.float64), dim=1), (1, 0))
    same_row_next = torch.zeros(steps.n_steps, dtype=torch.bool, device=device)
    same_row_next[:-1] = steps.row[1:] == steps.row[:-1]
    end = torch.full_like(steps.first_token, n_pos)
    end[:-1] = steps.first_token[1:]
    end = torch.where(same_row_next, end, torch.full_like(end, n_pos))
    first_in_row = torch.ones_like(same_row_next)
    first_in_row[1:] = ~same_row_next[:-1]
    begin = torch.where(first_in_row, torch.zeros_like(steps.first_token), steps.first_token)
    process = cumulative[steps.row, end] - cumulative[steps.row, begin]
    row_outcome = inputs.outcome_rewards.to(torch.float64).sum(dim=1)
    rollout_of_row = inputs.meta.logical_row_index(device)
    rows = torch.arange(row_outcome.shape[0], device=device)
    last_row = torch.zeros(steps.n_rollouts, dtype=torch.long, device=device)
    last_row = last_row.scatter_reduce(0, rollout_of_row, rows, reduce="amax", include_self=False)
    return process, row_outcome[last_row]


def segment_sum(x: torch.Tensor, segment: torch.Tensor, n: int) -> torch.Tensor:
    return torch.zeros(n, dtype=x.dtype, device=x.device).index_add_(0, segment, x)


def normalise_within(x: torch.Tensor, segment: torch.Tensor, n: int, *, by_std: bool, eps: float) -> torch.Tensor:
    """(x - mean_seg) [/ (std_seg + eps)]: unbiased std, 1 for a single member (which gives 0)."""
    count = segment_sum(torch.ones_like(x), segment, n)
    mean = segment_sum(x, segment, n) / torch.clamp(count, min=1.0)
    centred = x - mean[segment]
    if not by_std:
        return centred
    var = segment_sum(centred * centred, segment, n) / torch.clamp(count - 1, min=1.0)
    std = torch.where(count > 1, torch.sqrt(var), torch.ones_like(var)) + eps
    std = torch.where(std > 0, std, torch.ones_like(std))
    return centred / std[segment]


def discounted_to_go(x: torch.Tensor, steps: StepLayout, gamma: float) -> torch.Tensor:
    """[S]: sum over the rollout's later steps j >= t of gamma^(j-t) x_j."""
    width = int(steps.index.max()) + 1 if steps.n_steps else 0
    matrix = torch.zeros(steps.n_rollouts, width + 1, dtype=torch.float64, device=x.device)
    matrix[steps.rollout, steps.index] = x
    out = torch.zeros_like(matrix)
    for j in range(width - 1, -1, -1):
        out[:, j] = matrix[:, j] + gamma * out[:, j + 1]
    return out[steps.rollout, steps.index]


def _to_tokens(values: torch.Tensor, steps: StepLayout) -> torch.Tensor:
    """[B, T] float32: each step's value on its tokens, 0 elsewhere."""
    token_step = steps.token_step
    gathered = (
        values.to(torch.float32)[token_step.clamp(min=0)]
        if steps.n_steps
        else torch.zeros(token_step.shape, dtype=torch.float32, device=token_step.device)
    )
    return torch.where(token_step >= 0, gathered, torch.zeros_like(gathered))


def _check_groups(steps: StepLayout, where: str, allow_singletons: Any) -> None:
    if not isinstance(allow_singletons, bool):
        raise ValueError(f"{where}: allow_singletons must be true or false, got {allow_singletons!r}")
    small = steps.group_sizes < 2
    if not allow_singletons and bool(small.any()):
        group = int(small.nonzero()[0, 0])
        raise ValueError(
            f"{where}: prompt group {group} has 1 logical rollout; the episode-level advantage is relative to the "
            "group and needs at least 2 samples per prompt (rollout.n_samples >= 2), or pass allow_singletons: "
            "true to give such groups 0"
        )


def _check_number(where: str, name: str, value: Any, low: float, high: float | None = None) -> float:
    if not is_number(value, low=low, high=high):
        bound = f"in [{low}, {high}]" if high is not None else f">= {low}"
        raise ValueError(f"{where}: {name} must be a finite number {bound}, got {value!r}")
    return float(value)


def _step_anchors(inputs: TemporalInputs, steps: StepLayout, where: str) -> torch.Tensor:
    """[S] long: each step's anchor key (its first token's), checked constant over the turn."""
    anchors = inputs.anchor_ids
    if anchors is None:
        raise ValueError(
            f"{where}: the batch has no 'anchor_ids'; GiGPO groups steps by the environment state they "
            "act in, so the rollout must give every generated token its turn's state key [B, T]"
        )
    step_anchor = anchors[steps.row, steps.first_token]
    on_steps = steps.token_step >= 0
    differs = on_steps & (anchors != step_anchor[steps.token_step.clamp(min=0)])
    if bool(differs.any()):
        row, col = (int(i) for i in differs.nonzero()[0])
        raise ValueError(
            f"{where}: 'anchor_ids' change inside a turn (row {row}, aligned position {col}: "
            f"{int(anchors[row, col])} vs the turn's first token's {int(step_anchor[steps.token_step[row, col]])}); "
            "a turn acts in one state and has one key"
        )
    return step_anchor


def _anchor_groups(steps: StepLayout, anchors: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Step-level groups: (prompt group, anchor key) pairs -> consecutive ids."""
    if not steps.n_steps:
        return anchors, 0
    pairs = torch.stack([steps.group, anchors], dim=1)
    unique, inverse = torch.unique(pairs, dim=0, return_inverse=True)
    return inverse, unique.shape[0]


@register_stage("estimator", "gigpo")
def gigpo(
    inputs: TemporalInputs,
    *,
    step_weight: float = 1.0,
    step_discount: float | None = None,
    mode: str = "mean_norm",
    episode_stats: str = "steps",
    eps: float = 1e-6,
    allow_singletons: bool = False,
) -> TemporalResult:
    """GiGPO: A = A_episode + step_weight x A_step, A_step from the steps sharing an anchor state.

    Group-in-Group Policy Optimization (arXiv:2505.10978); reference code: verl-agent
    `core_gigpo.py:compute_gigpo_outcome_advantage`.

    `mode`: `mean_norm` subtracts the group means (the authors' default),
    `mean_std_norm` also divides by the unbiased std + eps. `episode_stats`:
    `steps` (the authors' default) forms the episode-level mean and std over
    the group's steps, each carrying its episode's total reward, so a longer
    episode weighs more; `episodes` over the group's episodes, once each (the
    authors' `compute_mean_std_cross_steps=False`). `step_discount` (gamma of
    the step returns) defaults to `actor.discount`. A step whose anchor state
    no other step of its group shares gets step advantage 0.
    """
    where = "estimator 'gigpo'"
    if mode not in GIGPO_MODES:
        raise ValueError(f"{where}: mode must be one of {list(GIGPO_MODES)}, got {mode!r}")
    if episode_stats not in GIGPO_EPISODE_STATS:
        raise ValueError(f"{where}: episode_stats must be one of {list(GIGPO_EPISODE_STATS)}, got {episode_stats!r}")
    weight = _check_number(where, "step_weight", step_weight, 0.0)
    gamma = _check_number(where, "step_discount", inputs.discount if step_discount is None else step_discount, 0.0, 1.0)
    eps = _check_number(where, "eps", eps, 0.0)
    steps = step_layout(inputs, where)
    _check_groups(steps, where, allow_singletons)
    anchors = _step_anchors(inputs, steps, where)
    process, outcome = step_rewards(inputs, steps)
    rewards = process + torch.where(steps.last, outcome[steps.rollout], torch.zeros_like(process))
    episode = outcome + segment_sum(process, steps.rollout, steps.n_rollouts)
    by_std = mode == "mean_std_norm"
    episode_adv = _episode_advantages(episode, steps, episode_stats, by_std=by_std, eps=eps)
    returns = discounted_to_go(rewards, steps, gamma)
    anchor_group, n_anchor = _anchor_groups(steps, anchors)
    step_adv = normalise_within(returns, anchor_group, n_anchor, by_std=by_std, eps=eps)
    advantages = _to_tokens(episode_adv + weight * step_adv, steps)
    total = inputs.outcome_rewards + inputs.process_rewards + inputs.kl_rewards
    return TemporalResult(
        advantages=advantages + inputs.kl_rewards, returns=_to_tokens(returns, steps), total_rewards=total
    )


def _episode_advantages(
    episode: torch.Tensor, steps: StepLayout, stats: str, *, by_std: bool, eps: float
) -> torch.Tensor:
    """[S]: each step's episode-level advantage, its episode's total reward against the prompt group.

    `steps`: the group's statistics over its steps (one copy of the episode's
    reward per step); `episodes`: over its episodes, one copy each.
    """
    n_groups = steps.group_sizes.shape[0]
    if stats == "steps":
        return normalise_within(episode[steps.rollout], steps.group, n_groups, by_std=by_std, eps=eps)
    return normalise_within(episode, steps.rollout_group, n_groups, by_std=by_std, eps=eps)[steps.rollout]


@register_stage("estimator", "mt_grpo")
def mt_grpo(
    inputs: TemporalInputs,
    *,
    turn_weight: float = 1.0,
    eps: float = 1e-4,
    turn_credit: str = "to_go",
    turn_baseline: str = "per_turn",
    allow_singletons: bool = False,
) -> TemporalResult:
    """MT-GRPO-style turn-level advantage: A_outcome + turn_weight x normalised turn rewards.

    Multi-turn GRPO (arXiv:2505.11821); reference code: the authors' `MTGRPOEnvTrainer`.

    The outcome is normalised over the prompt group's rollouts, (o - mean) / (std
    + eps), each turn's reward over the group's rollouts that reached that turn
    index (a turn only one rollout reached gets 0). `turn_credit: to_go` credits
    turn k with the normalised rewards of turns k, k+1, ...; `own` with turn k's.
    eps defaults to the authors' 1e-4.

    `turn_baseline: per_turn` (the default) is that per-turn-index normalisation.
    With `to_go` credit it subtracts sum_{j=k}^{K_i} mean_j from episode i's
    reward-to-go: a baseline whose number of terms is the episode's own stopping
    turn K_i, i.e. one that depends on the actions it scores, which biases the
    policy gradient whenever the policy decides when to stop (verl RFC #7244).
    `turn_baseline: unbiased` credits turn k with G_ik - b_ik, G_ik = sum_{j >= k}
    r_ij the episode's turn reward-to-go and b_ik the mean of G_jk over the group's
    *other* episodes that reached turn k (0 when none did): b_ik does not depend on
    episode i's own actions, so E[b_ik grad log pi(a_ik)] = 0. It is not divided
    by a std (a std over the group would include the episode's own return).
    """
    where = "estimator 'mt_grpo'"
    if turn_credit not in MT_GRPO_CREDIT:
        raise ValueError(f"{where}: turn_credit must be one of {list(MT_GRPO_CREDIT)}, got {turn_credit!r}")
    if turn_baseline not in MT_GRPO_BASELINES:
        raise ValueError(f"{where}: turn_baseline must be one of {list(MT_GRPO_BASELINES)}, got {turn_baseline!r}")
    if turn_baseline == "unbiased" and turn_credit != "to_go":
        raise ValueError(
            f"{where}: turn_baseline 'unbiased' baselines the reward-to-go, so it needs turn_credit "
            f"'to_go', got {turn_credit!r}"
        )
    weight = _check_number(where, "turn_weight", turn_weight, 0.0)
    eps = _check_number(where, "eps", eps, 0.0)
    steps = step_layout(inputs, where)
    _check_groups(steps, where, allow_singletons)
    turn_rewards, outcome = step_rewards(inputs, steps)
    outcome_adv = normalise_within(outcome, steps.rollout_group, steps.group_sizes.shape[0], by_std=True, eps=eps)
    n_groups = steps.group_sizes.shape[0]
    width = int(steps.index.max()) + 1 if steps.n_steps else 1
    turn_group = steps.group * width + steps.index
    if turn_baseline == "unbiased":
        credit = _leave_one_out_to_go(turn_rewards, steps, turn_group, n_groups * width)
    else:
        turn_adv = normalise_within(turn_rewards, turn_group, n_groups * width, by_std=True, eps=eps)
        credit = discounted_to_go(turn_adv, steps, 1.0) if turn_credit == "to_go" else turn_adv
    advantages = _to_tokens(outcome_adv[steps.rollout] + weight * credit, steps) + inputs.kl_rewards
    total = inputs.outcome_rewards + inputs.process_rewards + inputs.kl_rewards
    return TemporalResult(advantages=advantages, returns=advantages.clone(), total_rewards=total)


def _leave_one_out_to_go(
    turn_rewards: torch.Tensor, steps: StepLayout, turn_group: torch.Tensor, n_segments: int
) -> torch.Tensor:
    """[S]: G_ik minus the mean of G_jk over the other episodes of the group that reached turn k (0 if none)."""
    to_go = discounted_to_go(turn_rewards, steps, 1.0)
    count = segment_sum(torch.ones_like(to_go), turn_group, n_segments)[turn_group]
    others = segment_sum(to_go, turn_group, n_segments)[turn_group] - to_go
    baseline = torch.where(count > 1, others / torch.clamp(count - 1, min=1.0), torch.zeros_like(to_go))
    return to_go - baseline


gigpo.batch_fields = ("anchor_ids",)
