"""The race's statistics: paired Student-t intervals, Holm's adjustment, and which arms a rung drops."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from areal_adv.trainer.race.racing import (
    eliminated,
    holm,
    one_sided_p,
    paired_difference,
    paired_t_interval,
    rung_tests,
)


def test_the_interval_is_the_textbook_paired_t_interval():
    d = [0.03, 0.01, 0.05, 0.02, 0.04]
    got = paired_t_interval(d)
    half = stats.t.ppf(0.975, 4) * np.std(d, ddof=1) / math.sqrt(5)
    assert (got.mean, got.low, got.high, got.n) == pytest.approx((0.03, 0.03 - half, 0.03 + half, 5))
    assert got.excludes_zero() and got.reach == pytest.approx(0.03 + half)


def test_pairing_takes_the_shared_seeds_only():
    got = paired_difference({1: 1.0, 2: 2.0, 3: 4.0, 9: 100.0}, {1: 0.5, 2: 1.0, 3: 2.0})
    assert got.n == 3 and got.mean == pytest.approx((0.5 + 1.0 + 2.0) / 3)
    with pytest.raises(ValueError, match="at least 2 seeds"):
        paired_difference({1: 1.0, 2: 1.0}, {2: 0.0, 3: 0.0})


def test_no_spread_makes_no_call():
    same = paired_t_interval([0.0, 0.0, 0.0])
    assert (same.low, same.high, same.spread, same.excludes_zero()) == (0.0, 0.0, False, False)
    shifted = paired_t_interval([-0.25, -0.25])  # one shift on both seeds: t is x / 0, not evidence
    assert not shifted.excludes_zero()
    assert one_sided_p([-0.25, -0.25])[1] == 1.0 and one_sided_p([0.0, 0.0])[1] == 1.0


def test_holm_is_its_definition():
    p = [0.01, 0.04, 0.03, 0.005]
    # sorted: 0.005*4=0.02, 0.01*3=0.03, 0.03*2=0.06, 0.04*1=0.04 -> monotone 0.06
    assert holm(p) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])
    assert holm([]) == []


def test_one_sided_p_is_scipys():
    d = [0.2, 0.1, 0.3, 0.25]
    t, p = one_sided_p(d)
    ref = stats.ttest_1samp(d, 0.0, alternative="greater")
    assert (t, p) == pytest.approx((ref.statistic, ref.pvalue))


def _values(shift: dict[str, float], seeds: int = 5) -> dict[str, dict[int, float]]:
    rng = np.random.default_rng(0)
    base = {s: float(rng.normal()) for s in range(1, seeds + 1)}
    return {arm: {s: v + d + 0.05 * ((s * 7 + len(arm)) % 5) for s, v in base.items()} for arm, d in shift.items()}


def test_a_clearly_worse_arm_is_dropped_and_the_baseline_never():
    values = _values({"grpo": 0.0, "maxrl": 0.01, "broken": -1.0})
    tests = rung_tests(values, alpha=0.05)
    assert len(tests) == 6  # every ordered pair
    assert eliminated(tests, protected="grpo") == ["broken"]
    worse_baseline = _values({"grpo": -1.0, "maxrl": 0.0, "rloo": 0.01})
    assert "grpo" not in eliminated(rung_tests(worse_baseline, alpha=0.05), protected="grpo")


def test_close_arms_stay_and_the_adjustment_matters():
    values = _values({"grpo": 0.0, "a": 0.0, "b": 0.004})
    assert eliminated(rung_tests(values, alpha=0.05), protected="grpo") == []
    tests = rung_tests(values, alpha=0.05)
    assert all(t.p_holm >= t.p for t in tests)


def test_a_rung_needs_two_arms_and_two_shared_seeds():
    assert rung_tests({"grpo": {1: 0.1, 2: 0.2}}, alpha=0.05) == []
    assert rung_tests({"grpo": {1: 0.1}, "rloo": {1: 0.2}}, alpha=0.05) == []
