"""The curves PNG: EMA over a faint raw line, labelled y axes, KL and entropy on their own axes."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from areal.trainer.plot import build_figure, ema, plot_curves


def _reference_ema(values: list[float], weight: float) -> list[float]:
    """Weighted mean of all values so far with weights w^(t-i): the closed form of the debiased EMA."""
    out = []
    for t in range(len(values)):
        w = np.array([weight ** (t - i) for i in range(t + 1)])
        out.append(float((w * np.array(values[: t + 1])).sum() / w.sum()))
    return out


@settings(max_examples=50, deadline=None)
@given(values=st.lists(st.floats(-1e3, 1e3), min_size=1, max_size=40), weight=st.floats(0.0, 0.99))
def test_ema_is_the_debiased_weighted_mean(values: list[float], weight: float) -> None:
    assert ema(values, weight) == pytest.approx(_reference_ema(values, weight), rel=1e-9, abs=1e-9)


def test_ema_skips_missing_values_and_rejects_a_bad_weight() -> None:
    got = ema([1.0, None, float("nan"), 3.0], 0.5)
    assert got[0] == 1.0 and math.isnan(got[1]) and math.isnan(got[2])
    assert got[3] == pytest.approx(_reference_ema([1.0, 3.0], 0.5)[1])
    assert ema([2.0, 4.0], 0.0) == [2.0, 4.0]
    with pytest.raises(ValueError, match=r"ema: weight=1\.0, expected a number in \[0, 1\)"):
        ema([1.0], 1.0)


def _records(n: int, *, critic: bool) -> list[dict]:
    rng = np.random.default_rng(0)
    rows = []
    for step in range(n):
        row = {"step": step, "reward_mean": step / n + 0.1 * rng.standard_normal(), "success_rate": step / n,
               "adv_mean": 0.0, "adv_std": 1.0, "kl": 1e-3 * step, "entropy": 2.0 - step / n, "policy_loss": 0.1,
               "value_loss": 0.5 if critic else None, "response_tokens": 3.0}
        rows.append(row)
    return rows


def _axes(fig) -> dict[str, object]:
    return {ax.get_title(): ax for ax in fig.axes if ax.get_visible()}


def test_panels_have_labelled_axes_and_kl_and_entropy_are_apart() -> None:
    fig = build_figure(_records(50, critic=False), title="t", smoothing=0.9)
    axes = _axes(fig)
    assert set(axes) == {"reward", "advantage", "KL to the reference", "entropy", "policy loss", "response length"}
    for ax in axes.values():
        assert ax.get_ylabel() and ax.get_xlabel() == "step"
    assert [line.get_label() for line in axes["KL to the reference"].get_legend().get_lines()] == ["kl"]
    assert [line.get_label() for line in axes["entropy"].get_legend().get_lines()] == ["entropy"]
    assert axes["KL to the reference"].get_ylabel() == "KL (nats / token)"
    raw, smooth = axes["reward"].get_lines()[:2]
    assert raw.get_alpha() < 0.5 and smooth.get_alpha() is None  # faint raw line under the EMA
    np.testing.assert_allclose(smooth.get_ydata(), ema(list(raw.get_ydata()), 0.9))


def test_value_loss_appears_with_a_critic_and_smoothing_zero_draws_raw_only(tmp_path: Path) -> None:
    fig = build_figure(_records(10, critic=True), smoothing=0.0)
    axes = _axes(fig)
    assert "value loss" in axes and len(axes["reward"].get_lines()) == 2  # reward_mean and success_rate, raw
    path = plot_curves(_records(10, critic=True), tmp_path / "sub" / "c.png", title="t")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
