"""Running-statistics normalisation (`mean_level` / `std_level: running`), as ROLL's `norm_*_type: running`.

    n ← n + m,   μ ← μ + δ·m/n,   σ²_pop ← (σ²_pop·n₀ + s²·m + δ²·n₀·m/n) / n,
    std = sqrt(σ²_pop · n / (n − 1)),   x̂ = (x − μ) / (std + eps)

with δ = batch mean − μ, s² the batch's population variance and m its size (Chan,
Golub and LeVeque's parallel merge of moments). Source: ROLL (alibaba/ROLL, commit
8eb27cc) `roll/utils/functionals.py:RunningMoments.update` (start: n = 1e-24, μ = 0,
σ² = 1) and `reward_norm` (the batch enters the statistics *before* it is
normalised; `(r − μ)/(std + 1e-6)`). The statistics are cumulative over the whole
run: ROLL has no momentum or window, and neither does this.

Under data parallelism each rank computes its batch moments (count, mean, M2),
every rank gathers all of them and merges them in rank order, then folds the
result into the running moments: every rank holds the same numbers, and they
equal one process's on the whole batch up to float64 rounding. The moments live
in a `StageState` (plain floats), so they are checkpointed with the actor's other
stage state and rolled back when a call fails.
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist

from areal_adv.api.cli_args import NormConfig
from areal_adv.trainer.ppo.stage_state import StageState, distributed_world
from areal_adv.utils.call_agreement import before_collective

__all__ = ["RUNNING", "batch_moments", "is_running", "merge_moments", "running_normalise", "running_state"]

RUNNING = "running"
_START = (1e-24, 0.0, 1.0)  # ROLL's count, mean, population variance before any data


def is_running(norm: NormConfig | None) -> bool:
    return norm is not None and RUNNING in (norm.mean_level, norm.std_level)


def running_state(name: str) -> StageState:
    """The state object of `actor.<name>` with running statistics (name: reward_norm or adv_norm)."""
    return StageState(name, RUNNING)


def batch_moments(values: torch.Tensor) -> tuple[float, float, float]:
    """(count, mean, M2) of a 1-D float tensor, float64; M2 = Σ (x − mean)²."""
    x = values.to(torch.float64)
    n = x.numel()
    if n == 0:
        return 0.0, 0.0, 0.0
    mean = x.mean()
    return float(n), float(mean), float(((x - mean) ** 2).sum())


def merge_moments(parts: list[tuple[float, float, float]]) -> tuple[float, float, float]:
    """Chan et al.'s pairwise merge of (count, mean, M2), left to right; empty parts are skipped."""
    n, mean, m2 = 0.0, 0.0, 0.0
    for nb, mb, m2b in parts:
        if nb == 0:
            continue
        total = n + nb
        delta = mb - mean
        mean = mean + delta * nb / total
        m2 = m2 + m2b + delta * delta * n * nb / total
        n = total
    return n, mean, m2


def _global_moments(values: torch.Tensor) -> tuple[float, float, float]:
    local = batch_moments(values)
    if distributed_world() == 1:
        return local
    mine = torch.tensor(local, dtype=torch.float64, device=values.device)
    parts = [torch.zeros_like(mine) for _ in range(distributed_world())]
    before_collective()  # the ranks agree on any failure first (areal_adv.utils.call_agreement)
    dist.all_gather(parts, mine)
    return merge_moments([tuple(p.tolist()) for p in parts])


def _update(state: StageState, values: torch.Tensor) -> tuple[float, float]:
    """Fold the step's values (all ranks) into the running moments; (mean, std) after the update."""
    count, mean, var = (state.get(k, d) for k, d in zip(("count", "mean", "var"), _START))
    m, batch_mean, batch_m2 = _global_moments(values)
    if m > 0:
        delta = batch_mean - mean
        total = count + m
        old_sum = var * count + delta**2 * count * m / total
        mean = mean + delta * m / total
        var = (old_sum + batch_m2) / total
        count = total
        state.set("count", count)
        state.set("mean", mean)
        state.set("var", var)
    std = math.sqrt(var * count / (count - 1)) if count > 1 else 1.0
    return mean, std


def running_normalise(
    x: torch.Tensor,
    mask: torch.Tensor | None,
    norm: NormConfig,
    state: StageState,
    observed: torch.Tensor | None = None,
) -> torch.Tensor:
    """float32 ((x − μ)·mask) / (std + eps) with the running μ, std updated by this step's values first.

    Reference code: ROLL `roll/utils/functionals.py:RunningMoments.update` and `reward_norm`
    (the update formula is in the module docstring).

    The values entering the statistics are x's active entries (mask > 0), or
    `observed` when given (one value per logical rollout for split rewards).
    `mean_level: null` keeps x uncentred, `std_level: null` unscaled.
    """
    values = observed if observed is not None else (x[mask.bool()] if mask is not None else x.reshape(-1))
    mean, std = _update(state, values)
    centre = mean if norm.mean_level == RUNNING else 0.0
    denom = std + float(norm.eps) if norm.std_level == RUNNING else 1.0
    out = x.to(torch.float64) - centre
    if mask is not None:
        out = out * mask.to(torch.float64)
    return (out / denom).to(torch.float32)
