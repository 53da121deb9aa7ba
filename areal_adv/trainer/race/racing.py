"""The statistics of a race: paired Student-t intervals over seeds, and elimination between rungs.

Seeds are the unit: seed s gives every arm the same start and prompts, so an
arm's value minus the baseline's on the same seed removes what the seed decides
for both. Intervals are the exact paired Student-t interval of the mean
difference (`scipy.stats.ttest_rel`), so no verdict depends on a resampling seed.

Elimination is a race in the sense of Maron & Moore (1994) and Birattari et al.
(2002, F-Race): after each rung but the last, arms the data show worse are
dropped and the rest go on. The test is irace's paired t-test with Holm's
correction (López-Ibáñez et al. 2016, `t-test-holm`), made over all ordered
pairs of the arms still racing rather than against the rung's leader, so that
the error control below holds without choosing a reference from the same data:

- each ordered pair (A, E) is a one-sided paired t-test of "A's mean is not
  above E's"; the p-values of a rung are adjusted by Holm's step-down method
  (strong control of the family-wise error rate under any dependence) at
  `alpha / (rungs - 1)` (Bonferroni over the looks);
- E is dropped when some A rejects against it; the baseline is never dropped.

So, if each pair's per-seed differences are normal, with probability at least
1 - alpha no arm is ever dropped unless another arm's mean over that rung's
window is truly higher; in particular the arm with the truly highest mean at a
rung is not dropped there. Optuna's `WilcoxonPruner` compares one trial at a time
with the best finished one and controls no family-wise error, and scipy has no
Holm adjustment (`false_discovery_control` is Benjamini-Hochberg), so the
adjustment is written here: it is the six lines of its definition, tested against it.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

LEVEL = 0.95
INTERVAL_NAME = "95 % paired Student-t interval"


@dataclass(frozen=True)
class PairedInterval:
    """The mean of per-seed differences with its two-sided paired Student-t interval (`n` seeds)."""

    mean: float
    low: float
    high: float
    n: int

    @property
    def spread(self) -> bool:
        """False when every seed gave the same difference: the t-interval is then undefined, and no call is made."""
        return self.low < self.high

    def excludes_zero(self) -> bool:
        return self.spread and (self.low > 0 or self.high < 0)

    @property
    def reach(self) -> float:
        """The largest difference the interval still allows, either way: max(|low|, |high|)."""
        return max(abs(self.low), abs(self.high))


@dataclass(frozen=True)
class PairTest:
    """One ordered pair of a rung: is `better`'s mean above `worse`'s? (`p` one-sided, `p_holm` adjusted)."""

    better: str
    worse: str
    mean: float
    t: float
    p: float
    p_holm: float
    rejected: bool


def paired_t_interval(differences: Sequence[float], level: float = LEVEL) -> PairedInterval:
    """Mean of `differences` and its paired Student-t interval; a point when every difference is the same.

    With n seeds the interval is mean ± t_{(1+level)/2, n-1} · sd / sqrt(n).
    """
    from scipy import stats

    x = np.asarray(differences, dtype=float)
    if x.size < 2:
        raise ValueError(f"a paired interval needs at least 2 seeds, got {x.size}")
    if not np.all(np.isfinite(x)):
        raise ValueError(f"paired differences must be finite, got {x.tolist()}")
    mean = float(x.mean())
    if np.all(x == x[0]):  # identical runs, or one shift on every seed (a coarse metric, few seeds): no spread
        return PairedInterval(mean, mean, mean, int(x.size))
    with _quiet_precision():
        result = stats.ttest_1samp(x, 0.0)
    ci = result.confidence_interval(confidence_level=level)
    return PairedInterval(mean, float(ci.low), float(ci.high), int(x.size))


def paired_difference(values: Mapping[int, float], baseline: Mapping[int, float]) -> PairedInterval:
    """`values[s] - baseline[s]` over the seeds both have, as a paired Student-t interval."""
    seeds = sorted(set(values) & set(baseline))
    if len(seeds) < 2:
        raise ValueError(
            f"pairing needs at least 2 seeds both have, got {seeds} (seeds {sorted(values)} and {sorted(baseline)})"
        )
    return paired_t_interval([values[s] - baseline[s] for s in seeds])


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values: p_(i) · (m - i + 1), made monotone, capped at 1 (in input order)."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    adjusted, running = [0.0] * m, 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        adjusted[i] = running
    return adjusted


def one_sided_p(differences: Sequence[float]) -> tuple[float, float]:
    """(t, p) of the paired t-test that the mean difference is above 0.

    Every seed giving the same difference leaves t undefined (0 / 0 for
    identical runs, x / 0 for one shift on every seed, which a coarse metric
    over few seeds gives by chance): that is no evidence, p = 1.
    """
    from scipy import stats

    x = np.asarray(differences, dtype=float)
    if np.all(x == x[0]):
        return math.nan, 1.0
    with _quiet_precision():
        result = stats.ttest_1samp(x, 0.0, alternative="greater")
    return float(result.statistic), float(result.pvalue)


@contextmanager
def _quiet_precision() -> Iterator[None]:
    """scipy warns when the differences are nearly equal (a tiny spread): the interval is then nearly a point, rightly."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Precision loss occurred", category=RuntimeWarning)
        yield


def rung_tests(values: Mapping[str, Mapping[int, float]], alpha: float) -> list[PairTest]:
    """Every ordered pair of arms, tested on the seeds all arms have and Holm-adjusted together at `alpha`."""
    arms = sorted(values)
    seeds = sorted(set.intersection(*(set(values[a]) for a in arms))) if arms else []
    if len(arms) < 2 or len(seeds) < 2:
        return []
    raw = []
    for better in arms:
        for worse in arms:
            if better != worse:
                diffs = [values[better][s] - values[worse][s] for s in seeds]
                raw.append((better, worse, float(np.mean(diffs)), *one_sided_p(diffs)))
    adjusted = holm([r[4] for r in raw])
    return [PairTest(b, w, m, t, p, q, q <= alpha) for (b, w, m, t, p), q in zip(raw, adjusted)]


def eliminated(tests: Sequence[PairTest], protected: str) -> list[str]:
    """The arms some other arm beat at this rung, in name order, `protected` (the baseline) never among them."""
    return sorted({t.worse for t in tests if t.rejected and t.worse != protected})
