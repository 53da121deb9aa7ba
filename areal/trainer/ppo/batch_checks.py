"""Validation of the padded rollout batch handed to `compute_advantages`.

Every check names the field, what was found and what was expected. The tensor
path runs them all before anything is computed; the fused CPU path runs the
cheap structural part first and the [B, T] value checks inside its kernels,
re-running `check_batch_values` for the message when a row fails. Either way a
bad batch never produces a half result.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from areal.trainer.ppo.gae import check_turn_ids_type, validate_turn_ids

REQUIRED_KEYS = ("input_ids", "attention_mask", "loss_mask", "logprobs", "rewards")
TOKEN_FLOAT_KEYS = ("logprobs", "values", "ref_logp", "prox_logp", "token_rewards")


class BatchError(ValueError):
    """The rollout batch is malformed; the message names the field."""


def _where(t: torch.Tensor) -> str:
    idx = t.nonzero()[0].tolist()
    return "row " + str(idx[0]) + (f", position {idx[1]}" if len(idx) > 1 else "")


def _check_binary(name: str, t: torch.Tensor) -> None:
    if t.dtype == torch.bool:
        return
    low, high = torch.aminmax(t)
    ok = bool(low >= 0) and bool(high <= 1)
    if ok and t.is_floating_point():  # values in [0, 1]: t(1-t) vanishes only on 0 and 1
        ok = float((t * (1 - t)).sum()) == 0.0
    if not ok:
        bad = (t != 0) & (t != 1)
        raise BatchError(f"{name}: expected a binary 0/1 mask, found {t[bad][0].item()!r} at {_where(bad)}")


def all_finite(t: torch.Tensor) -> bool:
    """One reduction instead of an elementwise pass: a NaN or inf makes the sum non-finite.

    A sum that overflows on huge finite values falls back to the exact check.
    """
    if not t.is_floating_point() or t.numel() == 0:
        return True
    if bool(torch.isfinite(t.sum())):
        return True
    return bool(torch.isfinite(t).all())


def _check_finite(name: str, t: torch.Tensor) -> None:
    if not all_finite(t):
        bad = ~torch.isfinite(t)
        raise BatchError(f"{name}: expected finite values, found {t[bad][0].item()!r} at {_where(bad)}")


def check_batch(data: Mapping[str, Any], *, recompute_prox: bool) -> None:
    """Validate shapes, dtypes, devices and values of the batch fields the pipeline reads."""
    check_batch_structure(data, recompute_prox=recompute_prox)
    check_batch_values(data)


def check_batch_structure(data: Mapping[str, Any], *, recompute_prox: bool) -> None:
    """The cheap checks: keys, types, shapes, dtypes, devices and the [B]-sized fields.

    Together with `check_batch_values` this is `check_batch`; the fused CPU pipeline
    runs only this part up front and checks the [B, T] values as it reads them.
    """
    if not isinstance(data, Mapping):
        raise BatchError(f"batch: got {type(data).__name__}, expected a dict of tensors")
    missing = [k for k in REQUIRED_KEYS if k not in data]
    if missing:
        raise BatchError(f"batch: missing required fields {missing} (have {sorted(data)})")
    for key, value in data.items():
        if key in REQUIRED_KEYS or key in TOKEN_FLOAT_KEYS or key in ("turn_ids", "is_truncated"):
            if value is not None and not torch.is_tensor(value):
                raise BatchError(f"{key}: got {type(value).__name__}, expected a torch.Tensor")
    ids = data["input_ids"]
    if ids.dim() != 2:
        raise BatchError(f"input_ids: expected shape [B, T], got {tuple(ids.shape)}")
    B, T = ids.shape
    if B == 0 or T == 0:
        raise BatchError(f"input_ids: expected a non-empty batch, got shape {tuple(ids.shape)}")
    device = ids.device
    for key, value in data.items():
        if torch.is_tensor(value) and value.device != device:
            raise BatchError(f"{key}: on device {value.device}, expected {device} like input_ids")
    for key in ("attention_mask", "loss_mask", "logprobs", *TOKEN_FLOAT_KEYS, "turn_ids"):
        value = data.get(key)
        if value is not None and tuple(value.shape) != (B, T):
            raise BatchError(f"{key}: expected shape {(B, T)} like input_ids, got {tuple(value.shape)}")
    _check_rewards(data["rewards"], B)
    for key in TOKEN_FLOAT_KEYS:
        value = data.get(key)
        if value is not None and not value.is_floating_point():
            raise BatchError(f"{key}: expected a floating tensor, got {value.dtype}")
    truncated = data.get("is_truncated")
    if truncated is not None:
        if tuple(truncated.shape) != (B,):
            raise BatchError(f"is_truncated: expected one flag per row, shape {(B,)}, got {tuple(truncated.shape)}")
        _check_binary("is_truncated", truncated)
    if data.get("turn_ids") is not None:
        check_turn_ids_type(data["turn_ids"], data["loss_mask"])
    if recompute_prox and data.get("prox_logp") is None:
        raise BatchError(
            "prox_logp: actor.recompute_logprob=true (without use_decoupled_loss) needs the recomputed "
            "'prox_logp' [B, T] in the batch, but it is missing"
        )


def _check_rewards(rewards: torch.Tensor, n_rows: int) -> None:
    """[B] rewards, or [B, K] reward components (named by meta.reward_keys)."""
    components = rewards.ndim == 2 and rewards.shape[0] == n_rows and rewards.shape[1] >= 1
    if tuple(rewards.shape) != (n_rows,) and not components:
        raise BatchError(f"rewards: expected one reward per row, shape {(n_rows,)} (or [B, K] reward components "
                         f"named by meta.reward_keys), got {tuple(rewards.shape)}")
    if rewards.dtype == torch.bool or rewards.is_complex():
        raise BatchError(f"rewards: expected an integer or floating tensor, got {rewards.dtype}")
    _check_finite("rewards", rewards)


def check_batch_values(data: Mapping[str, Any]) -> None:
    """The [B, T] value checks (finite floats, binary right-padded masks, turn ids) of a well-formed batch."""
    for key in TOKEN_FLOAT_KEYS:
        value = data.get(key)
        if value is not None:
            _check_finite(key, value)
    attn, loss = data["attention_mask"], data["loss_mask"]
    _check_binary("attention_mask", attn)
    _check_binary("loss_mask", loss)
    seqlens = attn.long().sum(-1)
    if bool((seqlens < 1).any()):
        raise BatchError(f"attention_mask: every row needs at least one token, row {_where(seqlens < 1)} is empty")
    rising = attn[:, 1:] > attn[:, :-1]  # a 0 followed by a 1
    if bool(rising.any()):
        raise BatchError(f"attention_mask: expected right padding (ones then zeros), found a gap before {_where(rising)}")
    if bool((loss > attn).any()):
        outside = loss.bool() & ~attn.bool()
        raise BatchError(f"loss_mask: marks a padding position (attention_mask 0) at {_where(outside)}")
    turn_ids = data.get("turn_ids")
    if turn_ids is not None:
        validate_turn_ids(turn_ids, loss)
