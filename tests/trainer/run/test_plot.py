"""The curves PNG: EMA over a faint raw line, labelled y axes, KL and entropy apart, nothing hidden or flat."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from areal_adv.trainer.run.plot import build_figure, ema, plot_curves


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
        row = {
            "step": step,
            "reward_mean": step / n + 0.1 * rng.standard_normal(),
            "success_rate": step / n,
            "adv_mean": 0.01 * rng.standard_normal(),
            "adv_std": 1.0,
            "kl": 1e-3 * step,
            "entropy": 2.0 - step / n,
            "policy_loss": 0.1 * rng.standard_normal(),
            "value_loss": 0.5 / (1 + step) if critic else None,
            "response_tokens": 3.0 + step % 2,
        }
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


def _legend(ax) -> list[str]:
    return [line.get_label() for line in ax.get_legend().get_lines()]


def test_reward_and_success_are_told_apart_or_drawn_once_when_equal() -> None:
    rows = _records(20, critic=False)
    reward = _axes(build_figure(rows))["reward"]
    assert _legend(reward) == ["reward_mean", "success_rate"]
    styles = [line.get_linestyle() for line in reward.get_legend().get_lines()]
    assert styles[0] != styles[1]  # not only the colour differs
    for row in rows:  # a 0/1 reward: the mean reward is the success rate at every step
        row["reward_mean"] = row["success_rate"]
    reward = _axes(build_figure(rows))["reward"]
    assert _legend(reward) == ["reward_mean (= success_rate)"]
    assert len(reward.get_lines()) == 2  # one faint raw line and its EMA, not two of each on top of each other


def test_panels_with_only_constant_metrics_are_left_out_and_named_below() -> None:
    rows = _records(20, critic=False)
    for row in rows:  # a single-token task: every response is one token
        row["response_tokens"] = 1.0
        row["adv_mean"], row["adv_std"] = 0.0, 1.0
    fig = build_figure(rows)
    axes = _axes(fig)
    assert "response length" not in axes and "advantage" not in axes
    assert {"reward", "KL to the reference", "entropy", "policy loss"} <= set(axes)
    [note] = [t.get_text() for t in fig.texts]
    assert note == "flat over the run, not drawn: adv_mean = 0, adv_std = 1, response_tokens = 1"
    for row in rows:  # a constant reward still gets its panel: it is what the run is about
        row["reward_mean"] = row["success_rate"] = 0.0
    assert "reward" in _axes(build_figure(rows))


def test_flat_is_relative_to_the_panel_scale() -> None:
    from areal_adv.trainer.run.plot import constant_value

    assert constant_value([1.0, None, 1.0, float("nan")]) == 1.0
    assert constant_value([2.0, 2.0 + 1e-15]) == pytest.approx(2.0)
    assert constant_value([2.0, 2.001]) is None
    assert constant_value([None, None]) is None
    assert constant_value([0.0, 1e-5]) is None  # a small metric that moves (KL early on) is drawn
    assert constant_value([-1.2e-8, 1.5e-9], scale=0.9994) == 0.0  # whitened advantages: mean 0 up to rounding
    assert constant_value([0.99936, 0.99941], scale=0.99941) == pytest.approx(0.999385)
