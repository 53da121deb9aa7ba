"""Response-only batches (verl, TRL) <-> the pipeline's padded batch, exactly.

verl and TRL hold one row per response with R positions, position j being
response token j, and per-token quantities stored at the token they belong to
(verl's `values[:, j]` is the value of the state before token j). The pipeline
wants a padded prompt+response row whose per-token fields are unshifted and
that it aligns itself (docs: *Custom advantage computation*, *The batch*). Writing each response behind a single
placeholder prompt token makes the two layouts line up: aligned position j of
the pipeline *is* response position j, so nothing is interpolated or rounded.

Groups (verl's `uid`, TRL's `num_generations` blocks) become `TrajBatchMeta`
group sizes. The pipeline needs a group's rows to be consecutive, so rows are
stably ordered by each group's first appearance and put back in the caller's
order afterwards (verl's batch balancing interleaves groups).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from areal_adv.trainer.diagnostics.engine_shadows import pipeline_diagnostics
from areal_adv.utils.data import TrajBatchMeta

if TYPE_CHECKING:
    from areal_adv.trainer.ppo.actor import PPOActor

__all__ = [
    "ResponseBatch",
    "PipelineBatch",
    "to_pipeline",
    "to_response",
    "response_advantages",
    "response_advantages_with_diagnostics",
    "turn_ids_from_mask",
    "LayoutError",
]


class LayoutError(ValueError):
    """A response-only batch cannot be converted; the message names the engine field."""


@dataclass(frozen=True)
class ResponseBatch:
    """A response-only batch. `names` maps each field to the engine's own name for errors.

    `lengths` is each response's length in positions (generated and environment
    tokens, before right padding); by default it ends at the last generated token.
    `values` and `ref_logprobs` are stored at the token they are about (already
    next-token aligned in the pipeline's sense); `logprobs`, `token_rewards`,
    `turn_ids`, `sum_pi_squared` and `rollout_is_weights` belong to the token at
    their position.
    """

    response_mask: torch.Tensor  # [B, R] 1 at generated tokens
    rewards: torch.Tensor  # [B] outcome reward
    group_ids: Sequence[Any]  # B hashable group keys
    lengths: torch.Tensor | None = None  # [B] long
    values: torch.Tensor | None = None  # [B, R]
    logprobs: torch.Tensor | None = None  # [B, R]
    ref_logprobs: torch.Tensor | None = None  # [B, R]
    token_rewards: torch.Tensor | None = None  # [B, R]
    turn_ids: torch.Tensor | None = None  # [B, R] long, -1 off generated tokens
    is_truncated: torch.Tensor | None = None  # [B] bool
    reward_baselines: torch.Tensor | None = None  # [B]
    sum_pi_squared: torch.Tensor | None = None  # [B, R] Σπ² of the distribution that sampled each token
    rollout_is_weights: torch.Tensor | None = None  # [B, R] per-token rollout importance weights
    names: tuple[tuple[str, str], ...] = ()

    def name(self, field: str) -> str:
        return dict(self.names).get(field, field)


@dataclass(frozen=True)
class PipelineBatch:
    """The padded batch, its metadata, and the row order that grouped it."""

    data: dict[str, torch.Tensor]
    meta: TrajBatchMeta
    order: torch.Tensor | None  # pipeline row i = response row order[i]; None = same order
    response_length: int


def _group_order(group_ids: Sequence[Any]) -> tuple[torch.Tensor | None, list[int]]:
    """Stable order putting each group's rows together (by first appearance), and the group sizes."""
    first: dict[Any, int] = {}
    keys = []
    for gid in group_ids:
        key = gid.item() if hasattr(gid, "item") and getattr(gid, "ndim", 1) == 0 else gid
        keys.append(first.setdefault(key, len(first)))
    group = torch.tensor(keys, dtype=torch.long)
    sizes = torch.bincount(group, minlength=len(first)).tolist()
    if bool((group[1:] >= group[:-1]).all()):
        return None, sizes
    return torch.sort(group, stable=True).indices, sizes


def turn_ids_from_mask(response_mask: torch.Tensor) -> torch.Tensor:
    """Turn k = the k-th run of consecutive generated tokens; -1 elsewhere (vectorised)."""
    generated = response_mask != 0
    previous = torch.zeros_like(generated)
    previous[:, 1:] = generated[:, :-1]
    starts = generated & ~previous
    turns = torch.cumsum(starts.to(torch.long), dim=1) - 1
    return torch.where(generated, turns, torch.full_like(turns, -1))


def _check_shape(batch: ResponseBatch, field: str, value: torch.Tensor | None, shape: tuple[int, ...]) -> None:
    if value is None:
        return
    if not torch.is_tensor(value):
        raise LayoutError(f"{batch.name(field)}: got {type(value).__name__}, expected a tensor of shape {shape}")
    if tuple(value.shape) != shape:
        raise LayoutError(f"{batch.name(field)}: expected shape {shape}, got {tuple(value.shape)}")


def _check(batch: ResponseBatch) -> tuple[int, int]:
    mask = batch.response_mask
    if not torch.is_tensor(mask) or mask.dim() != 2 or 0 in mask.shape:
        shape = tuple(mask.shape) if torch.is_tensor(mask) else type(mask).__name__
        raise LayoutError(f"{batch.name('response_mask')}: expected a non-empty [B, R] tensor, got {shape}")
    B, R = mask.shape
    for field in (
        "values",
        "logprobs",
        "ref_logprobs",
        "token_rewards",
        "turn_ids",
        "sum_pi_squared",
        "rollout_is_weights",
    ):
        _check_shape(batch, field, getattr(batch, field), (B, R))
    for field in ("rewards", "lengths", "is_truncated", "reward_baselines"):
        _check_shape(batch, field, getattr(batch, field), (B,))
    if len(batch.group_ids) != B:
        raise LayoutError(
            f"{batch.name('group_ids')}: got {len(batch.group_ids)} group ids, expected one per row ({B})"
        )
    return B, R


def _lengths(batch: ResponseBatch, R: int) -> torch.Tensor:
    mask = batch.response_mask != 0
    position = torch.arange(1, R + 1, device=mask.device)
    last_generated = torch.where(mask, position, torch.zeros_like(position)).amax(dim=1)
    if batch.lengths is None:
        return last_generated
    lengths = batch.lengths.to(device=mask.device, dtype=torch.long)
    short = lengths < last_generated
    if bool(short.any()) or bool((lengths > R).any()):
        row = int((short | (lengths > R)).nonzero()[0, 0])
        raise LayoutError(
            f"{batch.name('lengths')}: row {row} has length {int(lengths[row])}, expected between its last "
            f"generated token ({int(last_generated[row])}) and the response width {R}"
        )
    return lengths


def _prepend(value: torch.Tensor, fill: float | int) -> torch.Tensor:
    return torch.cat([torch.full_like(value[:, :1], fill), value], dim=1)


def _append(value: torch.Tensor, fill: float | int) -> torch.Tensor:
    return torch.cat([value, torch.full_like(value[:, :1], fill)], dim=1)


def to_pipeline(batch: ResponseBatch) -> PipelineBatch:
    """The padded batch (one placeholder prompt token + R positions) for `compute_advantages`."""
    B, R = _check(batch)
    order, sizes = _group_order(batch.group_ids)
    mask = batch.response_mask
    device = mask.device
    lengths = _lengths(batch, R)
    columns = torch.arange(R + 1, device=device)
    data: dict[str, torch.Tensor] = {
        "input_ids": torch.zeros((B, R + 1), dtype=torch.long, device=device),
        "attention_mask": (columns[None, :] <= lengths[:, None]).to(torch.float32),
        "loss_mask": _prepend(mask.to(torch.float32), 0.0),
        "logprobs": torch.zeros((B, R + 1), dtype=torch.float32, device=device)
        if batch.logprobs is None
        else _prepend(batch.logprobs.to(torch.float32), 0.0),
        "rewards": batch.rewards.to(device=device, dtype=torch.float32),
        "is_truncated": (lengths == R) if batch.is_truncated is None else batch.is_truncated.to(device).bool(),
    }
    turn_ids = turn_ids_from_mask(mask) if batch.turn_ids is None else batch.turn_ids.to(torch.long)
    data["turn_ids"] = _prepend(turn_ids, -1)
    if batch.values is not None:
        data["values"] = _append(batch.values.to(torch.float32), 0.0)
    if batch.ref_logprobs is not None:
        data["ref_logp"] = _append(batch.ref_logprobs.to(torch.float32), 0.0)
    for field in ("token_rewards", "sum_pi_squared", "rollout_is_weights"):  # per token, at the token
        value = getattr(batch, field)
        if value is not None:
            data[field] = _prepend(value.to(torch.float32), 0.0)
    if batch.reward_baselines is not None:
        data["reward_baselines"] = batch.reward_baselines.to(device=device, dtype=torch.float32)
    if order is not None:
        order = order.to(device)
        data = {key: value.index_select(0, order) for key, value in data.items()}
    meta = TrajBatchMeta.from_group_sizes(sizes)
    return PipelineBatch(data=data, meta=meta, order=order, response_length=R)


def to_response(batch: PipelineBatch, value: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """An aligned pipeline output [B, R+1] as a response-only [B, R] tensor in the caller's row order.

    Positions off the response mask are zero, as verl's outcome estimators and
    TRL's loss expect.
    """
    R = batch.response_length
    out = value[:, :R]
    if batch.order is not None:
        restored = torch.empty_like(out)
        restored.index_copy_(0, batch.order, out)
        out = restored
    return out * response_mask.to(out.dtype)


def response_advantages(actor: PPOActor, batch: ResponseBatch) -> tuple[torch.Tensor, torch.Tensor]:
    """Run `actor.compute_advantages` on a response-only batch: (advantages, returns), each [B, R]."""
    advantages, returns, _ = response_advantages_with_diagnostics(actor, batch, ())
    return advantages, returns


def response_advantages_with_diagnostics(
    actor: PPOActor, batch: ResponseBatch, names: Sequence[str]
) -> tuple[torch.Tensor, torch.Tensor, dict[str, float]]:
    """`response_advantages` plus the shadow estimators' diagnostics of `names` on the same batch.

    The engines' `diagnostics/<name>/<metric>` (`diagnostics.engine_shadows`; none without `names`);
    `noise_proxy` only when the batch carries the behaviour log-probs (`logprobs`) and Σπ².
    """
    converted = to_pipeline(batch)
    out = actor.compute_advantages(converted.data, converted.meta)
    mask = batch.response_mask
    metrics = pipeline_diagnostics(
        actor, names, converted.data, converted.meta, out, with_logprobs=batch.logprobs is not None
    )
    return to_response(converted, out["advantages"], mask), to_response(converted, out["returns"], mask), metrics
