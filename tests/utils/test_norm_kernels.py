"""The fused numba normalisation path equals the tensor path element by element."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from areal_adv.api.cli_args import NormConfig
from areal_adv.utils import norm_kernels
from areal_adv.utils.data import Normalization

pytestmark = pytest.mark.skipif(not norm_kernels.NUMBA_AVAILABLE, reason="numba not importable")


@settings(max_examples=150, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 4), min_size=1, max_size=5),
    n_pos=st.integers(1, 9),
    mean_level=st.sampled_from(["batch", "group", None]),
    std_level=st.sampled_from(["batch", "group", None]),
    loo=st.booleans(),
    unbiased=st.booleans(),
    masked=st.booleans(),
    singleton_logical=st.booleans(),
    scale=st.sampled_from([1e-3, 1.0, 1e4]),
    seed=st.integers(0, 2**16),
)
def test_fused_equals_tensor_path(
    sizes, n_pos, mean_level, std_level, loo, unbiased, masked, singleton_logical, scale, seed
):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(sum(sizes), n_pos, generator=g) * scale + scale).float()
    mask = (torch.rand(sum(sizes), n_pos, generator=g) < 0.6).float() if masked else None
    logical = [1 if singleton_logical else s for s in sizes]
    norm = Normalization(
        NormConfig(mean_level=mean_level, std_level=std_level, mean_leave1out=loo, std_unbiased=unbiased)
    )
    kw = dict(group_sizes=sizes, logical_group_sizes=logical)
    assert norm_kernels.fused_available(x)
    fused = norm(x, mask, **kw)
    mean, denom = norm.statistics(x, mask, **kw)
    m = torch.ones_like(x) if mask is None else mask
    if mask is not None and mask.sum() == 0:
        expected = x.float()
    else:
        expected = ((x.double() - mean) * m / denom).float()
    torch.testing.assert_close(fused, expected, rtol=1e-6, atol=1e-6)


def test_fused_accepts_integer_masks_and_float64_inputs():
    x = torch.randn(6, 5, dtype=torch.float64)
    mask = (torch.rand(6, 5) < 0.5).long()
    norm = Normalization(NormConfig(mean_level="group", std_level="batch", mean_leave1out=True))
    out = norm(x, mask, group_sizes=[2, 4])
    mean, denom = norm.statistics(x, mask.double(), group_sizes=[2, 4])
    torch.testing.assert_close(out, ((x - mean) * mask / denom).float(), rtol=1e-6, atol=1e-6)


@settings(max_examples=80, deadline=None)
@given(
    n_rows=st.integers(1, 6),
    n_pos=st.integers(1, 40),
    weights=st.sampled_from(["binary", "float"]),
    offset=st.sampled_from([0.0, 3.0, -1e4]),
    seed=st.integers(0, 2**16),
)
def test_row_moments_give_the_squared_deviations_about_any_baseline(n_rows, n_pos, weights, offset, seed):
    """M2 + 2 d C + d^2 Q equals sum ((x - b) m)^2 for 0/1 and for fractional masks."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n_rows, n_pos, generator=g) + offset
    mask = torch.rand(n_rows, n_pos, generator=g)
    mask = (mask < 0.6).float() if weights == "binary" else mask
    moments = norm_kernels.row_moments(x, mask)
    baseline = torch.randn(n_rows, generator=g, dtype=torch.float64) + offset
    direct = (((x.double() - baseline[:, None]) * mask.double()) ** 2).sum(dim=1)
    torch.testing.assert_close(moments.squares_about(baseline), direct, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(moments.weight, mask.double().sum(dim=1))
    torch.testing.assert_close(moments.total, (x.double() * mask.double()).sum(dim=1))


@pytest.mark.parametrize(
    "cfg",
    [
        NormConfig(),
        NormConfig(mean_level="group", std_level="batch"),
        NormConfig(mean_level=None, std_level="group", std_unbiased=False),
        NormConfig(mean_leave1out=True),
    ],
)
def test_precomputed_row_moments_give_the_same_bits(cfg):
    g = torch.Generator().manual_seed(3)
    x = torch.randn(9, 33, generator=g)
    mask = (torch.rand(9, 33, generator=g) < 0.5).float()
    norm = Normalization(cfg)
    kw = dict(group_sizes=[2, 3, 4], logical_group_sizes=[2, 1, 4])
    assert torch.equal(norm(x, mask, **kw), norm(x, mask, row_moments=norm_kernels.row_moments(x, mask), **kw))


def test_row_moments_are_checked():
    x, mask = torch.randn(3, 4), torch.ones(3, 4)
    norm = Normalization(NormConfig())
    with pytest.raises(ValueError, match="row_moments are only for a \\[B, T\\] x with a loss_mask"):
        norm(x, None, row_moments=norm_kernels.row_moments(x, mask))
    bad = norm_kernels.row_moments(x, mask)._replace(weight=torch.ones(2, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"row_moments\.weight is \(2,\)"):
        norm(x, mask, row_moments=bad)
