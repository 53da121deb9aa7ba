"""Statistics of bench/estimator_suite.py: the area under a success curve, bootstrap CIs, paired differences.

Pure functions of lists of numbers. The bootstrap resamples seeds (the unit a
new experiment would draw again) with a fixed RNG seed, so a report built twice
from the same results file is identical.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

BOOTSTRAP_SEED = 12_345
BOOTSTRAP_RESAMPLES = 4_000


@dataclass(frozen=True)
class Estimate:
    """A mean with its 95 % percentile-bootstrap confidence interval over `n` seeds."""

    mean: float
    low: float
    high: float
    n: int

    @property
    def half_width(self) -> float:
        return (self.high - self.low) / 2

    def excludes_zero(self) -> bool:
        return self.low > 0 or self.high < 0


def auc(updates: Sequence[float], success: Sequence[float]) -> float:
    """The success curve's area divided by its length in updates (trapezoids): its mean height, in [0, 1].

    A curve measured at updates 0, e, 2e, ..., T: 1.0 means solved from the
    start, 0.0 never solved; a method that gets there sooner has the larger area.
    """
    if len(updates) != len(success) or len(updates) < 2:
        raise ValueError(
            f"auc: need >= 2 points with one success value each, got {len(updates)} updates and {len(success)} values"
        )
    x, y = np.asarray(updates, dtype=float), np.asarray(success, dtype=float)
    if np.any(np.diff(x) <= 0):
        raise ValueError(f"auc: updates must increase, got {list(updates)}")
    return float(np.sum((y[1:] + y[:-1]) / 2 * np.diff(x)) / (x[-1] - x[0]))


def bootstrap_mean(
    values: Sequence[float], *, resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED, level: float = 0.95
) -> Estimate:
    """The mean of `values` and the percentile bootstrap CI of it (resampling the values with replacement)."""
    x = np.asarray(values, dtype=float)
    if x.size == 0:
        raise ValueError("bootstrap_mean: no values")
    if not np.all(np.isfinite(x)):
        raise ValueError(f"bootstrap_mean: non-finite values {x.tolist()}")
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, x.size, size=(resamples, x.size))].mean(axis=1)
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(means, [tail, 100 - tail])
    return Estimate(float(x.mean()), float(low), float(high), int(x.size))


def paired_difference(values: Mapping[int, float], baseline: Mapping[int, float], **kwargs: float) -> Estimate:
    """Mean over the seeds both have of `values[s] - baseline[s]`, with its bootstrap CI.

    Pairing by seed removes what the seed decides for both runs (the initial
    weights and the prompts), which is most of the spread of small runs.
    """
    seeds = sorted(set(values) & set(baseline))
    if not seeds:
        raise ValueError(f"paired_difference: no common seeds (have {sorted(values)} and {sorted(baseline)})")
    return bootstrap_mean([values[s] - baseline[s] for s in seeds], **kwargs)
