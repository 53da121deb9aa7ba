"""Fused CPU kernels for token-level normalisation of [B, T] tensors (numba).

`Normalization` on a [B, T] advantage tensor is memory-bound: the plain tensor
formulation materialises half a dozen float64 [B, T] temporaries. These kernels
make three passes over the data with float64 accumulators and no temporaries:
row sums, row sums of squared deviations, and the output. Group / batch
reductions (and the data-parallel all-reduce) stay in `Normalization`, on [B]
vectors. Every element is computed with the same float64 formulas as the tensor
path.

Each row is one call of a small loop that the compiler vectorises: the
reductions may be reassociated (numba fastmath "reassoc" only; a single running
float64 sum is a chain of dependent additions, about 4 cycles per element), and
rows whose baseline is one number take a loop without the leave-one-out branch.
The fused advantage pipeline (`areal_adv.trainer.ppo.kernels.fused_cpu`) produces
its row statistics with the same `masked_row_moments`, so both paths give the same bits.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch

from areal_adv.utils.buffers import empty_cpu

try:
    import numba

    NUMBA_AVAILABLE = True
except ImportError:  # pragma: no cover - numba is a declared dependency
    NUMBA_AVAILABLE = False

# The row reductions may be reassociated (fastmath "reassoc"), which lets the compiler
# vectorise them; nothing else is relaxed (NaN and inf keep their meaning). The order
# is fixed by the compiled code, so every caller of these functions gets the same bits.
_REDUCTION = {"reassoc"}

#: Below this many elements a pass runs on the calling thread (as the GAE kernels do).
PARALLEL_MIN_ELEMENTS = 1 << 18


def masked_row_sums(x, m):
    """(sum m, sum x*m) of one row in float64.

    The fused advantage pipeline (`areal_adv.trainer.ppo.kernels.fused_cpu`) calls
    this too, so its row sums are bit for bit those of `Normalization`.
    """
    weight = 0.0
    total = 0.0
    for t in range(x.shape[0]):
        mt = np.float64(m[t])
        weight += mt
        total += np.float64(x[t]) * mt
    return weight, total


def masked_row_moments(x, m):
    """(sum m, sum x*m, M2, C, Q) of one row in float64, about the row's own mean mu.

    M2 = sum ((x - mu) m)^2, C = sum (x - mu) m^2, Q = sum m^2, so that for any
    baseline b the squared deviations are sum ((x - b) m)^2 = M2 + 2 (mu - b) C
    + (mu - b)^2 Q exactly (and C is ~0 for a 0/1 mask). One pass over the row
    after the sums, while it is still in cache, replaces a later pass over
    memory once the group or batch mean is known; no large terms cancel.
    """
    weight, total = masked_row_sums(x, m)
    mu = total / weight if weight != 0.0 else 0.0
    m2 = 0.0
    cross = 0.0
    q = 0.0
    for t in range(x.shape[0]):
        mt = np.float64(m[t])
        d = np.float64(x[t]) - mu
        c = d * mt
        m2 += c * c
        cross += c * mt
        q += mt * mt
    return weight, total, m2, cross, q


def _moments_row(b, x, m, out):
    """out[:, b] = masked_row_moments of row b."""
    out[0, b], out[1, b], out[2, b], out[3, b], out[4, b] = masked_row_moments(x[b], m[b])


def _row_total(x):
    """sum x of one row in float64 (no mask)."""
    total = 0.0
    for t in range(x.shape[0]):
        total += np.float64(x[t])
    return total


def _sums_row(b, x, m, has_mask, weight, total):
    """weight[b] = sum_t m, total[b] = sum_t x*m (float64)."""
    if has_mask:
        weight[b], total[b] = masked_row_sums(x[b], m[b])
    else:
        weight[b] = np.float64(x.shape[1])
        total[b] = _row_total(x[b])


def _loo_mean(xt, mt, has_mask, row_total, row_count):
    """Leave-one-out baseline of one element (0 for a pool of at most one)."""
    if row_count <= 1.0:
        return 0.0
    if has_mask:
        return (row_total - xt * mt) / max(row_count - mt, 1.0)
    return (row_total - xt) / max(row_count - 1.0, 1.0)


def _squares_plain(x, m, has_mask, mean):
    """sum ((x - mean) * m)^2 over one row, one baseline for the row."""
    acc = 0.0
    for t in range(x.shape[0]):
        c = np.float64(x[t]) - mean
        if has_mask:
            c = c * np.float64(m[t])
        acc += c * c
    return acc


def _squares_loo(x, m, has_mask, row_total, row_count):
    """sum ((x - leave-one-out baseline) * m)^2 over one row."""
    acc = 0.0
    for t in range(x.shape[0]):
        xt = np.float64(x[t])
        mt = np.float64(m[t]) if has_mask else 1.0
        c = (xt - _loo_mean(xt, mt, has_mask, row_total, row_count)) * mt
        acc += c * c
    return acc


def _squares_self(x, m, has_mask):
    """A row that is its own baseline: sum ((x - x) * m)^2 (0 for finite x)."""
    acc = 0.0
    for t in range(x.shape[0]):
        xt = np.float64(x[t])
        c = (xt - xt) * (np.float64(m[t]) if has_mask else 1.0)
        acc += c * c
    return acc


def _squares_row(b, x, m, has_mask, loo, row_mean, row_total, row_count, row_self, squares):
    """squares[b] = sum_t ((x - mean) * m)^2 (float64); a row that is its own baseline gives 0."""
    mb = m[b] if has_mask else m[0]
    if row_self[b]:
        squares[b] = _squares_self(x[b], mb, has_mask)
    elif loo:
        squares[b] = _squares_loo(x[b], mb, has_mask, row_total[b], row_count[b])
    else:
        squares[b] = _squares_plain(x[b], mb, has_mask, row_mean[b])


def _normalise_plain(x, m, has_mask, mean, d, out):
    """out = float32(((x - mean) * m) / d) over one row, one baseline for the row."""
    for t in range(x.shape[0]):
        c = np.float64(x[t]) - mean
        if has_mask:
            c = c * np.float64(m[t])
        out[t] = np.float32(c / d)


def _normalise_loo(x, m, has_mask, row_total, row_count, d, out):
    """out = float32(((x - leave-one-out baseline) * m) / d) over one row."""
    for t in range(x.shape[0]):
        xt = np.float64(x[t])
        mt = np.float64(m[t]) if has_mask else 1.0
        out[t] = np.float32((xt - _loo_mean(xt, mt, has_mask, row_total, row_count)) * mt / d)


def _normalise_self(x, m, has_mask, d, out):
    """A row that is its own baseline: ((x - x) * m) / d (0 for finite x)."""
    for t in range(x.shape[0]):
        xt = np.float64(x[t])
        out[t] = np.float32((xt - xt) * (np.float64(m[t]) if has_mask else 1.0) / d)


def _normalise_row(b, x, m, has_mask, loo, row_mean, row_total, row_count, row_self, denom, out):
    """out[b] = ((x[b] - mean) * m) / denom, computed in float64 and stored as float32."""
    mb = m[b] if has_mask else m[0]
    if row_self[b]:
        _normalise_self(x[b], mb, has_mask, denom[b], out[b])
    elif loo:
        _normalise_loo(x[b], mb, has_mask, row_total[b], row_count[b], denom[b], out[b])
    else:
        _normalise_plain(x[b], mb, has_mask, row_mean[b], denom[b], out[b])


# Each pass over rows as two drivers: rows in parallel for large inputs, on the
# calling thread for small ones (a parallel region costs a scheduler time slice
# when the cores are busy). Separate Python functions, not one compiled twice:
# numba's disk cache keys entries by function, not by the `parallel` flag.


def _moments_parallel(x, m, out):
    for b in numba.prange(x.shape[0]):
        _moments_row(b, x, m, out)


def _moments_serial(x, m, out):
    for b in range(x.shape[0]):
        _moments_row(b, x, m, out)


def _sums_parallel(x, m, has_mask, weight, total):
    for b in numba.prange(x.shape[0]):
        _sums_row(b, x, m, has_mask, weight, total)


def _sums_serial(x, m, has_mask, weight, total):
    for b in range(x.shape[0]):
        _sums_row(b, x, m, has_mask, weight, total)


def _squares_parallel(x, m, has_mask, loo, row_mean, row_total, row_count, row_self, squares):
    for b in numba.prange(x.shape[0]):
        _squares_row(b, x, m, has_mask, loo, row_mean, row_total, row_count, row_self, squares)


def _squares_serial(x, m, has_mask, loo, row_mean, row_total, row_count, row_self, squares):
    for b in range(x.shape[0]):
        _squares_row(b, x, m, has_mask, loo, row_mean, row_total, row_count, row_self, squares)


def _normalise_parallel(x, m, has_mask, loo, row_mean, row_total, row_count, row_self, denom, out):
    for b in numba.prange(x.shape[0]):
        _normalise_row(b, x, m, has_mask, loo, row_mean, row_total, row_count, row_self, denom, out)


def _normalise_serial(x, m, has_mask, loo, row_mean, row_total, row_count, row_self, denom, out):
    for b in range(x.shape[0]):
        _normalise_row(b, x, m, has_mask, loo, row_mean, row_total, row_count, row_self, denom, out)


if NUMBA_AVAILABLE:
    _reduce = numba.njit(cache=True, nogil=True, fastmath=_REDUCTION)
    _jit = numba.njit(cache=True, nogil=True)
    masked_row_sums = _reduce(masked_row_sums)
    masked_row_moments = _reduce(masked_row_moments)
    _row_total = _reduce(_row_total)
    _squares_plain = _reduce(_squares_plain)
    _squares_loo = _reduce(_squares_loo)
    _squares_self = _reduce(_squares_self)
    _loo_mean = numba.njit(cache=True, inline="always")(_loo_mean)
    _normalise_plain = _jit(_normalise_plain)
    _normalise_loo = _jit(_normalise_loo)
    _normalise_self = _jit(_normalise_self)
    _moments_row = _jit(_moments_row)
    _sums_row = _jit(_sums_row)
    _squares_row = _jit(_squares_row)
    _normalise_row = _jit(_normalise_row)
    _par = numba.njit(cache=True, nogil=True, parallel=True)
    _PASSES = {
        ("moments", True): _par(_moments_parallel),
        ("moments", False): _jit(_moments_serial),
        ("sums", True): _par(_sums_parallel),
        ("sums", False): _jit(_sums_serial),
        ("squares", True): _par(_squares_parallel),
        ("squares", False): _jit(_squares_serial),
        ("normalise", True): _par(_normalise_parallel),
        ("normalise", False): _jit(_normalise_serial),
    }


def _pass(name: str, x: torch.Tensor):
    """The parallel driver for inputs of PARALLEL_MIN_ELEMENTS or more and more than one numba
    thread, else the serial one (with one thread, a parallel region waits for the pool's idle
    threads, a scheduler time slice on busy cores; see `kernels.numba_cpu.use_parallel`)."""
    parallel = x.shape[0] > 1 and x.numel() >= PARALLEL_MIN_ELEMENTS and numba.get_num_threads() > 1
    return _PASSES[(name, parallel)]


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

    def __init__(
        self,
        n_rows: int,
        loo: bool,
        mean: torch.Tensor,
        total: torch.Tensor,
        count: torch.Tensor,
        row_self: torch.Tensor,
    ):
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
    _pass("sums", x)(_np(x), m, has_mask, weight.numpy(), total.numpy())
    return weight, total


class RowMoments(NamedTuple):
    """Per-row float64 [B] moments of x under a mask (see `masked_row_moments`)."""

    weight: torch.Tensor
    total: torch.Tensor
    m2: torch.Tensor
    cross: torch.Tensor
    mask_squares: torch.Tensor

    def squares_about(self, baseline: torch.Tensor) -> torch.Tensor:
        """sum ((x - baseline) m)^2 per row, for one baseline per row (0-d or [B])."""
        mu = torch.where(self.weight != 0, self.total / self.weight, torch.zeros_like(self.total))
        d = mu - baseline
        return self.m2 + 2.0 * d * self.cross + d * d * self.mask_squares


def row_moments(x: torch.Tensor, mask: torch.Tensor) -> RowMoments:
    """`masked_row_moments` of every row of a [B, T] CPU tensor."""
    out = np.empty((5, x.shape[0]), dtype=np.float64)
    m, _ = _mask_np(x, mask)
    _pass("moments", x)(_np(x), m, out)
    return RowMoments(*torch.from_numpy(out).unbind(0))


def row_squares(x: torch.Tensor, mask: torch.Tensor | None, stats: RowStats) -> torch.Tensor:
    """Per-row sum of squared, masked deviations from each element's baseline."""
    squares = torch.empty(x.shape[0], dtype=torch.float64)
    m, has_mask = _mask_np(x, mask)
    _pass("squares", x)(
        _np(x), m, has_mask, stats.loo, stats.mean, stats.total, stats.count, stats.row_self, squares.numpy()
    )
    return squares


def normalise(x: torch.Tensor, mask: torch.Tensor | None, stats: RowStats, denom: torch.Tensor) -> torch.Tensor:
    """((x - mean) * mask) / denom as a new float32 tensor (not in place: aliasing stops vectorisation)."""
    out = empty_cpu(tuple(x.shape))
    m, has_mask = _mask_np(x, mask)
    denom = torch.broadcast_to(denom.to(torch.float64), (x.shape[0],))
    # numba's division raises ZeroDivisionError where torch gives inf / NaN; a zero
    # denominator (eps 0 with a zero std, reachable only past config validation)
    # makes the row NaN instead, so the output guard reports it with its cause.
    denom = _np(torch.where(denom == 0, torch.nan, denom))
    _pass("normalise", x)(
        _np(x), m, has_mask, stats.loo, stats.mean, stats.total, stats.count, stats.row_self, denom, out.numpy()
    )
    return out
