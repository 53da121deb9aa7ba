"""`Normalization`: AReaL's mean/std normalisation at batch, group or no level.

Statistics are float64 and token-weighted by the loss mask; groups are
variable-size slices of consecutive rows taken from the batch metadata; batch
statistics are all-reduced across data-parallel ranks. [B, T] CPU inputs go
through the fused numba passes of `areal_adv.utils.norm_kernels`; everything else
through a fixed number of vectorised tensor ops (no loop over rows or groups).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch
import torch.distributed as dist

from areal_adv.utils import norm_kernels
from areal_adv.utils.call_agreement import before_collective, one_exchange
from areal_adv.utils.collectives import collectives_active
from areal_adv.utils.indices import index_from_counts, int_tuple

__all__ = ["NORM_SETTINGS", "NormSettings", "Normalization"]

#: What `Normalization` reads of its config (`areal_adv.api.cli_args.NormConfig` has them all).
NORM_SETTINGS = ("mean_level", "std_level", "mean_leave1out", "std_unbiased", "eps", "fallback_group_size")


class NormSettings(Protocol):
    """The settings of a normalisation: `NormConfig`'s, read here without importing the config layer above."""

    mean_level: str | None
    std_level: str | None
    mean_leave1out: bool
    std_unbiased: bool
    eps: float

    @property
    def fallback_group_size(self) -> int: ...


def _dist_active() -> bool:
    return collectives_active()


@dataclass(frozen=True)
class _GroupLayout:
    """Row -> group index and which groups have a single logical member."""

    row_group: torch.Tensor  # LongTensor[B]
    n_groups: int
    singleton: torch.Tensor | None  # BoolTensor[n_groups], None when no group is a singleton


class Normalization:
    """x̂ = (x − mean) / (std + eps), mean and std over the batch, the group or nothing (AReaL's `Normalization`).

    With `mean_leave1out` each row's mean leaves the row's own values out, as RLOO's baseline
    mean_{j≠i} x_j (arXiv:2402.14740); std divides by n − 1 or n per `std_unbiased`.
    Reference code: AReaL's `areal.utils.data.Normalization`.

    Statistics are float64 and token-weighted by the loss mask. Groups are slices of
    consecutive rows of variable size (from the batch metadata); batch-level
    statistics are all-reduced across data-parallel ranks. One deliberate change from
    AReaL 1.0.4: a group with a single logical member uses the row itself as its
    leave-one-out baseline (normalising to 0) and std 1 when the std is unbiased.
    """

    def __init__(self, config: NormSettings):
        missing = [name for name in NORM_SETTINGS if not hasattr(config, name)]
        if missing:
            raise ValueError(f"Normalization: got {type(config).__name__}, expected a NormConfig (it lacks {missing})")
        self.config = config
        self.mean_level = config.mean_level
        self.std_level = config.std_level
        self.mean_leave1out = config.mean_leave1out
        self.std_unbiased = config.std_unbiased
        self.eps = float(config.eps)
        self.group_size = config.fallback_group_size

    # -- public API ----------------------------------------------------------

    @torch.no_grad()
    def __call__(
        self,
        x: torch.Tensor,
        loss_mask: torch.Tensor | None = None,
        *,
        group_sizes: Sequence[int] | torch.Tensor | None = None,
        logical_group_sizes: Sequence[int] | torch.Tensor | None = None,
        reduce_group: Any = None,
        row_moments: norm_kernels.RowMoments | None = None,
    ) -> torch.Tensor:
        """Normalised float32 copy of x: ((x - mean) * mask) / denom.

        A mask without any active element returns x as float32, unchanged; in batch mode
        the rank still joins the all-reduce so the other ranks do not hang.
        `row_moments` are x's per-row moments under the mask, as
        `norm_kernels.masked_row_moments` forms them: a fused producer of x (the
        advantage pipeline) passes them to spare the statistics passes over x; only the
        fused CPU path uses them.
        """
        _check_norm_inputs(x, loss_mask)
        layout = self._layout(x, group_sizes, logical_group_sizes)
        fused = norm_kernels.fused_available(x) and (loss_mask is None or loss_mask.device.type == "cpu")
        if row_moments is not None:
            _check_row_moments(row_moments, x, loss_mask)
        if loss_mask is None:
            inactive = False
        elif fused and row_moments is not None:
            inactive = float(row_moments.weight.sum()) == 0
        else:
            inactive = loss_mask.sum().item() == 0
        if inactive and not (_dist_active() and "batch" in (self.mean_level, self.std_level)):
            return x.to(torch.float32, copy=True)  # a copy: the caller may edit the result in place
        with one_exchange():  # mean and std reductions: one status exchange (areal_adv.utils.call_agreement)
            if fused:
                result = self._fused(x, loss_mask, layout, reduce_group, row_moments)
            else:
                _, denom, centered = self._compute(x, loss_mask, layout, reduce_group)
                result = (centered / denom).float()
        return x.to(torch.float32, copy=True) if inactive else result

    @torch.no_grad()
    def statistics(
        self,
        x: torch.Tensor,
        loss_mask: torch.Tensor | None = None,
        *,
        group_sizes: Sequence[int] | torch.Tensor | None = None,
        logical_group_sizes: Sequence[int] | torch.Tensor | None = None,
        reduce_group: Any = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(mean, denom), float64 with x's shape, such that __call__ = ((x - mean) * mask) / denom.

        `denom` is std + eps (1 when std_level is None). Exposed so callers can normalise
        per-logical-rollout references and map the statistics back to rows. Unlike
        __call__, an all-masked input still gets statistics (mean 0, std 1).
        """
        _check_norm_inputs(x, loss_mask)
        layout = self._layout(x, group_sizes, logical_group_sizes)
        with one_exchange():
            mean, denom, _ = self._compute(x, loss_mask, layout, reduce_group)
        return (torch.broadcast_to(mean, x.shape).contiguous(), torch.broadcast_to(denom, x.shape).contiguous())

    # -- internals -----------------------------------------------------------

    def _layout(
        self,
        x: torch.Tensor,
        group_sizes: Sequence[int] | torch.Tensor | None,
        logical_group_sizes: Sequence[int] | torch.Tensor | None,
    ) -> _GroupLayout | None:
        """Validated row->group layout; None when no level needs groups."""
        batch = x.shape[0]
        sizes = None
        if group_sizes is not None:
            sizes = int_tuple("Normalization group_sizes", group_sizes, minimum=1, allow_empty=True)
            if sum(sizes) != batch:
                raise ValueError(
                    f"Normalization group_sizes: sizes sum to {sum(sizes)} rows, expected the batch "
                    f"size {batch} (x has shape {tuple(x.shape)})"
                )
        logical = None
        if logical_group_sizes is not None:
            logical = int_tuple("Normalization logical_group_sizes", logical_group_sizes, minimum=1, allow_empty=True)
        if sizes is None and "group" in (self.mean_level, self.std_level) and batch % self.group_size:
            raise ValueError(
                f"NormConfig.group_size: batch size {batch} is not divisible by group_size="
                f"{self.group_size}; pass group_sizes from the batch metadata (TrajBatchMeta) "
                "for variable-size groups"
            )
        if sizes is None:
            sizes = (self.group_size,) * (batch // self.group_size)
        if logical is not None:
            if len(logical) != len(sizes):
                raise ValueError(
                    f"Normalization logical_group_sizes: got {len(logical)} sizes, expected one per "
                    f"group ({len(sizes)})"
                )
            for g, (members, rows) in enumerate(zip(logical, sizes)):
                if members > rows:
                    raise ValueError(
                        f"Normalization logical_group_sizes[{g}]: got {members}, expected at most the "
                        f"group's {rows} rows (each logical rollout has at least one row)"
                    )
        if "group" not in (self.mean_level, self.std_level):
            return None
        device = x.device
        if len(set(sizes)) == 1:  # uniform groups: no repeat_interleave needed
            row_group = torch.arange(batch, device=device) // sizes[0]
        else:
            row_group = index_from_counts(sizes, device)
        members = logical if logical is not None else sizes
        singleton = None
        if 1 in members:
            singleton = torch.tensor([m == 1 for m in members], dtype=torch.bool, device=device)
        return _GroupLayout(row_group=row_group, n_groups=len(sizes), singleton=singleton)

    def _fused(
        self,
        x: torch.Tensor,
        loss_mask: torch.Tensor | None,
        layout: _GroupLayout | None,
        reduce_group: Any,
        moments: norm_kernels.RowMoments | None = None,
    ) -> torch.Tensor:
        """`_compute` for [B, T] CPU tensors with fused numba passes and no [B, T] temporaries.

        Same float64 formulas, element by element; only [B]-sized statistics are
        reduced (and all-reduced) here. With a mask and one baseline per row (no
        leave-one-out), the squared deviations come from the row moments, so the
        data is read twice (moments, output) instead of three times.
        """
        n_rows = x.shape[0]

        def spread(value: torch.Tensor) -> torch.Tensor:
            return value if value.ndim == 0 else value.index_select(0, layout.row_group)

        zero = torch.zeros((), dtype=torch.float64)
        row_self = torch.zeros((), dtype=torch.bool)
        plain_baseline = loss_mask is not None and not self.mean_leave1out and self.std_level is not None
        if moments is None and plain_baseline:
            moments = norm_kernels.row_moments(x, loss_mask)
        if moments is not None:
            weight, row_total = moments.weight, moments.total
        else:
            weight, row_total = norm_kernels.row_sums(x, loss_mask)
        counts: dict[str, torch.Tensor] = {}
        if self.mean_level is None:
            stats = norm_kernels.RowStats(n_rows, False, zero, zero, zero, row_self)
        else:
            count, total = self._reduce(self.mean_level, [weight, row_total], layout, reduce_group)
            counts[self.mean_level] = count
            if self.mean_leave1out:
                if self.mean_level == "group" and layout.singleton is not None:
                    row_self = spread(layout.singleton)  # a singleton's baseline is itself
                stats = norm_kernels.RowStats(n_rows, True, zero, spread(total), spread(count), row_self)
            else:
                mean = (total / count).masked_fill_(count == 0, 0.0)
                stats = norm_kernels.RowStats(n_rows, False, spread(mean), zero, zero, row_self)
        if self.std_level is None:
            return norm_kernels.normalise(x, loss_mask, stats, torch.ones((), dtype=torch.float64))
        if plain_baseline:
            squares = moments.squares_about(torch.from_numpy(stats.mean))
        else:
            squares = norm_kernels.row_squares(x, loss_mask, stats)
        if self.std_level in counts:
            count = counts[self.std_level]
            (sq_total,) = self._reduce(self.std_level, [squares], layout, reduce_group)
        else:
            count, sq_total = self._reduce(self.std_level, [weight, squares], layout, reduce_group)
        denom = spread(self._std(count, sq_total, layout) + self.eps)
        return norm_kernels.normalise(x, loss_mask, stats, denom)

    def _std(self, count: torch.Tensor, sq_total: torch.Tensor, layout: _GroupLayout | None) -> torch.Tensor:
        """Std from pooled counts and squared deviations, with AReaL's fallbacks to 1."""
        if self.std_unbiased:
            std = torch.sqrt(sq_total / (count - 1))
            fallback = count <= 1
            if self.std_level == "group" and layout.singleton is not None:
                fallback = fallback | layout.singleton
        else:
            std = torch.sqrt(sq_total / count)
            fallback = count == 0
        return std.masked_fill_(fallback, 1.0)

    @staticmethod
    def _reduce(
        level: str, rows: list[torch.Tensor], layout: _GroupLayout | None, reduce_group: Any
    ) -> list[torch.Tensor]:
        """Sum per-row quantities over the batch (all-reduced, 0-d) or into groups ([n_groups])."""
        if level == "batch":
            totals = torch.stack([r.sum() for r in rows])
            if _dist_active():
                if reduce_group is None:
                    before_collective()  # the ranks agree on any failure first (areal_adv.utils.call_agreement)
                dist.all_reduce(totals, op=dist.ReduceOp.SUM, group=reduce_group)
            return list(totals.unbind(0))
        assert layout is not None
        return [
            torch.zeros(layout.n_groups, dtype=r.dtype, device=r.device).index_add_(0, layout.row_group, r)
            for r in rows
        ]

    def _compute(
        self,
        x: torch.Tensor,
        loss_mask: torch.Tensor | None,
        layout: _GroupLayout | None,
        reduce_group: Any,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(mean, denom, centered): mean/denom broadcastable to x, centered = (x - mean) * mask.

        Statistics are formed per group ([n_groups]) or per batch (0-d) and spread to
        rows once, so the cost is a fixed number of tensor ops whatever the layout.
        """
        x64 = x.to(torch.float64)
        mask = None if loss_mask is None else loss_mask.to(torch.float64)
        x_masked = x64 if mask is None else x64 * mask
        if mask is None:
            row_weight = torch.full(
                (x.shape[0],), float(x[0].numel()) if x.shape[0] else 0.0, dtype=torch.float64, device=x.device
            )
        else:
            row_weight = _row_sums(mask)

        def spread(value: torch.Tensor) -> torch.Tensor:
            """A batch (0-d) or per-group ([n_groups]) statistic, broadcastable to x."""
            if value.ndim == 0:
                return value
            value = value.index_select(0, layout.row_group)
            return value if x.ndim == 1 else value.unsqueeze(1)

        counts: dict[str, torch.Tensor] = {}
        if self.mean_level is None:
            mean = torch.zeros((), dtype=torch.float64, device=x.device)
        else:
            count, total = self._reduce(self.mean_level, [row_weight, _row_sums(x_masked)], layout, reduce_group)
            counts[self.mean_level] = count
            if self.mean_leave1out:
                mean = _leave_one_out_mean(x_masked, mask, count, total, spread)
                if self.mean_level == "group" and layout.singleton is not None:
                    mean = torch.where(spread(layout.singleton), x64, mean)  # a singleton's baseline is itself
            else:
                mean = spread((total / count).masked_fill_(count == 0, 0.0))

        # AReaL 1.0.4 squares x*m - mean*m for the std; (x - mean)*m is the same for 0/1 masks
        # and lets the std and the output share one centred tensor.
        centered = x64 - mean
        if mask is not None:
            centered = centered * mask
        if self.std_level is None:
            return mean, torch.ones((), dtype=torch.float64, device=x.device), centered

        squares = _row_sums(centered * centered)
        if self.std_level in counts:
            count = counts[self.std_level]
            (sq_total,) = self._reduce(self.std_level, [squares], layout, reduce_group)
        else:
            count, sq_total = self._reduce(self.std_level, [row_weight, squares], layout, reduce_group)
        return mean, spread(self._std(count, sq_total, layout) + self.eps), centered


def _check_norm_inputs(x: torch.Tensor, loss_mask: torch.Tensor | None) -> None:
    if not isinstance(x, torch.Tensor) or x.ndim not in (1, 2):
        shape = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
        raise ValueError(f"Normalization: x has shape {shape}, expected a tensor [B] or [B, T]")
    if x.is_complex():
        raise ValueError(f"Normalization: x has dtype {x.dtype}, expected a real tensor")
    if loss_mask is None:
        return
    if not isinstance(loss_mask, torch.Tensor) or tuple(loss_mask.shape) != tuple(x.shape):
        shape = tuple(loss_mask.shape) if isinstance(loss_mask, torch.Tensor) else type(loss_mask).__name__
        raise ValueError(f"Normalization: loss_mask has shape {shape}, expected x's shape {tuple(x.shape)}")
    if loss_mask.device != x.device:
        raise ValueError(f"Normalization: loss_mask is on {loss_mask.device}, expected x's device {x.device}")


def _check_row_moments(moments: Any, x: torch.Tensor, loss_mask: torch.Tensor | None) -> None:
    """Precomputed moments: a `norm_kernels.RowMoments` of float64 [B] fields, with a [B, T] x and a mask."""
    if loss_mask is None or x.ndim != 2:
        raise ValueError("Normalization: row_moments are only for a [B, T] x with a loss_mask")
    if not isinstance(moments, norm_kernels.RowMoments):
        raise ValueError(f"Normalization: row_moments must be a norm_kernels.RowMoments, got {type(moments).__name__}")
    for name, value in zip(moments._fields, moments):
        if tuple(value.shape) != (x.shape[0],) or value.dtype != torch.float64:
            raise ValueError(
                f"Normalization: row_moments.{name} is {tuple(value.shape)} {value.dtype}, "
                f"expected float64 of shape ({x.shape[0]},)"
            )


def _row_sums(values: torch.Tensor) -> torch.Tensor:
    """[B] or [B, T] -> [B]: each row's total."""
    return values if values.ndim == 1 else values.sum(dim=1)


def _leave_one_out_mean(
    x_masked: torch.Tensor,
    mask: torch.Tensor | None,
    count: torch.Tensor,
    total: torch.Tensor,
    spread: Callable[[torch.Tensor], torch.Tensor],
) -> torch.Tensor:
    """Baseline of each active element excluding itself; masked elements get the plain mean.

    A pool with at most one active element gets baseline 0 (as AReaL 1.0.4). For a
    masked element (mask 0) the leave-one-out formula reduces to total / count
    whenever count > 1, so one expression serves both cases.
    """
    if mask is None:
        loo = (spread(total) - x_masked) / spread(torch.clamp(count - 1, min=1.0))
    else:
        loo = (spread(total) - x_masked) / torch.clamp(spread(count) - mask, min=1.0)
    return loo.masked_fill_(spread(count <= 1), 0.0)
