"""Fused CPU kernels for token-level normalisation of [B, T] tensors (numba).

`Normalization` on a [B, T] advantage tensor is memory-bound: the plain tensor
formulation materialises half a dozen float64 [B, T] temporaries. These kernels
make three passes over the data with float64 accumulators and no temporaries:
row sums, row sums of squared deviations, and the output. Group / batch
reductions (and the data-parallel all-reduce) stay in `Normalization`, on [B]
vectors. Every element is computed with the same float64 formulas as the tensor
path.
"""

from __future__ import annotations

import numpy as np
import torch

try:
    import numba

    NUMBA_AVAILABLE = True
except ImportError:  # pragma: no cover - numba is a declared dependency
    NUMBA_AVAILABLE = False


def _row_sums(x, m, has_mask, weight, total):
    """weight[b] = sum_t m, total[b] = sum_t x*m (float64)."""
    for b in numba.prange(x.shape[0]):
        w = 0.0
        s = 0.0
        for t in range(x.shape[1]):
            mt = np.float64(m[b, t]) if has_mask else 1.0
            w += mt
            s += np.float64(x[b, t]) * mt
        weight[b] = w
        total[b] = s


def _mean_at(xt, mt, loo, has_mask, row_mean, row_total, row_count, row_self):
    """The baseline of one element (plain, leave-one-out, or the element itself)."""
    if row_self:
        return xt
    if not loo:
        return row_mean
    if row_count <= 1.0:
        return 0.0
    if has_mask:
        return (row_total - xt * mt) / max(row_count - mt, 1.0)
    return (row_total - xt) / max(row_count - 1.0, 1.0)


def _row_squares(x, m, has_mask, loo, row_mean, row_total, row_count, row_self, squares):
    """squares[b] = sum_t ((x - mean) * m)^2 (float64)."""
    for b in numba.prange(x.shape[0]):
        acc = 0.0
        for t in range(x.shape[1]):
            xt = np.float64(x[b, t])
            mt = np.float64(m[b, t]) if has_mask else 1.0
            c = (xt - _mean_at(xt, mt, loo, has_mask, row_mean[b], row_total[b], row_count[b], row_self[b])) * mt
            acc += c * c
        squares[b] = acc


def _normalise(x, m, has_mask, loo, row_mean, row_total, row_count, row_self, denom, out):
    """out = ((x - mean) * m) / denom, computed in float64 and stored as float32."""
    for b in numba.prange(x.shape[0]):
        d = denom[b]
        for t in range(x.shape[1]):
            xt = np.float64(x[b, t])
            mt = np.float64(m[b, t]) if has_mask else 1.0
            c = (xt - _mean_at(xt, mt, loo, has_mask, row_mean[b], row_total[b], row_count[b], row_self[b])) * mt
            out[b, t] = np.float32(c / d)


if NUMBA_AVAILABLE:
    _mean_at = numba.njit(cache=True, inline="always")(_mean_at)
    _row_sums = numba.njit(cache=True, parallel=True)(_row_sums)
    _row_squares = numba.njit(cache=True, parallel=True)(_row_squares)
    _normalise = numba.njit(cache=True, parallel=True)(_normalise)


def fused_available(x: torch.Tensor) -> bool:
    """The fused path handles 2-D float32/float64 CPU tensors."""
    return NUMBA_AVAILABLE and x.ndim == 2 and x.device.type == "cpu" and x.dtype in (torch.float32, torch.float64)


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().contiguous().numpy()


def _mask_np(x: torch.Tensor, mask: torch.Tensor | None) -> tuple[np.ndarray, bool]:
    if mask is None:
        return np.ones((1, 1), dtype=np.float32), False
    if mask.dtype not in (torch.float32, torch.float64):
        mask = mask.to(torch.float32)
    return _np(mask), True


class RowStats:
    """Per-row inputs of the element baseline, as float64 numpy vectors."""

    def __init__(self, n_rows: int, loo: bool, mean: torch.Tensor, total: torch.Tensor,
                 count: torch.Tensor, row_self: torch.Tensor):
        self.loo = loo
        self.mean = _np(torch.broadcast_to(mean.to(torch.float64), (n_rows,)))
        self.total = _np(torch.broadcast_to(total.to(torch.float64), (n_rows,)))
        self.count = _np(torch.broadcast_to(count.to(torch.float64), (n_rows,)))
        self.row_self = _np(torch.broadcast_to(row_self, (n_rows,)))


def row_sums(x: torch.Tensor, mask: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """(weight[B], total[B]) in float64."""
    weight = torch.empty(x.shape[0], dtype=torch.float64)
    total = torch.empty(x.shape[0], dtype=torch.float64)
    m, has_mask = _mask_np(x, mask)
    _row_sums(_np(x), m, has_mask, weight.numpy(), total.numpy())
    return weight, total


def row_squares(x: torch.Tensor, mask: torch.Tensor | None, stats: RowStats) -> torch.Tensor:
    """Per-row sum of squared, masked deviations from each element's baseline."""
    squares = torch.empty(x.shape[0], dtype=torch.float64)
    m, has_mask = _mask_np(x, mask)
    _row_squares(_np(x), m, has_mask, stats.loo, stats.mean, stats.total, stats.count, stats.row_self,
                 squares.numpy())
    return squares


def normalise(x: torch.Tensor, mask: torch.Tensor | None, stats: RowStats, denom: torch.Tensor) -> torch.Tensor:
    """((x - mean) * mask) / denom as a new float32 tensor."""
    out = torch.empty(x.shape, dtype=torch.float32)
    m, has_mask = _mask_np(x, mask)
    denom = _np(torch.broadcast_to(denom.to(torch.float64), (x.shape[0],)))
    _normalise(_np(x), m, has_mask, stats.loo, stats.mean, stats.total, stats.count, stats.row_self,
               denom, out.numpy())
    return out
