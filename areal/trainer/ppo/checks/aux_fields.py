"""Optional per-token batch fields some stages read: anchor-state keys and token entropies.

* `anchor_ids` [B, T] integer: on each generated token, a key of the environment
  state its turn acted in (e.g. a hash of the observation); equal for every token
  of a turn, anything elsewhere. GiGPO groups steps of a prompt's trajectories that
  share a key. The guess task's rollout adds it.
* `token_entropy` [B, T] float: the entropy of the behaviour policy's next-token
  distribution that sampled token t, stored at t like `logprobs`. The entropy
  advantage term reads it; the trainer computes it at prepare time.

Like the other token fields they are unshifted in the batch and aligned here
(position t carries token t+1's entry); the pipeline hands the aligned copies to
the stages (`TemporalInputs.anchor_ids`, `ProcessAdvantageInputs.token_entropy`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

import torch

from areal.trainer.ppo.checks.batch_checks import BatchError, all_finite

__all__ = ["ANCHOR_IDS", "AUX_FIELDS", "TOKEN_ENTROPY", "aligned_anchor_ids", "aligned_token_entropy",
           "check_aux_fields", "declared_fields", "stage_reads"]

ANCHOR_IDS = "anchor_ids"
TOKEN_ENTROPY = "token_entropy"
AUX_FIELDS = (ANCHOR_IDS, TOKEN_ENTROPY)
#: The attribute through which a stage function names the optional batch fields it reads.
BATCH_FIELDS_ATTRIBUTE = "batch_fields"


def stage_reads(stage: Any) -> frozenset[str]:
    """The optional fields a resolved stage gets: all for a custom stage, the declared ones for a built-in.

    A built-in declares them as its function's `batch_fields` attribute; aligning
    and checking a field costs passes over [B, T], so nobody else pays for them.
    """
    if stage is None:
        return frozenset()
    if stage.custom:
        return frozenset(AUX_FIELDS)
    return declared_fields(stage.fn) & frozenset(AUX_FIELDS)


def declared_fields(fn: Any) -> frozenset[str]:
    """The `batch_fields` a stage function declares, looked up through functools.partial layers."""
    fields: set[str] = set()
    while fn is not None:
        fields.update(getattr(fn, BATCH_FIELDS_ATTRIBUTE, ()) or ())
        fn = getattr(fn, "func", None)
    return frozenset(fields)


def _tensor(data: Mapping[str, Any], key: str) -> torch.Tensor | None:
    value = data.get(key)
    if value is None:
        return None
    ids = data["input_ids"]
    if not torch.is_tensor(value) or tuple(value.shape) != tuple(ids.shape):
        shape = tuple(value.shape) if torch.is_tensor(value) else type(value).__name__
        raise BatchError(f"{key}: expected a tensor of shape {tuple(ids.shape)} like input_ids, got {shape}")
    if value.device != ids.device:
        raise BatchError(f"{key}: on device {value.device}, expected {ids.device} like input_ids")
    return value


def check_aux_fields(data: Mapping[str, Any], fields: Collection[str]) -> None:
    """Shape, dtype and values of the optional `fields` that are present (the ones a stage reads)."""
    anchors = _tensor(data, ANCHOR_IDS) if ANCHOR_IDS in fields else None
    if anchors is not None and (anchors.is_floating_point() or anchors.is_complex() or anchors.dtype == torch.bool):
        raise BatchError(f"{ANCHOR_IDS}: expected an integer tensor (one key per generated token), got {anchors.dtype}")
    entropy = _tensor(data, TOKEN_ENTROPY) if TOKEN_ENTROPY in fields else None
    if entropy is not None:
        if not entropy.is_floating_point():
            raise BatchError(f"{TOKEN_ENTROPY}: expected a floating tensor, got {entropy.dtype}")
        if all_finite(entropy) and bool(entropy.min() >= 0):  # two reductions; the exact check only on failure
            return
        active = data["loss_mask"].bool()
        bad = active & ~(torch.isfinite(entropy) & (entropy >= 0))
        if bool(bad.any()):
            row, col = (int(i) for i in bad.nonzero()[0])
            raise BatchError(f"{TOKEN_ENTROPY}: expected finite entropies >= 0 on generated tokens, found "
                             f"{float(entropy[row, col])!r} at row {row}, position {col}")


def aligned_anchor_ids(data: Mapping[str, Any], fields: Collection[str]) -> torch.Tensor | None:
    """[B, T] long, rolled left one position (last column 0), or None (absent, or not among `fields`)."""
    anchors = data.get(ANCHOR_IDS) if ANCHOR_IDS in fields else None
    if anchors is None:
        return None
    out = torch.roll(anchors.long(), shifts=-1, dims=-1)
    out[:, -1] = 0
    return out


def aligned_token_entropy(data: Mapping[str, Any], loss_mask: torch.Tensor,
                          fields: Collection[str]) -> torch.Tensor | None:
    """[B, T] float32 entropies rolled left one position and masked by the aligned mask, or None."""
    entropy = data.get(TOKEN_ENTROPY) if TOKEN_ENTROPY in fields else None
    if entropy is None:
        return None
    active = loss_mask.bool()
    rolled = torch.roll(entropy.to(torch.float32), shifts=-1, dims=-1)
    return torch.where(active, rolled, torch.zeros_like(rolled))
