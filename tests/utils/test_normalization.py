"""Normalization: hand-computed cases, a loop reference, speed and the distributed all-reduce."""

from __future__ import annotations

import math
import os
import time
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from areal_adv.api.cli_args import NormConfig
from areal_adv.utils.data import Normalization

EPS = 1e-5


def _norm(mean="batch", std="batch", *, loo=False, unbiased=True, eps=0.0, group_size=1) -> Normalization:
    return Normalization(
        NormConfig(
            mean_level=mean, std_level=std, mean_leave1out=loo, std_unbiased=unbiased, eps=eps, group_size=group_size
        )
    )


def _close(actual: torch.Tensor, expected, *, atol=1e-6, rtol=1e-6) -> None:
    expected = torch.as_tensor(expected, dtype=torch.float32)
    assert actual.dtype == torch.float32
    torch.testing.assert_close(actual, expected, atol=atol, rtol=rtol)


# ---------------------------------------------------------------------------
# Hand-computed cases
# ---------------------------------------------------------------------------


def test_batch_mean_std_token_weighted_by_mask():
    x = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    mask = torch.tensor([[1, 1, 0], [0, 1, 1]])
    # active 1, 2, 5, 6: mean 3.5, squared deviations 6.25 + 2.25 + 2.25 + 6.25 = 17
    std = math.sqrt(17 / 3) + EPS
    out = _norm(eps=EPS)(x, mask)
    _close(out, [[-2.5 / std, -1.5 / std, 0.0], [0.0, 1.5 / std, 2.5 / std]])
    mean, denom = _norm(eps=EPS).statistics(x, mask)
    assert mean.dtype == denom.dtype == torch.float64
    assert mean.shape == denom.shape == x.shape
    assert torch.all(mean == 3.5) and torch.allclose(denom, torch.full((2, 3), std, dtype=torch.float64))


def test_batch_without_mask_uses_every_position():
    x = torch.tensor([[1.0, 3.0], [5.0, 7.0]])
    # mean 4, squared deviations 9 + 1 + 1 + 9 = 20, unbiased std sqrt(20/3)
    s = math.sqrt(20 / 3)
    _close(_norm()(x), [[-3 / s, -1 / s], [1 / s, 3 / s]])


def test_group_with_variable_sizes():
    x = torch.tensor([1.0, 3.0, 2.0, 4.0, 9.0])
    # group [1, 3]: mean 2, std sqrt(2); group [2, 4, 9]: mean 5, deviations -3 -1 4, std sqrt(26/2)
    a, b = math.sqrt(2), math.sqrt(13)
    out = _norm("group", "group")(x, group_sizes=[2, 3])
    _close(out, [-1 / a, 1 / a, -3 / b, -1 / b, 4 / b])


def test_group_2d_rows_are_the_group_unit():
    x = torch.tensor([[1.0, 2.0], [3.0, 9.0], [4.0, 6.0]])
    mask = torch.tensor([[1, 1], [1, 0], [1, 1]])
    # group rows 0-1: active 1, 2, 3 -> mean 2, SS 2, unbiased std sqrt(2/2) = 1;
    # group row 2: mean 5 over its two tokens, singleton so unbiased std 1
    out = _norm("group", "group")(x, mask, group_sizes=[2, 1])
    _close(out, [[-1.0, 0.0], [1.0, 0.0], [-1.0, 1.0]])
    # biased: group 0 std sqrt(2/3); group 1 std sqrt(2/2) = 1
    s = math.sqrt(2 / 3)
    out = _norm("group", "group", unbiased=False)(x, mask, group_sizes=[2, 1])
    _close(out, [[-1 / s, 0.0], [1 / s, 0.0], [-1.0, 1.0]])


def test_leave_one_out_group_mean():
    x = torch.tensor([1.0, 2.0, 6.0, 10.0])
    mask = torch.tensor([1.0, 1.0, 1.0, 0.0])
    # baselines (9-1)/2=4, (9-2)/2=3.5, (9-6)/2=1.5; the masked element's baseline is S/N=3
    norm = _norm("group", None, loo=True)
    _close(norm(x, mask, group_sizes=[4]), [-3.0, -1.5, 4.5, 0.0])
    mean, denom = norm.statistics(x, mask, group_sizes=[4])
    assert mean.tolist() == [4.0, 3.5, 1.5, 3.0]
    assert denom.tolist() == [1.0, 1.0, 1.0, 1.0]


def test_leave_one_out_batch_mean_with_std():
    x = torch.tensor([1.0, 2.0, 6.0])
    # baselines 4, 3.5, 1.5 -> deviations -3, -1.5, 4.5, SS = 9 + 2.25 + 20.25 = 31.5
    s = math.sqrt(31.5 / 2)
    _close(_norm("batch", "batch", loo=True)(x), [-3 / s, -1.5 / s, 4.5 / s])


def test_leave_one_out_with_one_active_element_gives_zero_mean():
    x = torch.tensor([4.0, 7.0])
    mask = torch.tensor([1, 0])
    _close(_norm("batch", None, loo=True)(x, mask), [4.0, 0.0])


def test_biased_versus_unbiased_std():
    x = torch.tensor([1.0, 3.0])
    _close(_norm(unbiased=True)(x), [-1 / math.sqrt(2), 1 / math.sqrt(2)])
    _close(_norm(unbiased=False)(x), [-1.0, 1.0])


def test_std_level_none_ignores_eps():
    x = torch.tensor([1.0, 3.0])
    _close(_norm("batch", None, eps=0.5)(x), [-1.0, 1.0])


def test_mean_level_none_scales_around_zero():
    x = torch.tensor([3.0, 4.0])
    # sum of squares about 0 = 25, unbiased std sqrt(25/1) = 5
    _close(_norm(None, "batch")(x), [0.6, 0.8])
    _close(_norm(None, None)(x, torch.tensor([1, 0])), [3.0, 0.0])


def test_group_mean_with_batch_std_uses_group_means():
    x = torch.tensor([1.0, 3.0, 10.0, 14.0])
    # group means 2, 2, 12, 12 -> deviations -1, 1, -2, 2, SS 10, unbiased batch std sqrt(10/3)
    s = math.sqrt(10 / 3)
    _close(_norm("group", "batch")(x, group_sizes=[2, 2]), [-1 / s, 1 / s, -2 / s, 2 / s])


def test_batch_mean_with_group_std():
    x = torch.tensor([1.0, 3.0, 10.0, 14.0])
    # batch mean 7 -> deviations -6 -4 | 3 7; group SS 52 | 58
    a, b = math.sqrt(52), math.sqrt(58)
    _close(_norm("batch", "group")(x, group_sizes=[2, 2]), [-6 / a, -4 / a, 3 / b, 7 / b])


def test_singleton_group_leave_one_out_normalises_to_zero():
    x = torch.tensor([5.0, 1.0, 2.0, 6.0])
    # AReaL 1.0.4 used baseline 0 for a singleton (-> 5); the row itself is its baseline now.
    _close(_norm("group", None, loo=True)(x, group_sizes=[1, 3]), [0.0, -3.0, -1.5, 4.5])
    # with a group std the singleton stays 0 (biased: 0 / eps, unbiased: 0 / (1 + eps))
    _close(_norm("group", "group", loo=True, unbiased=False, eps=EPS)(x, group_sizes=[1, 3])[:1], [0.0])
    _close(_norm("group", "group", loo=True, eps=EPS)(x, group_sizes=[1, 3])[:1], [0.0])


def test_singleton_group_unbiased_std_is_one():
    x = torch.tensor([5.0, 1.0, 3.0])
    # singleton: std 1 (+eps); group [1, 3] about 0: SS 10, std sqrt(10)
    s = math.sqrt(10) + 0.1
    _close(_norm(None, "group", eps=0.1)(x, group_sizes=[1, 2]), [5 / 1.1, 1 / s, 3 / s])


def test_singleton_group_biased_std_is_ordinary():
    x = torch.tensor([5.0, 1.0, 3.0])
    # singleton biased std about 0: sqrt(25 / 1) = 5
    _close(_norm(None, "group", unbiased=False, eps=0.1)(x, group_sizes=[1, 2])[:1], [5 / 5.1])


def test_singleton_without_leave_one_out_uses_ordinary_mean():
    x = torch.tensor([[5.0, 7.0], [1.0, 3.0]])
    # the singleton row's own token mean (6) is its baseline; std 1 for the unbiased singleton
    _close(_norm("group", "group")(x, group_sizes=[1, 1]), [[-1.0, 1.0], [-1.0, 1.0]])


def test_split_logical_singleton_group():
    x = torch.tensor([1.0, 2.0, 6.0, 4.0, 8.0])
    # group 0 has 3 rows but one logical rollout: it is a singleton
    norm = _norm("group", None, loo=True)
    _close(norm(x, group_sizes=[3, 2], logical_group_sizes=[1, 2]), [0.0, 0.0, 0.0, -4.0, 4.0])
    _close(norm(x, group_sizes=[3, 2]), [-3.0, -1.5, 4.5, -4.0, 4.0])
    # unbiased std of a logical singleton is 1: mean 3 -> deviations -2 -1 3, not divided by sqrt(7)
    out = _norm("group", "group")(x[:3], group_sizes=[3], logical_group_sizes=[1])
    _close(out, [-2.0, -1.0, 3.0])


def test_fixed_group_size_fallback():
    x = torch.tensor([1.0, 3.0, 2.0, 6.0])
    r = 1 / math.sqrt(2)
    _close(_norm("group", "group", group_size=2)(x), [-r, r, -r, r])
    # group_size 1 makes every row a singleton group
    _close(_norm("group", None, loo=True, group_size=1)(x), [0.0, 0.0, 0.0, 0.0])


def test_fixed_group_size_must_divide_batch():
    with pytest.raises(ValueError, match=r"NormConfig.group_size: batch size 5 is not divisible by group_size=2"):
        _norm("group", "group", group_size=2)(torch.zeros(5))
    # batch levels never need the group size
    _norm("batch", "batch", group_size=2)(torch.arange(5.0))


def test_all_masked_returns_input_unchanged():
    x = torch.tensor([[1, 2], [3, 4]], dtype=torch.int64)
    out = _norm()(x, torch.zeros(2, 2))
    assert out.dtype == torch.float32
    assert out.tolist() == [[1.0, 2.0], [3.0, 4.0]]
    xf = x.float()
    out = _norm("group", "group", loo=True)(xf, torch.zeros(2, 2, dtype=torch.bool), group_sizes=[1, 1])
    assert out.tolist() == [[1.0, 2.0], [3.0, 4.0]]
    assert out.data_ptr() != xf.data_ptr()  # a copy, so editing it cannot reach the caller's tensor


def test_integer_input_and_call_matches_statistics():
    x = torch.tensor([[1, 5, 2], [0, 3, 3], [7, 1, 1]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1], [0, 1, 1]])
    norm = _norm("group", "batch", loo=True, eps=EPS)
    out = norm(x, mask, group_sizes=[2, 1])
    mean, denom = norm.statistics(x, mask, group_sizes=[2, 1])
    _close(out, ((x.double() - mean) * mask / denom).float(), atol=0, rtol=0)


def test_inputs_are_not_modified():
    x = torch.tensor([[1.0, 5.0], [2.0, 4.0]])
    mask = torch.tensor([[1.0, 0.0], [1.0, 1.0]])
    x0, m0 = x.clone(), mask.clone()
    _norm("group", "group", loo=True)(x, mask, group_sizes=[1, 1])
    _norm("batch", "batch")(x, mask)
    assert torch.equal(x, x0) and torch.equal(mask, m0)


@pytest.mark.parametrize(
    "kwargs, needle",
    [
        (dict(group_sizes=[2, 2]), "group_sizes: sizes sum to 4 rows, expected the batch size 3"),
        (dict(group_sizes=[3, 0]), "group_sizes[1]: got 0, expected an integer >= 1"),
        (dict(group_sizes=[1.5, 1.5]), "group_sizes[0]"),
        (
            dict(group_sizes=[1, 2], logical_group_sizes=[1]),
            "logical_group_sizes: got 1 sizes, expected one per group (2)",
        ),
        (dict(group_sizes=[1, 2], logical_group_sizes=[1, 3]), "logical_group_sizes[1]: got 3, expected at most"),
        (dict(group_sizes=[1, 2], logical_group_sizes=[1, 0]), "logical_group_sizes[1]"),
        (dict(loss_mask=torch.ones(2)), "loss_mask has shape (2,), expected x's shape (3,)"),
    ],
)
def test_rejects_bad_layouts(kwargs, needle):
    x = torch.tensor([1.0, 2.0, 3.0])
    with pytest.raises(ValueError) as info:
        _norm("group", "group")(x, kwargs.pop("loss_mask", None), **kwargs)
    assert needle in str(info.value)


def test_rejects_bad_x_and_config():
    with pytest.raises(ValueError, match=r"x has shape \(1, 2, 3\), expected a tensor \[B\] or \[B, T\]"):
        _norm()(torch.zeros(1, 2, 3))
    with pytest.raises(ValueError, match="expected a NormConfig"):
        Normalization({"mean_level": "batch"})  # type: ignore[arg-type]


# ---------------------------------------------------------------------------
# Reference: a plain per-group loop (AReaL 1.0.4 with the singleton change)
# ---------------------------------------------------------------------------


def _ref_mean(x, mask, loo):
    xm = x * mask
    n, s = mask.sum(), xm.sum()
    if loo:
        if n.item() <= 1:
            return torch.zeros_like(x)
        return torch.where(mask > 0, (s - xm) / torch.clamp(n - mask, min=1.0), (s / n).expand_as(x))
    if n.item() == 0:
        return torch.zeros_like(x)
    return (s / n).expand_as(x)


def _ref_std(x, mask, mean, unbiased):
    n = mask.sum()
    ss = ((x * mask - mean * mask) ** 2).sum()
    if unbiased:
        return torch.ones_like(x) if n.item() <= 1 else (ss / (n - 1)).sqrt().expand_as(x)
    return torch.ones_like(x) if n.item() == 0 else (ss / n).sqrt().expand_as(x)


def _reference(x, mask, cfg: NormConfig, sizes, logical):
    """Returns (output, mean, denom); slices of consecutive rows, one Python iteration per group."""
    if mask is not None and mask.sum().item() == 0:
        return x.float(), None, None
    x = x.double()
    m = torch.ones_like(x) if mask is None else mask.double()
    if sizes is None:
        sizes = [cfg.fallback_group_size] * (x.shape[0] // cfg.fallback_group_size)
    logical = sizes if logical is None else logical
    bounds = [(sum(sizes[:i]), sum(sizes[: i + 1])) for i in range(len(sizes))]
    mean = torch.zeros_like(x)
    if cfg.mean_level == "batch":
        mean = _ref_mean(x, m, cfg.mean_leave1out)
    elif cfg.mean_level == "group":
        for (a, b), members in zip(bounds, logical):
            if members == 1 and cfg.mean_leave1out:
                mean[a:b] = x[a:b]
            else:
                mean[a:b] = _ref_mean(x[a:b], m[a:b], cfg.mean_leave1out)
    centered = (x - mean) * m
    eps = cfg.eps
    std = torch.ones_like(x)
    if cfg.std_level == "batch":
        std = _ref_std(x, m, mean, cfg.std_unbiased)
    elif cfg.std_level == "group":
        for (a, b), members in zip(bounds, logical):
            if members == 1 and cfg.std_unbiased:
                std[a:b] = 1.0
            else:
                std[a:b] = _ref_std(x[a:b], m[a:b], mean[a:b], cfg.std_unbiased)
    else:
        eps = 0.0
    return (centered / (std + eps)).float(), mean, std + eps


_LEVELS = st.sampled_from(["batch", "group", None])
_VALUES = st.one_of(
    st.integers(-8, 8).map(lambda v: v / 2),
    st.floats(-10, 10, allow_nan=False, allow_infinity=False, width=32),
)


@st.composite
def _cases(draw):
    uniform = draw(st.booleans())
    if uniform:
        size = draw(st.integers(1, 4))
        sizes = [size] * draw(st.integers(1, 5))
    else:
        sizes = draw(st.lists(st.integers(1, 5), min_size=1, max_size=7))
    logical = draw(st.one_of(st.none(), st.tuples(*[st.integers(1, s) for s in sizes]).map(list)))
    batch = sum(sizes)
    shape = (batch,) if draw(st.booleans()) else (batch, draw(st.integers(1, 4)))
    n = math.prod(shape)
    dtype = draw(st.sampled_from([torch.float32, torch.float64]))
    x = torch.tensor(draw(st.lists(_VALUES, min_size=n, max_size=n)), dtype=dtype)
    mask_kind = draw(st.sampled_from(["none", "binary", "binary", "zeros", "bool"]))
    mask = None
    if mask_kind != "none":
        bits = draw(st.lists(st.booleans(), min_size=n, max_size=n))
        mask = torch.tensor(bits).view(shape)
        if mask_kind == "zeros":
            mask = torch.zeros(shape)
        elif mask_kind == "binary":
            mask = mask.float()
    cfg = NormConfig(
        mean_level=draw(_LEVELS),
        std_level=draw(_LEVELS),
        mean_leave1out=draw(st.booleans()),
        std_unbiased=draw(st.booleans()),
        eps=draw(st.sampled_from([1e-5, 1e-3, 0.1])),
        group_size=sizes[0] if uniform else 1,
    )
    return x.view(shape), mask, cfg, (None if uniform and draw(st.booleans()) else sizes), logical


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_cases())
def test_matches_per_group_loop_reference(case):
    x, mask, cfg, sizes, logical = case
    norm = Normalization(cfg)
    expected, ref_mean, ref_denom = _reference(x, mask, cfg, sizes, logical)
    out = norm(x, mask, group_sizes=sizes, logical_group_sizes=logical)
    torch.testing.assert_close(out, expected, rtol=1e-6, atol=1e-6)
    if ref_mean is not None:
        mean, denom = norm.statistics(x, mask, group_sizes=sizes, logical_group_sizes=logical)
        torch.testing.assert_close(mean, ref_mean, rtol=1e-6, atol=1e-9)
        torch.testing.assert_close(denom, ref_denom, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("shape", [(1024,), (1024, 8)])
def test_vectorised_equals_a_group_loop_on_128_groups(shape):
    """Speed against the loop is a benchmark (bench/kernels/bench_advantage.py, docs/performance.md), not a test."""
    gen = torch.Generator().manual_seed(0)
    sizes = [8] * 128
    x = torch.randn(*shape, generator=gen)
    mask = (torch.rand(*shape, generator=gen) > 0.3).float()
    cfg = NormConfig(mean_level="group", std_level="group", mean_leave1out=True)
    norm = Normalization(cfg)
    torch.testing.assert_close(norm(x, mask, group_sizes=sizes), _reference(x, mask, cfg, sizes, None)[0])


# ---------------------------------------------------------------------------
# Distributed: two gloo ranks each holding half of the trajectory groups
# ---------------------------------------------------------------------------

_SIZES = [3, 1, 2, 4, 2, 3, 1, 2]  # ranks 0 and 1 each take 4 groups
_SPLIT = 4
_SCENARIOS = {
    "batch": dict(mean_level="batch", std_level="batch", eps=EPS),
    "batch_loo_biased": dict(mean_level="batch", std_level="batch", mean_leave1out=True, std_unbiased=False),
    "group": dict(mean_level="group", std_level="group", mean_leave1out=True, eps=EPS),
    "group_mean_batch_std": dict(mean_level="group", std_level="batch", eps=EPS),
    "no_mean_batch_std": dict(mean_level=None, std_level="batch"),
}


def _dist_data():
    gen = torch.Generator().manual_seed(1234)
    batch = sum(_SIZES)
    x = torch.randn(batch, 6, generator=gen) * 3 + 1
    mask = (torch.rand(batch, 6, generator=gen) > 0.25).float()
    return x, mask


def _rank_rows(rank: int) -> tuple[slice, list[int]]:
    sizes = _SIZES[:_SPLIT] if rank == 0 else _SIZES[_SPLIT:]
    start = 0 if rank == 0 else sum(_SIZES[:_SPLIT])
    return slice(start, start + sum(sizes)), sizes


def _dist_worker(rank: int, world: int, out_dir: str) -> None:
    torch.set_num_threads(1)
    # a file rendezvous: no port to pick, so no other job can take it in between
    dist.init_process_group(
        "gloo",
        init_method=f"file://{os.path.join(out_dir, 'rendezvous')}",
        rank=rank,
        world_size=world,
        timeout=timedelta(seconds=60),
    )
    try:
        x, mask = _dist_data()
        rows, sizes = _rank_rows(rank)
        results = {}
        for name, kwargs in _SCENARIOS.items():
            norm = Normalization(NormConfig(**kwargs))
            results[name] = norm(x[rows], mask[rows], group_sizes=sizes, logical_group_sizes=sizes)
        # rank 1 has no active token: it must still join the all-reduces and return its input
        idle = mask[rows] * (0.0 if rank == 1 else 1.0)
        for name, kwargs in _SCENARIOS.items():
            norm = Normalization(NormConfig(**kwargs))
            results["idle_" + name] = norm(x[rows], idle, group_sizes=sizes)
        dist.barrier()
        torch.save(results, os.path.join(out_dir, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


@pytest.mark.timeout(240)
def test_distributed_matches_single_process(tmp_path):
    import torch.multiprocessing as mp

    assert not dist.is_initialized()
    ctx = mp.start_processes(_dist_worker, args=(2, str(tmp_path)), nprocs=2, join=False, start_method="spawn")
    deadline = time.monotonic() + 180
    try:
        while not ctx.join(timeout=max(1.0, deadline - time.monotonic())):
            if time.monotonic() > deadline:
                pytest.fail("distributed normalisation did not finish within 180 s (a rank hung)")
    finally:
        for proc in ctx.processes:
            if proc.is_alive():
                proc.kill()
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(2)]

    x, mask = _dist_data()
    for name, kwargs in _SCENARIOS.items():
        whole = Normalization(NormConfig(**kwargs))(x, mask, group_sizes=_SIZES)
        joined = torch.cat([ranks[0][name], ranks[1][name]])
        torch.testing.assert_close(joined, whole, rtol=1e-6, atol=1e-6, msg=name)

    rows1, _ = _rank_rows(1)
    idle_mask = mask.clone()
    idle_mask[rows1] = 0.0
    for name, kwargs in _SCENARIOS.items():
        whole = Normalization(NormConfig(**kwargs))(x, idle_mask, group_sizes=_SIZES)
        rows0, _ = _rank_rows(0)
        torch.testing.assert_close(ranks[0]["idle_" + name], whole[rows0], rtol=1e-6, atol=1e-6, msg=name)
        assert torch.equal(ranks[1]["idle_" + name], x[rows1]), name
