"""Micro-batches: a batch's rows in consecutive chunks, so one forward never holds the whole batch's activations.

`actor.ppo_micro_batch_size` (verl's `ppo_micro_batch_size_per_gpu`: rows per
forward on each rank) bounds the rows of every forward of the policy and the
reference: the training forward (its gradients accumulated over the chunks
before one optimiser step) and the no-grad log-prob passes. Peak activation
memory then scales with the micro-batch, not with the batch.

Data parallelism: every rank runs the same number of chunks (FSDP2 makes each
forward a collective; the engine agrees on finiteness before each backward), so
the count is agreed over ranks: enough chunks for the largest rank's rows, but
never more than the smallest rank's rows (a rank cannot run an empty chunk).
When the ranks' row counts differ a lot, the larger ranks' chunks may then
exceed the size by a few rows.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.distributed as dist

from areal_adv.trainer.parallel.distributed import DistContext, all_reduce_tensor


def near_equal_slices(n_rows: int, n_slices: int) -> list[slice]:
    """Contiguous, near-equal row slices; never more slices than rows, none empty."""
    n = max(1, min(n_slices, n_rows))
    bounds = [round(i * n_rows / n) for i in range(n + 1)]
    return [slice(bounds[i], bounds[i + 1]) for i in range(n)]


def micro_slices(n_rows: int, size: int | None, ctx: DistContext | None = None) -> list[slice]:
    """Row slices of at most `size` rows each (None: one slice), as many on every rank of `ctx`."""
    if size is None:
        return [slice(0, n_rows)]
    count = math.ceil(n_rows / size)
    if ctx is not None and ctx.is_distributed:
        # one all-reduce: the largest count and (negated) the smallest row count
        agreed = all_reduce_tensor(torch.tensor([count, -n_rows], dtype=torch.float64), ctx, dist.ReduceOp.MAX)
        count = min(int(agreed[0]), int(-agreed[1]))
    return near_equal_slices(n_rows, count)


def chunked_rows(
    fn: Callable[..., torch.Tensor], slices: list[slice], *rows: torch.Tensor | None, **kwargs: object
) -> torch.Tensor:
    """`fn(*rows, **kwargs)` on each slice of the row tensors (None stays None), concatenated along rows.

    A no-grad pass's output is per row, so chunking changes only how many
    rows are in memory at once.
    """
    if len(slices) == 1:
        return fn(*rows, **kwargs)
    return torch.cat([fn(*(None if r is None else r[sl] for r in rows), **kwargs) for sl in slices])
