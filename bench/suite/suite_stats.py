"""Statistics of bench/suite/estimator_suite.py: the area under a success curve, t-intervals, paired differences.

Pure functions of lists of numbers. Means and paired differences over seeds
(the unit a new experiment would draw again) carry 95 % Student-t intervals,
the same the race uses (`areal_adv.trainer.race.racing`): exact given the
values, so no verdict depends on a resampling seed. `bootstrap_mean` stays for
differences over many prompts (bench/real_model/probe_table.py), with a fixed RNG seed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from areal_adv.trainer.race.racing import paired_t_interval
from areal_adv.trainer.race.series import area

BOOTSTRAP_SEED = 12_345
BOOTSTRAP_RESAMPLES = 4_000
#: The interval of every mean and paired difference over seeds, as the tables name it.
INTERVAL = "95 % Student-t interval"


@dataclass(frozen=True)
class Estimate:
    """A mean with its 95 % interval over `n` values (a Student-t interval over seeds, or a bootstrap's)."""

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
    The race's window metric is the same area (`areal_adv.trainer.race.series.area`).
    """
    return area(updates, success)


def t_mean(values: Sequence[float]) -> Estimate:
    """The mean of `values` and its 95 % Student-t interval (a point when every value is the same)."""
    x = np.asarray(values, dtype=float)
    if x.size == 0:
        raise ValueError("t_mean: no values")
    if not np.all(np.isfinite(x)):
        raise ValueError(f"t_mean: non-finite values {x.tolist()}")
    if x.size == 1:
        raise ValueError("t_mean: one value has no interval; need at least 2 seeds")
    d = paired_t_interval(x.tolist())
    return Estimate(d.mean, d.low, d.high, d.n)


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


def paired_difference(values: Mapping[int, float], baseline: Mapping[int, float]) -> Estimate:
    """Mean over the seeds both have of `values[s] - baseline[s]`, with its 95 % paired Student-t interval.

    Pairing by seed removes what the seed decides for both runs (the initial
    weights and the prompts), which is most of the spread of small runs.
    """
    seeds = sorted(set(values) & set(baseline))
    if not seeds:
        raise ValueError(f"paired_difference: no common seeds (have {sorted(values)} and {sorted(baseline)})")
    return t_mean([values[s] - baseline[s] for s in seeds])
