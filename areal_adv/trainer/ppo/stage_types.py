"""The public stage types of the advantage pipeline, in one module of their own.

A stage function takes one of the `*Inputs` types and returns the matching
`*Result` (or a tensor, for process shaping). They live here, apart from the
orchestrator and the built-in stages, so that `advantage.py`,
`advantage_algorithms.py` and `peer_algorithms.py` can all import them without
importing each other. User plugins keep importing them from their public paths:
`areal_adv.trainer.ppo.advantage` and `areal_adv.trainer.ppo.advantage_algorithms`
re-export every name (the paths the docs' *Custom advantage computation* page shows).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar, cast, overload

import torch

from areal_adv.api.cli_args import AdvantageShaping, PPOActorConfig
from areal_adv.trainer.ppo import gae as gae_kernels
from areal_adv.utils.data import TrajBatchMeta

__all__ = [
    "ALLOWED_EXTRAS",
    "AdvantageInputs",
    "AdvantageResult",
    "GAELambdaSpec",
    "OutcomeResult",
    "OutcomeRewardInputs",
    "ProcessAdvantageInputs",
    "TemporalInputs",
    "TemporalResult",
]

T = TypeVar("T")

GAELambdaSpec = float | Callable[..., torch.Tensor]

#: The only keys a full replacement may put in `AdvantageResult.extras` (docs: *Custom advantage
#: computation*, *Replacing the whole computation*). `mopd_behavior_logprobs` are the behaviour
#: log-probs kept for MOPD, AReaL's multi-teacher on-policy distillation.
ALLOWED_EXTRAS = frozenset({"input_token_loss_mask", "is_truncated", "mopd_behavior_logprobs", "prox_logp", "ref_logp"})


# ---------------------------------------------------------------------------
# Outcome reward shaping (step 2)
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class OutcomeRewardInputs:
    """Input of an outcome-reward shaping function.

    `data` is the rollout batch after the length penalty (`data["rewards"]` is the
    penalised per-row reward); `meta` holds trajectory and logical-rollout grouping.
    """

    data: Mapping[str, Any]
    config: PPOActorConfig
    meta: TrajBatchMeta


@dataclass(frozen=True)
class OutcomeResult:
    """One reward per tensor row; optionally one shaped reference per logical rollout.

    `normalization_rewards` are the transformed references used by reward
    normalisation over split rollouts, before bias, scaling and clipping.
    """

    rewards: torch.Tensor
    normalization_rewards: torch.Tensor | None = None


# ---------------------------------------------------------------------------
# Temporal estimator (step 5)
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class TemporalInputs:
    """What a temporal estimator sees. All [B, T] tensors are next-token aligned.

    Outcome, KL and folded process rewards are passed separately so that an
    estimator can decide where each one goes (turn GAE keeps KL out of returns).
    """

    outcome_rewards: torch.Tensor  # [B, T] outcome score at each row's last generated position
    kl_rewards: torch.Tensor  # [B, T] -kl_ctl * KL, zero at position seqlen-1
    process_rewards: torch.Tensor  # [B, T] folded process rewards at turn ends (zeros when none)
    values: torch.Tensor  # [B, T] critic values (zeros without a critic)
    loss_mask: torch.Tensor  # [B, T] float, 1 where the position predicts a generated token
    turn_ids: torch.Tensor | None  # [B, T] long, -1 outside generated turns, or None
    is_truncated: torch.Tensor  # [B] bool
    bootstrap_values: torch.Tensor  # [B] value at each row's last valid token
    seqlens: torch.Tensor  # [B] long, attention-mask lengths
    discount: float
    gae_lambda: GAELambdaSpec  # a float or a resolved lambda function
    gae_lambda_kwargs: Mapping[str, Any] = field(default_factory=dict)
    gae_lambda_source: str = "actor.gae_lambda"
    meta: TrajBatchMeta | None = None
    anchor_ids: torch.Tensor | None = None  # [B, T] long anchor-state key of each generated token's turn, or None
    old_logp: torch.Tensor | None = None  # [B, T] the PPO ratio's old log-probs x loss_mask (the pipeline sets it)
    sum_pi_squared: torch.Tensor | None = None  # [B, T] aligned Σπ² x loss_mask, or None
    rollout_is_weights: torch.Tensor | None = None  # [B, T] aligned rollout importance weights x loss_mask, or None
    # Teacher log-probs, given to estimators that declare them in `batch_fields` (None otherwise):
    ref_logp: torch.Tensor | None = None  # [B, T] the batch's ref_logp as given (aligned), when declared
    teacher_logp: torch.Tensor | None = None  # [B, T] the batch's teacher_logp (aligned like ref_logp), when declared

    def compute_lambda(self, timestep_unit: str) -> torch.Tensor:
        """Per-row lambda, resolving a callable `gae_lambda` in `timestep_unit` lengths."""
        return gae_kernels.compute_gae_lambda(
            self.gae_lambda,
            loss_mask=self.loss_mask,
            turn_ids=self.turn_ids,
            timestep_unit=timestep_unit,
            gae_lambda_kwargs=self.gae_lambda_kwargs,
            source=self.gae_lambda_source,
        )

    def truncated_bootstrap(self) -> torch.Tensor:
        """Bootstrap values where the row was cut off, zero where it ended."""
        return torch.where(
            self.is_truncated,
            self.bootstrap_values.float(),
            torch.zeros_like(self.bootstrap_values, dtype=torch.float32),
        )


@dataclass(frozen=True)
class TemporalResult:
    advantages: torch.Tensor  # [B, T] actor advantages
    returns: torch.Tensor  # [B, T] critic targets
    total_rewards: torch.Tensor  # [B, T] token-aligned rewards for monitoring (KL included)


# ---------------------------------------------------------------------------
# Process advantage shaping (step 7)
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ProcessAdvantageInputs:
    """What a process-advantage shaping function sees (critic returns are not included)."""

    advantages: torch.Tensor  # [B, T] after advantage normalisation
    token_rewards: torch.Tensor | None  # [B, T] aligned direct token rewards x loss_mask, or None
    loss_mask: torch.Tensor  # [B, T] aligned float mask
    meta: TrajBatchMeta | None = None
    token_entropy: torch.Tensor | None = None  # [B, T] aligned behaviour-policy entropies x loss_mask, or None


# ---------------------------------------------------------------------------
# Full replacement (actor.advantage.compute)
# ---------------------------------------------------------------------------


class _ShapingValue(Generic[T]):
    """A read-only attribute that reads one field of the owner's `shaping`.

    Replacements written against the flat keywords (`advantage_shaping_mode`, `gvpo_*`) read
    the same values as `inputs.shaping.*`; there is one source, so they cannot disagree.
    """

    def __init__(self, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, owner: type) -> _ShapingValue[T]: ...
    @overload
    def __get__(self, obj: AdvantageInputs, owner: type) -> T: ...
    def __get__(self, obj: AdvantageInputs | None, owner: type) -> T | _ShapingValue[T]:
        return self if obj is None else cast(T, getattr(obj.shaping, self.name))


@dataclass(frozen=True)
class AdvantageInputs:
    """Input of a full replacement (`actor.advantage.compute.implementation`): the raw batch."""

    data: Mapping[str, Any]
    config: PPOActorConfig
    meta: TrajBatchMeta
    shaping: AdvantageShaping = AdvantageShaping()  # the call-time process-reward shaping

    # The call-time shaping under the flat keyword names of `PPOActor.compute_advantages`.
    advantage_shaping_mode = _ShapingValue[str]("mode")
    gvpo_negative_scale = _ShapingValue[float]("negative_scale")
    gvpo_zero_penalty = _ShapingValue[float]("zero_penalty")
    gvpo_zero_eps = _ShapingValue[float]("zero_eps")

    @property
    def meta_is_complete(self) -> bool:
        """False when `meta` was synthesised for a bare batch (legacy fixed group size)."""
        return self.meta.complete


@dataclass(frozen=True)
class AdvantageResult:
    """Everything the PPO update needs, aligned to next-token prediction."""

    advantages: torch.Tensor
    returns: torch.Tensor
    loss_mask: torch.Tensor
    logprobs: torch.Tensor
    rewards: torch.Tensor
    total_rewards: torch.Tensor
    kl_rewards: torch.Tensor
    extras: Mapping[str, torch.Tensor] = field(default_factory=dict)
