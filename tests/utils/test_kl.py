"""KLEstimator: Schulman's k1/k2/k3 estimates, float32 output and the ±10 clamp."""

from __future__ import annotations

import math

import pytest
import torch

from areal_adv.utils import kl as kl_module
from areal_adv.utils.data import KLEstimator
from areal_adv.utils.kl import K3_RATIO_BOUND, exp_reduced, k3_bounded_torch


def test_k1_is_the_log_ratio():
    logp = torch.tensor([-1.0, -2.0, -0.5])
    ref = torch.tensor([-1.5, -1.0, -0.5])
    assert KLEstimator("k1")(logp, ref).tolist() == [0.5, -1.0, 0.0]
    assert KLEstimator()(logp, ref).tolist() == [0.5, -1.0, 0.0]  # k1 is the default


def test_k2_is_half_the_squared_log_ratio():
    logp = torch.tensor([-1.0, -2.0, -0.5])
    ref = torch.tensor([-1.5, -1.0, -0.5])
    assert KLEstimator("k2")(logp, ref).tolist() == [0.125, 0.5, 0.0]


def test_k3_is_exp_minus_one_minus_log():
    logp = torch.tensor([-1.0, -2.0, -0.5])
    ref = torch.tensor([-1.5, -1.0, -0.5])
    out = KLEstimator("k3")(logp, ref)
    # r = 0.5: exp(-0.5) - 1 + 0.5; r = -1: exp(1) - 1 - 1
    expected = torch.tensor([math.exp(-0.5) - 0.5, math.e - 2.0, 0.0])
    torch.testing.assert_close(out, expected)
    assert bool((out >= 0).all())


def test_output_is_float32_from_other_dtypes():
    logp = torch.tensor([[-1.0, -2.0]], dtype=torch.float64)
    ref = torch.tensor([[-1.5, -1.0]], dtype=torch.bfloat16)
    for kind in ("k1", "k2", "k3"):
        out = KLEstimator(kind)(logp, ref)
        assert out.dtype == torch.float32 and out.shape == (1, 2)


def test_clamp_to_plus_minus_ten():
    logp = torch.tensor([0.0, -30.0, 0.0])
    ref = torch.tensor([-30.0, 0.0, -4.0])
    assert KLEstimator("k1")(logp, ref).tolist() == [10.0, -10.0, 4.0]
    assert KLEstimator("k2")(logp, ref).tolist() == [10.0, 10.0, 8.0]
    assert KLEstimator("k3")(logp, ref).tolist()[1] == 10.0  # exp(30) - 31 is clamped
    unclamped = KLEstimator("k1", apply_clamp=False)(logp, ref)
    assert unclamped.tolist() == [30.0, -30.0, 4.0]
    assert KLEstimator("k2", apply_clamp=False)(logp, ref).tolist() == [450.0, 450.0, 8.0]


def test_inputs_not_modified():
    logp = torch.tensor([-1.0, -2.0])
    ref = torch.tensor([-3.0, 0.0])
    KLEstimator("k3")(logp, ref)
    assert logp.tolist() == [-1.0, -2.0] and ref.tolist() == [-3.0, 0.0]


@pytest.mark.parametrize("kind", ["k4", "K1", "", "mse"])
def test_unknown_kind_names_the_field_and_choices(kind):
    with pytest.raises(ValueError) as info:
        KLEstimator(kind)
    message = str(info.value)
    assert "actor.kl_estimator" in message
    assert repr(kind) in message
    assert "['k1', 'k2', 'k3']" in message


def test_k3_exp_is_exp_correctly_rounded_on_the_bounded_log_ratio():
    """k3's exp (`exp_reduced`, shared with the fused kernels) against float64 exp rounded to float32."""
    gen = torch.Generator().manual_seed(0)
    x = (torch.rand(1_000_000, generator=gen) * 2 - 1) * K3_RATIO_BOUND
    x = torch.cat([x, torch.tensor([-K3_RATIO_BOUND, K3_RATIO_BOUND, 0.0, -0.0, 1e-30, math.log(2) / 2])]).float()
    k, p = exp_reduced(x.double())
    ours = (p * torch.pow(2.0, k)).float()
    want = torch.exp(x.double()).float()
    steps = (ours.view(torch.int32).long() - want.view(torch.int32).long()).abs()
    assert int(steps.max()) <= 1 and int((steps > 0).sum()) <= 2  # float32 steps: a boundary case at most
    assert bool((k.abs() <= 29).all()) and torch.equal(k, k.round())


@pytest.mark.skipif(not kl_module.NUMBA_AVAILABLE, reason="the compiled k3 needs numba")
def test_compiled_and_torch_k3_are_the_same_bits():
    """CPU tensors take the compiled loop (the fused kernels' function), other devices the torch operations."""
    top = int(torch.tensor([25.0]).view(torch.int32))
    bits = torch.arange(0, top + 1, 499, dtype=torch.int32)
    ratios = torch.cat([bits.view(torch.float32), -bits.view(torch.float32)])
    compiled = kl_module._k3(ratios)
    assert compiled.numel() >= kl_module._NUMBA_MIN_ELEMENTS
    assert torch.equal(compiled.view(torch.int32), k3_bounded_torch(ratios).view(torch.int32))
    small = ratios[:100]  # below the size that pays for a compiled call: torch operations, the same bits
    assert torch.equal(kl_module._k3(small), compiled[:100])
    nan = kl_module._k3(torch.full((kl_module._NUMBA_MIN_ELEMENTS,), float("nan")))
    assert bool(nan.isnan().all()) and bool(k3_bounded_torch(torch.tensor([float("nan")])).isnan().all())


def test_k3_of_extreme_finite_log_probs_is_the_clamped_value():
    """The log-ratio of -3e38 and 3e38 overflows to -inf; k3 is bounded first, so the result is 10, not NaN."""
    logp = torch.tensor([-3e38, 3e38, -3e38, 0.0])
    ref = torch.tensor([3e38, -3e38, -3e38, 0.0])
    assert KLEstimator("k3")(logp, ref).tolist() == [10.0, 10.0, 0.0, 0.0]
    assert KLEstimator("k1")(logp, ref).tolist() == [-10.0, 10.0, 0.0, 0.0]
    assert KLEstimator("k2")(logp, ref).tolist() == [10.0, 10.0, 0.0, 0.0]


def test_k3_keeps_gradients_through_torch_exp():
    logp = torch.tensor([-1.0, -2.0, 30.0], requires_grad=True)
    ref = torch.tensor([-1.5, -1.0, 0.0])
    kl = KLEstimator("k3")(logp, ref)
    kl.sum().backward()
    r = (logp - ref).detach()
    expected = torch.where((-r).exp() - 1 + r < 10, 1 - (-r).exp(), torch.zeros_like(r))  # d/dr, 0 where clamped
    torch.testing.assert_close(logp.grad, expected)
    torch.testing.assert_close(kl.detach(), KLEstimator("k3")(logp.detach(), ref), rtol=1e-6, atol=1e-7)
