"""Validation of the padded rollout batch handed to `compute_advantages`.

Every check names the field, what was found and what was expected. The tensor
path runs them all before anything is computed; the fused CPU path runs the
cheap structural part first and the [B, T] value checks inside its kernels,
re-running `check_batch_values` for the message when a row fails. Either way a
bad batch never produces a half result.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from areal_adv.trainer.ppo.gae import check_turn_ids_type, validate_turn_ids

REQUIRED_KEYS = ("input_ids", "attention_mask", "loss_mask", "logprobs", "rewards")
TOKEN_FLOAT_KEYS = ("logprobs", "values", "ref_logp", "prox_logp", "token_rewards")
KNOWN_TENSOR_KEYS = frozenset((*REQUIRED_KEYS, *TOKEN_FLOAT_KEYS, "turn_ids", "is_truncated"))
#: Fields whose largest |value| bounds the outputs (read in the same pass as the finiteness check).
MAGNITUDE_KEYS = ("values", "token_rewards")


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
        _raise_not_finite(name, t)


def _raise_not_finite(name: str, t: torch.Tensor) -> None:
    bad = ~torch.isfinite(t)
    raise BatchError(f"{name}: expected finite values, found {t[bad][0].item()!r} at {_where(bad)}")


def finite_magnitude(name: str, t: torch.Tensor) -> float:
    """max |t| in one reduction (min and max together); NaN and inf propagate into it."""
    if t.numel() == 0:
        return 0.0
    low, high = torch.aminmax(t)
    magnitude = max(-float(low), float(high))
    if not math.isfinite(magnitude):
        _raise_not_finite(name, t)
    return magnitude


@dataclass(frozen=True)
class BatchStats:
    """What validation learnt about the batch on the way: the largest |value| of some fields.

    The output guard (`output_guard`) bounds every output from these numbers
    and the config, so it rarely has to read an output tensor again. The tensor
    path gets them from `check_batch_values`; the fused path from its kernels.
    """

    n_rows: int
    n_pos: int
    max_abs: Mapping[str, float]

    def magnitude(self, key: str) -> float:
        """Largest |value| of `key` (0 when the batch has no such field)."""
        return self.max_abs.get(key, 0.0)


def _check_presence(data: Mapping[str, Any]) -> None:
    if not isinstance(data, Mapping):
        raise BatchError(f"batch: got {type(data).__name__}, expected a dict of tensors")
    missing = [k for k in REQUIRED_KEYS if k not in data]
    if missing:
        raise BatchError(f"batch: missing required fields {missing} (have {sorted(map(str, data))})")
    for key in REQUIRED_KEYS:
        if data[key] is None:
            raise BatchError(f"{key}: got None, expected a torch.Tensor (a required field cannot be None)")
    for key, value in data.items():
        if key in KNOWN_TENSOR_KEYS and value is not None and not torch.is_tensor(value):
            raise BatchError(f"{key}: got {type(value).__name__}, expected a torch.Tensor")


def _check_devices(data: Mapping[str, Any], device: torch.device) -> None:
    """One device for the whole batch, and a real one: a meta tensor holds no values to compute with."""
    for key, value in data.items():
        if not torch.is_tensor(value):
            continue
        if value.device.type == "meta":
            raise BatchError(
                f"{key}: on device meta (a tensor without data), expected a tensor with values on {device}"
            )
        if value.device != device:
            raise BatchError(f"{key}: on device {value.device}, expected {device} like input_ids")


def _check_dtypes(data: Mapping[str, Any]) -> None:
    """Integer ids, real masks and flags; complex numbers are never valid batch content."""
    for key, value in data.items():
        if torch.is_tensor(value) and key in KNOWN_TENSOR_KEYS and value.is_complex():
            raise BatchError(f"{key}: got dtype {value.dtype}, expected a real tensor (complex values are not valid)")
    ids = data["input_ids"]
    if ids.is_floating_point() or ids.dtype == torch.bool:
        raise BatchError(f"input_ids: got dtype {ids.dtype}, expected an integer tensor (token ids)")
    for key in TOKEN_FLOAT_KEYS:
        value = data.get(key)
        if value is not None and not value.is_floating_point():
            raise BatchError(f"{key}: expected a floating tensor, got {value.dtype}")


def _check_shapes(data: Mapping[str, Any]) -> tuple[int, int]:
    ids = data["input_ids"]
    if ids.dim() != 2:
        raise BatchError(f"input_ids: expected shape [B, T], got {tuple(ids.shape)}")
    B, T = ids.shape
    if B == 0 or T == 0:
        raise BatchError(f"input_ids: expected a non-empty batch, got shape {tuple(ids.shape)}")
    for key in ("attention_mask", "loss_mask", "logprobs", *TOKEN_FLOAT_KEYS, "turn_ids"):
        value = data.get(key)
        if value is not None and tuple(value.shape) != (B, T):
            raise BatchError(f"{key}: expected shape {(B, T)} like input_ids, got {tuple(value.shape)}")
    rewards = data["rewards"]
    components = rewards.ndim == 2 and rewards.shape[0] == B and rewards.shape[1] >= 1
    if tuple(rewards.shape) != (B,) and not components:
        raise BatchError(
            f"rewards: expected one reward per row, shape {(B,)} (or [B, K] reward components "
            f"named by meta.reward_keys), got {tuple(rewards.shape)}"
        )
    truncated = data.get("is_truncated")
    if truncated is not None and tuple(truncated.shape) != (B,):
        raise BatchError(f"is_truncated: expected one flag per row, shape {(B,)}, got {tuple(truncated.shape)}")
    return B, T


def _check_row_fields(data: Mapping[str, Any], n_pos: int) -> None:
    """The [B]-sized checks: finite rewards, binary flags, no generated token at position 0 (a [B] column)."""
    rewards = data["rewards"]
    if rewards.dtype == torch.bool:
        raise BatchError(f"rewards: expected an integer or floating tensor, got {rewards.dtype}")
    _check_finite("rewards", rewards)
    truncated = data.get("is_truncated")
    if truncated is not None:
        _check_binary("is_truncated", truncated)
    loss = data["loss_mask"]
    first = loss[:, 0] != 0
    if bool(first.any()):
        _check_binary("loss_mask", loss)  # a value other than 0/1 is reported as such (error path only)
        raise BatchError(
            f"loss_mask: row {int(first.nonzero()[0])} has a generated token at position 0; a generated "
            "token needs a context (at least one prompt token before it), its aligned mask would wrap into "
            f"the row's last position {n_pos - 1}"
        )


def check_batch_structure(data: Mapping[str, Any], *, recompute_prox: bool) -> tuple[int, int]:
    """The cheap checks: keys, types, shapes, dtypes, devices and the [B]-sized fields; returns (B, T).

    Together with `check_batch_values` this is `check_batch`; the fused CPU pipeline
    runs only this part up front and checks the [B, T] values as it reads them.
    `None` for an optional field means the field is absent; for a required one it
    is an error.
    """
    _check_presence(data)
    _check_dtypes(data)
    n_rows, n_pos = _check_shapes(data)
    _check_devices(data, data["input_ids"].device)
    _check_row_fields(data, n_pos)
    if data.get("turn_ids") is not None:
        check_turn_ids_type(data["turn_ids"], data["loss_mask"])
    if recompute_prox and data.get("prox_logp") is None:
        raise BatchError(
            "prox_logp: actor.recompute_logprob=true (without use_decoupled_loss) needs the recomputed "
            "'prox_logp' [B, T] in the batch, but it is missing"
        )
    return n_rows, n_pos


def check_batch_values(data: Mapping[str, Any]) -> dict[str, float]:
    """The [B, T] value checks (finite floats, binary right-padded masks, turn ids) of a well-formed batch.

    Returns the largest |value| of the `MAGNITUDE_KEYS` present, found in the
    same pass as their finiteness (for the output guard).
    """
    max_abs: dict[str, float] = {}
    for key in TOKEN_FLOAT_KEYS:
        value = data.get(key)
        if value is None:
            continue
        if key in MAGNITUDE_KEYS:
            max_abs[key] = finite_magnitude(key, value)
        else:
            _check_finite(key, value)
    attn, loss = data["attention_mask"], data["loss_mask"]
    _check_binary("attention_mask", attn)
    _check_binary("loss_mask", loss)
    seqlens = attn.long().sum(-1)
    if bool((seqlens < 1).any()):
        raise BatchError(f"attention_mask: every row needs at least one token, row {_where(seqlens < 1)} is empty")
    rising = attn[:, 1:] > attn[:, :-1]  # a 0 followed by a 1
    if bool(rising.any()):
        raise BatchError(
            f"attention_mask: expected right padding (ones then zeros), found a gap before {_where(rising)}"
        )
    if bool((loss > attn).any()):
        outside = loss.bool() & ~attn.bool()
        raise BatchError(f"loss_mask: marks a padding position (attention_mask 0) at {_where(outside)}")
    turn_ids = data.get("turn_ids")
    if turn_ids is not None:
        _check_turn_ids(turn_ids, loss)
    return max_abs


def _check_turn_ids(turn_ids: torch.Tensor, loss: torch.Tensor) -> None:
    """Valid turn ids (`validate_turn_ids`), and fewer than T of them, as AReaL requires."""
    validate_turn_ids(turn_ids, loss)
    n_pos = loss.shape[1]
    too_big = (turn_ids >= n_pos) & (loss != 0)
    if bool(too_big.any()):
        raise BatchError(
            f"turn_ids: turn id {int(turn_ids[too_big][0])} at {_where(too_big)}, expected turn ids < T={n_pos} "
            "(a row of T positions holds fewer than T turns)"
        )


def check_batch(data: Mapping[str, Any], *, recompute_prox: bool) -> BatchStats:
    """Validate shapes, dtypes, devices and values of the batch fields the pipeline reads.

    Returns what the output guard needs to know about the values.
    """
    n_rows, n_pos = check_batch_structure(data, recompute_prox=recompute_prox)
    return BatchStats(n_rows, n_pos, check_batch_values(data))


def check_meta(meta: Any, n_rows: int) -> None:
    """`meta` must be the `TrajBatchMeta` of this batch (from `concat_batch`), references included."""
    from areal_adv.utils.batch_meta import TrajBatchMeta

    if not isinstance(meta, TrajBatchMeta):
        raise BatchError(
            f"meta: got {type(meta).__name__}, expected a TrajBatchMeta (as returned by concat_batch) or None"
        )
    meta.validate(n_rows)
