"""`concat_batch`: per-prompt trajectory groups -> one right-padded batch plus its `TrajBatchMeta`.

Each group's tensors are checked (keys, ranks, dtypes, devices, row counts) before
anything is copied, so a bad group is reported by index and key; the inputs are
never modified.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from areal_adv.utils.batch_meta import RolloutGroup, TrajBatchMeta

__all__ = ["concat_batch"]

#: Padding value of 2-D tensors by key when groups of different lengths are concatenated.
_PAD_VALUES: dict[str, int] = {"turn_ids": -1}
_REQUIRED_KEYS: tuple[str, ...] = ("input_ids", "attention_mask")
_ROLLOUT_GROUP_KEY = "rollout_group"
#: Per-row [rows, K] tensors: concatenated along the rows, never padded (K reward components).
_ROW_MATRIX_KEYS: frozenset[str] = frozenset({"rewards"})
#: Non-tensor entries naming the reward components; every group must agree, they go into the metadata.
_REWARD_NAME_KEYS: tuple[str, ...] = ("reward_keys", "reward_weights")


def _split_trajectory(i: int, traj: Any) -> tuple[dict[str, torch.Tensor], RolloutGroup | None]:
    """Separate one trajectory group's tensors from its RolloutGroup, checking types (reward names skipped)."""
    if not isinstance(traj, Mapping):
        raise ValueError(f"concat_batch: trajectory {i} is {type(traj).__name__}, expected a mapping of tensors")
    tensors: dict[str, torch.Tensor] = {}
    group = None
    for key, value in traj.items():
        if key == _ROLLOUT_GROUP_KEY:
            if value is not None and not isinstance(value, RolloutGroup):
                raise ValueError(
                    f"concat_batch: trajectory {i} key {key!r} is {type(value).__name__}, "
                    "expected a RolloutGroup or None"
                )
            group = value
        elif key in _REWARD_NAME_KEYS:
            continue  # collected by _reward_names
        elif isinstance(value, torch.Tensor):
            tensors[key] = value
        else:
            raise ValueError(
                f"concat_batch: trajectory {i} key {key!r} is {type(value).__name__}, expected a "
                f"torch.Tensor (only {_ROLLOUT_GROUP_KEY!r} and {list(_REWARD_NAME_KEYS)} may be non-tensors)"
            )
    return tensors, group


def _check_trajectory(i: int, tensors: dict[str, torch.Tensor], group: RolloutGroup | None) -> tuple[int, int]:
    """Shape checks within one trajectory group; returns (rows, T)."""
    for key in _REQUIRED_KEYS:
        if key not in tensors:
            raise ValueError(f"concat_batch: trajectory {i} lacks required key {key!r}")
        if tensors[key].ndim != 2:
            raise ValueError(
                f"concat_batch: trajectory {i} key {key!r} has shape {tuple(tensors[key].shape)}, expected [rows, T]"
            )
    rows, seqlen = tensors["input_ids"].shape
    if rows < 1 or seqlen < 1:
        raise ValueError(
            f"concat_batch: trajectory {i} key 'input_ids' has shape {(rows, seqlen)}, "
            "expected at least one row and one position"
        )
    for key, t in tensors.items():
        if t.ndim not in (1, 2):
            raise ValueError(
                f"concat_batch: trajectory {i} key {key!r} has shape {tuple(t.shape)}, expected "
                f"[rows] or [rows, T] with rows={rows}, T={seqlen}"
            )
        if t.shape[0] != rows:
            raise ValueError(
                f"concat_batch: trajectory {i} key {key!r} has {t.shape[0]} rows (shape "
                f"{tuple(t.shape)}), expected {rows} rows like 'input_ids'"
            )
        if t.ndim == 2 and t.shape[1] != seqlen and key not in _ROW_MATRIX_KEYS:
            raise ValueError(
                f"concat_batch: trajectory {i} key {key!r} has length {t.shape[1]}, expected "
                f"T={seqlen} like 'input_ids'"
            )
    if group is not None and group.n_rows != rows:
        raise ValueError(
            f"concat_batch: trajectory {i} key {_ROLLOUT_GROUP_KEY!r}: row_counts "
            f"{list(group.row_counts)} sum to {group.n_rows}, expected the group's {rows} rows"
        )
    return rows, seqlen


def _check_consistent(
    i: int, tensors: dict[str, torch.Tensor], first: dict[str, torch.Tensor], device: torch.device
) -> None:
    """Same keys, ranks, dtypes and device as trajectory 0."""
    if tensors.keys() != first.keys():
        missing = sorted(first.keys() - tensors.keys())
        extra = sorted(tensors.keys() - first.keys())
        raise ValueError(
            f"concat_batch: trajectory {i} has different tensor keys from trajectory 0: "
            f"missing {missing}, unexpected {extra}"
        )
    for key, t in tensors.items():
        ref = first[key]
        if t.ndim != ref.ndim:
            raise ValueError(
                f"concat_batch: trajectory {i} key {key!r} is {t.ndim}-D, expected {ref.ndim}-D like trajectory 0"
            )
        if key in _ROW_MATRIX_KEYS and t.ndim == 2 and t.shape[1] != ref.shape[1]:
            raise ValueError(
                f"concat_batch: trajectory {i} key {key!r} has {t.shape[1]} columns, expected {ref.shape[1]} "
                "like trajectory 0"
            )
        if t.dtype != ref.dtype:
            raise ValueError(
                f"concat_batch: trajectory {i} key {key!r} has dtype {t.dtype}, expected {ref.dtype} like trajectory 0"
            )
        if t.device != device:
            raise ValueError(
                f"concat_batch: trajectory {i} key {key!r} is on {t.device}, expected every tensor on "
                f"{device} like trajectory 0 key 'input_ids'"
            )


def concat_batch(
    trajs: Sequence[Mapping[str, Any]], *, min_positions: int = 0
) -> tuple[dict[str, torch.Tensor], TrajBatchMeta]:
    """Concatenate per-prompt trajectory groups into one right-padded batch plus its layout.

    2-D tensors are right-padded to the longest group, or to `min_positions` when that is
    longer (0, or -1 for `turn_ids`: padding, as after a group shorter than the longest);
    1-D tensors and an [rows, K] `rewards` (K reward components) are concatenated.
    The optional `"rollout_group"` entry of each group goes into the metadata, as
    do `"reward_keys"` / `"reward_weights"` (the components' names and weights). The result is a new dict of new tensors; the inputs are
    left untouched.
    """
    if isinstance(trajs, Mapping) or not isinstance(trajs, Sequence) or len(trajs) == 0:
        raise ValueError(
            f"concat_batch: got {type(trajs).__name__}"
            f"{' of length 0' if isinstance(trajs, Sequence) and not isinstance(trajs, Mapping) else ''}, "
            "expected a non-empty sequence of trajectory-group mappings"
        )
    parts = [_split_trajectory(i, t) for i, t in enumerate(trajs)]
    layout = [_check_trajectory(i, tensors, group) for i, (tensors, group) in enumerate(parts)]
    first = parts[0][0]
    device = first["input_ids"].device
    for i, (tensors, _) in enumerate(parts):
        _check_consistent(i, tensors, first, device)

    sizes = [rows for rows, _ in layout]
    seqlens = [seqlen for _, seqlen in layout]
    max_len = max(*seqlens, min_positions)
    batch_size = sum(sizes)
    out: dict[str, torch.Tensor] = {}
    for key, ref in first.items():
        pieces = [tensors[key] for tensors, _ in parts]
        if ref.ndim == 1 or key in _ROW_MATRIX_KEYS:
            out[key] = torch.cat(pieces, dim=0)
            continue
        padded = torch.full((batch_size, max_len), _PAD_VALUES.get(key, 0), dtype=ref.dtype, device=device)
        start = 0
        for piece in pieces:  # one copy per trajectory group, not per row
            padded[start : start + piece.shape[0], : piece.shape[1]] = piece
            start += piece.shape[0]
        out[key] = padded
    meta = TrajBatchMeta(
        n_trajs=len(parts),
        traj_group_sizes=tuple(sizes),
        traj_seqlens=tuple(seqlens),
        rollout_groups=tuple(group for _, group in parts),
        **_reward_names(trajs),
    )
    return out, meta


def _reward_names(trajs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """`reward_keys` / `reward_weights` of the groups, which must all give the same ones."""
    out: dict[str, Any] = {}
    for name in _REWARD_NAME_KEYS:
        values = [t.get(name) for t in trajs]
        first = values[0]
        for i, value in enumerate(values):
            same = (value is None) == (first is None) and (value is None or tuple(value) == tuple(first))
            if not same:
                raise ValueError(
                    f"concat_batch: trajectory {i} has {name}={value!r}, expected {first!r} like trajectory 0 "
                    "(every prompt group is scored by the same reward components)"
                )
        if first is not None:
            out[name] = tuple(first)
    return out
