"""Step 4 of the default pipeline: alignment, KL rewards and reward placement.

The docs describe the step (*Custom advantage computation*, *The default pipeline*, step 4).

The raw batch stores token t's quantities at t; the PPO update and the
estimators want position t to carry what predicts token t+1. These pure
functions build the aligned tensors once, the KL penalty, and the token
positions of the outcome score and of process rewards. Nothing here writes to
the caller's tensors.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from areal_adv.api.cli_args import PPOActorConfig
from areal_adv.trainer.ppo.checks.batch_checks import BatchError
from areal_adv.trainer.ppo.gae import canonical_turn_ids
from areal_adv.trainer.ppo.stage_types import TemporalResult
from areal_adv.utils.collectives import collectives_active
from areal_adv.utils.data import KLEstimator

__all__ = [
    "AlignedBatch",
    "StepFields",
    "align_batch",
    "kl_rewards",
    "place_outcome",
    "process_rewards",
    "reward_kl",
    "truncation_width",
]


@dataclass(frozen=True, eq=False)
class AlignedBatch:
    """The next-token aligned view of a rollout batch (every [B, T] tensor is new or a view)."""

    loss_mask: torch.Tensor  # [B, T] float32
    old_logp: torch.Tensor  # [B, T] behaviour (or recomputed proximal) log-probs, masked
    prox_logp: torch.Tensor | None  # what the output's `prox_logp` holds
    turn_ids: torch.Tensor | None  # [B, T] long, -1 wherever loss_mask is 0 (the last column too)
    seqlens: torch.Tensor  # [B] long, attention-mask lengths
    truncated: torch.Tensor  # [B] bool
    values: torch.Tensor  # [B, T] critic values, or an expanded zero view
    mopd_behavior_logprobs: torch.Tensor | None  # aligned masked behaviour log-probs, detached (AReaL's batch key)

    @property
    def rows(self) -> torch.Tensor:
        return torch.arange(self.seqlens.shape[0], device=self.seqlens.device)


@dataclass(frozen=True, eq=False)
class StepFields:
    """What steps 4-6 (tensor or fused) hand to process shaping and the output."""

    loss_mask: torch.Tensor  # aligned float32
    logprobs: torch.Tensor  # aligned, masked old log-probs
    prox_logp: torch.Tensor | None
    is_truncated: torch.Tensor
    mopd_behavior_logprobs: torch.Tensor | None
    kl_rewards: torch.Tensor
    temporal: TemporalResult
    advantages: torch.Tensor  # after advantage normalisation
    token_adv: torch.Tensor | None  # direct process-reward advantages for step 7
    #: Largest |value| of the batch's magnitude fields, when the steps found them (the fused kernels);
    #: None when `batch_checks.check_batch_values` did.
    input_magnitudes: Mapping[str, float] | None = None


def roll_left(x: torch.Tensor) -> torch.Tensor:
    """Position t takes token t+1's entry (the last column wraps around)."""
    return torch.roll(x, shifts=-1, dims=-1)


def truncation_width(n_pos: int, device: torch.device) -> int:
    """The padded width T at which a row without `is_truncated` counts as truncated (seqlen == T).

    T is the whole batch's width. Under torch.distributed each rank pads only to
    its own groups, so the ranks agree on the widest (a MAX all-reduce of one
    number) and 2 ranks infer what one process infers on the whole batch. Only
    batches without `is_truncated` reach this, on every rank alike (the rollout
    decides the batch's fields).
    """
    if not (collectives_active() and dist.get_world_size() > 1):
        return n_pos
    width = torch.tensor([n_pos], dtype=torch.int64, device=device)
    dist.all_reduce(width, op=dist.ReduceOp.MAX)
    return int(width.item())


def align_batch(data: Mapping[str, Any], config: PPOActorConfig) -> AlignedBatch:
    """Align masks, log-probs and turn ids; infer lengths and truncation."""
    n_rows, n_pos = data["input_ids"].shape
    loss_mask = roll_left(data["loss_mask"].to(torch.float32))
    behaviour = None
    if "mopd_teacher_logp_sum" in data:
        behaviour = (roll_left(data["logprobs"]) * loss_mask).detach()  # before anything overwrites logprobs
    turn_ids = data.get("turn_ids")
    if turn_ids is not None:  # aligned, -1 wherever the aligned mask is 0 (its last column included)
        turn_ids = canonical_turn_ids(roll_left(turn_ids.long()), loss_mask)
    if config.recompute_logprob and not config.use_decoupled_loss:
        old_logp = data["prox_logp"] * loss_mask
    else:
        old_logp = roll_left(data["logprobs"]) * loss_mask
    prox_logp = data.get("prox_logp") if config.use_decoupled_loss else old_logp
    seqlens = data["attention_mask"].long().sum(-1)
    truncated = data.get("is_truncated")
    if truncated is None:
        truncated = seqlens == truncation_width(n_pos, seqlens.device)
    else:
        truncated = truncated.to(torch.bool)
    values = data.get("values")
    if values is None:  # a view, no memory
        values = torch.zeros((), dtype=torch.float32, device=loss_mask.device).expand(n_rows, n_pos)
    return AlignedBatch(loss_mask, old_logp, prox_logp, turn_ids, seqlens, truncated, values, behaviour)


def kl_rewards(aligned: AlignedBatch, ref_logp: torch.Tensor | None, config: PPOActorConfig) -> torch.Tensor:
    """-kl_ctl * KL(old || ref) on active positions (both log-probs masked)."""
    old_logp = aligned.old_logp
    ref = torch.zeros_like(old_logp) if ref_logp is None else ref_logp * aligned.loss_mask
    return KLEstimator(config.kl_estimator)(old_logp, ref).mul_(-config.kl_ctl)


def reward_kl(kl: torch.Tensor, aligned: AlignedBatch) -> torch.Tensor:
    """The KL rewards the estimator sees: zero at each row's position seqlen-1.

    That position is zero already unless it is active (a row without prompt
    filling T), so the [B, T] copy is only made when it matters.
    """
    rows, last = aligned.rows, aligned.seqlens - 1
    if not bool(kl[rows, last].any()):
        return kl
    kl = kl.clone()
    kl[rows, last] = 0
    return kl


def place_outcome(score: torch.Tensor, aligned: AlignedBatch, config: PPOActorConfig) -> torch.Tensor:
    """[B, T] with each row's outcome score at position seqlen-2 (0 on truncated rows if configured)."""
    score = score.to(torch.float32)
    if config.mask_no_eos_with_zero:
        score = torch.where(aligned.truncated, torch.zeros_like(score), score)
    placed = torch.zeros(aligned.loss_mask.shape, dtype=torch.float32, device=score.device)
    placed[aligned.rows, torch.clamp(aligned.seqlens - 2, min=0)] = score
    return placed


def process_rewards(
    data: Mapping[str, Any], aligned: AlignedBatch, config: PPOActorConfig
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """(direct token advantages, rewards folded at turn ends); at most one is not None."""
    token_rewards = data.get("token_rewards")
    if token_rewards is None:
        return None, None
    tr = token_rewards.to(torch.float32)
    if config.mask_no_eos_with_zero:
        tr = torch.where(aligned.truncated.unsqueeze(-1), torch.zeros_like(tr), tr)
    loss_mask = aligned.loss_mask
    if config.token_rewards_as_adv:
        return roll_left(tr) * loss_mask, None
    _check_constant_within_turns(data, tr)
    next_active = torch.zeros_like(loss_mask)
    next_active[:, :-1] = loss_mask[:, 1:]
    if aligned.turn_ids is not None:
        next_active[:, :-1] *= aligned.turn_ids[:, :-1] == aligned.turn_ids[:, 1:]
    return None, roll_left(tr) * (loss_mask * (1 - next_active))


def _check_constant_within_turns(data: Mapping[str, Any], tr: torch.Tensor) -> None:
    """Folding puts one reward per turn, so a turn's process rewards must not change."""
    raw_mask = data["loss_mask"].bool()
    same_turn = raw_mask[:, :-1] & raw_mask[:, 1:]
    if data.get("turn_ids") is not None:
        raw_turns = data["turn_ids"]
        same_turn &= raw_turns[:, :-1] == raw_turns[:, 1:]
    differs = same_turn & (tr[:, :-1] != tr[:, 1:])
    if bool(differs.any()):
        row, col = (int(i) for i in differs.nonzero()[0])
        raise BatchError(
            "token_rewards: with actor.token_rewards_as_adv=false process rewards are folded into the reward at "
            f"each turn's last token and must be constant within a turn; row {row} changes from "
            f"{float(tr[row, col])!r} to {float(tr[row, col + 1])!r} at positions {col}->{col + 1}. "
            "Use token_rewards_as_adv=true for dense per-token rewards"
        )
