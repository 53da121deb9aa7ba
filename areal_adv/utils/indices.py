"""Integer-sequence checks and segment indices shared by batch metadata and normalisation.

Group layouts arrive as lists, tuples or 1-D integer tensors; these helpers turn
them into plain int tuples with errors that name the field, and build the
member -> segment index with one vectorised call instead of a loop over rows.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

import torch

__all__ = ["as_int", "index_from_counts", "int_tuple"]


def as_int(value: Any) -> int | None:
    """An integer value as a Python int (bools excluded), or None when it is not one."""
    if isinstance(value, bool):
        return None
    if isinstance(value, torch.Tensor):
        if value.numel() != 1 or value.dtype.is_floating_point or value.dtype == torch.bool:
            return None
        return int(value.item())
    try:
        return operator.index(value)
    except TypeError:
        return None


def int_tuple(field: str, values: Any, *, minimum: int, allow_empty: bool = False) -> tuple[int, ...]:
    """Convert a sequence (list, tuple, 1-D integer tensor) of ints, each >= minimum, to a tuple."""
    if isinstance(values, (tuple, list)) and values and set(map(type, values)) == {int} and min(values) >= minimum:
        return tuple(values)  # fast path: already plain ints (checked at C speed)
    if isinstance(values, torch.Tensor):
        if values.ndim != 1 or values.dtype.is_floating_point or values.dtype == torch.bool:
            raise ValueError(
                f"{field}: got a tensor of shape {tuple(values.shape)} and dtype {values.dtype}, "
                "expected a sequence of integers"
            )
        values = values.tolist()
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise ValueError(f"{field}: got {values!r} ({type(values).__name__}), expected a sequence of integers")
    out = []
    for i, v in enumerate(values):
        iv = as_int(v)
        if iv is None:
            raise ValueError(f"{field}[{i}]: got {v!r} ({type(v).__name__}), expected an integer >= {minimum}")
        if iv < minimum:
            raise ValueError(f"{field}[{i}]: got {iv}, expected an integer >= {minimum}")
        out.append(iv)
    if not out and not allow_empty:
        raise ValueError(f"{field}: got an empty sequence, expected at least one entry")
    return tuple(out)


def index_from_counts(counts: Sequence[int], device: torch.device | str | None) -> torch.Tensor:
    """Index i repeated counts[i] times: maps each member to its segment, vectorised."""
    counts = list(counts)
    repeats = torch.as_tensor(counts, dtype=torch.long, device=device)
    # output_size spares an accelerator a device->host sync to size the result
    return torch.repeat_interleave(torch.arange(len(counts), device=device), repeats, output_size=sum(counts))
