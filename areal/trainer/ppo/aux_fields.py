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

from collections.abc import Mapping
from typing import Any

import torch

from areal.trainer.ppo.batch_checks import BatchError

__all__ = ["ANCHOR_IDS", "TOKEN_ENTROPY", "aligned_anchor_ids", "aligned_token_entropy", "check_aux_fields"]

ANCHOR_IDS = "anchor_ids"
TOKEN_ENTROPY = "token_entropy"


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


def check_aux_fields(data: Mapping[str, Any]) -> None:
    """Shape, dtype and values of the optional fields that are present."""
    anchors = _tensor(data, ANCHOR_IDS)
    if anchors is not None and (anchors.is_floating_point() or anchors.is_complex() or anchors.dtype == torch.bool):
        raise BatchError(f"{ANCHOR_IDS}: expected an integer tensor (one key per generated token), got {anchors.dtype}")
    entropy = _tensor(data, TOKEN_ENTROPY)
    if entropy is not None:
        if not entropy.is_floating_point():
            raise BatchError(f"{TOKEN_ENTROPY}: expected a floating tensor, got {entropy.dtype}")
        active = data["loss_mask"].bool()
        bad = active & ~(torch.isfinite(entropy) & (entropy >= 0))
        if bool(bad.any()):
            row, col = (int(i) for i in bad.nonzero()[0])
            raise BatchError(f"{TOKEN_ENTROPY}: expected finite entropies >= 0 on generated tokens, found "
                             f"{float(entropy[row, col])!r} at row {row}, position {col}")


def aligned_anchor_ids(data: Mapping[str, Any]) -> torch.Tensor | None:
    """[B, T] long, rolled left one position (last column 0), or None."""
    anchors = data.get(ANCHOR_IDS)
    if anchors is None:
        return None
    out = torch.roll(anchors.long(), shifts=-1, dims=-1)
    out[:, -1] = 0
    return out


def aligned_token_entropy(data: Mapping[str, Any], loss_mask: torch.Tensor) -> torch.Tensor | None:
    """[B, T] float32 entropies rolled left one position and masked by the aligned loss mask, or None."""
    entropy = data.get(TOKEN_ENTROPY)
    if entropy is None:
        return None
    active = loss_mask.bool()
    rolled = torch.roll(entropy.to(torch.float32), shifts=-1, dims=-1)
    return torch.where(active, rolled, torch.zeros_like(rolled))
