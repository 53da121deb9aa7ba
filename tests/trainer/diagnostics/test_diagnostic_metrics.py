"""The diagnostics' metrics against plain loops written from their definitions."""

from __future__ import annotations

import math

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from areal_adv.trainer.diagnostics.diagnostic_metrics import (
    cosine,
    gradient_snr,
    length_corr,
    noise_proxy,
    reward_rank_corr,
    sequence_metrics,
    zero_adv_frac,
)
from areal_adv.trainer.diagnostics.gradient_probe import FoldMoments

SETTINGS = settings(max_examples=40, deadline=None)


@st.composite
def batches(draw: st.DrawFn) -> dict:
    """Groups of rows with random response masks, advantages (some exactly or nearly 0), rewards and Σπ²."""
    sizes = draw(st.lists(st.integers(1, 5), min_size=1, max_size=4))
    rows, width = sum(sizes), draw(st.integers(1, 6))
    seed = draw(st.integers(0, 2**31 - 1))
    g = torch.Generator().manual_seed(seed)
    mask = (torch.rand(rows, width, generator=g) < 0.7).float()
    adv = torch.randn(rows, width, generator=g)
    adv = torch.where(torch.rand(rows, width, generator=g) < 0.3, torch.zeros_like(adv), adv)
    adv = torch.where(torch.rand(rows, width, generator=g) < 0.1, torch.full_like(adv, 3e-9), adv)
    rewards = torch.randint(0, 3, (rows,), generator=g).float()
    logprobs = -torch.rand(rows, width, generator=g) * 3
    spp = torch.rand(rows, width, generator=g)
    return {"sizes": sizes, "mask": mask, "adv": adv, "rewards": rewards, "logprobs": logprobs, "spp": spp}


def _row_means(adv: torch.Tensor, mask: torch.Tensor) -> list[tuple[float, int]]:
    out = []
    for i in range(adv.shape[0]):
        tokens = [float(adv[i, t]) for t in range(adv.shape[1]) if mask[i, t] > 0]
        out.append((sum(tokens) / len(tokens) if tokens else 0.0, len(tokens)))
    return out


def _pearson(x: list[float], y: list[float]) -> float:
    if len(x) < 2:
        return 0.0
    mx, my = sum(x) / len(x), sum(y) / len(y)
    sxy = sum((a - mx) * (b - my) for a, b in zip(x, y))
    sx, sy = sum((a - mx) ** 2 for a in x), sum((b - my) ** 2 for b in y)
    return 0.0 if sx <= 0 or sy <= 0 else sxy / math.sqrt(sx * sy)


def _ranks(x: list[float]) -> list[float]:
    order = sorted(range(len(x)), key=lambda i: x[i])
    ranks = [0.0] * len(x)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and x[order[j + 1]] == x[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1  # ties share the average of their 1-based positions
        i = j + 1
    return ranks


@SETTINGS
@given(batches())
def test_zero_adv_frac_counts_response_tokens_at_or_below_1e8(b: dict) -> None:
    adv, mask = b["adv"], b["mask"]
    tokens = [abs(float(adv[i, t])) for i in range(adv.shape[0]) for t in range(adv.shape[1]) if mask[i, t] > 0]
    expected = sum(a <= 1e-8 for a in tokens) / len(tokens) if tokens else 0.0
    assert zero_adv_frac(adv, mask) == expected


@SETTINGS
@given(batches())
def test_noise_proxy_is_the_mean_of_squared_sequence_advantage_times_w(b: dict) -> None:
    adv, mask, logp, spp = b["adv"], b["mask"], b["logprobs"], b["spp"]
    terms = []
    for i, (mean, n) in enumerate(_row_means(adv, mask)):
        if n == 0:
            continue
        w = sum(1 - 2 * math.exp(float(logp[i, t])) + float(spp[i, t]) for t in range(adv.shape[1]) if mask[i, t] > 0)
        terms.append(mean**2 * max(w, 0.0))
    expected = sum(terms) / len(terms) if terms else 0.0
    assert math.isclose(noise_proxy(adv, mask, logp, spp), expected, rel_tol=1e-9, abs_tol=1e-12)


@SETTINGS
@given(batches())
def test_length_corr_is_pearson_of_sequence_advantage_and_length(b: dict) -> None:
    pairs = [(mean, n) for mean, n in _row_means(b["adv"], b["mask"]) if n > 0]
    expected = _pearson([m for m, _ in pairs], [float(n) for _, n in pairs])
    assert math.isclose(length_corr(b["adv"], b["mask"]), expected, rel_tol=1e-9, abs_tol=1e-9)


@SETTINGS
@given(batches())
def test_reward_rank_corr_is_spearman_within_groups_averaged_over_varying_groups(b: dict) -> None:
    means = [m for m, _ in _row_means(b["adv"], b["mask"])]
    rewards = [float(r) for r in b["rewards"]]
    values, start = [], 0
    for size in b["sizes"]:
        a, r = means[start : start + size], rewards[start : start + size]
        start += size
        if len(set(a)) > 1 and len(set(r)) > 1:
            values.append(_pearson(_ranks(a), _ranks(r)))
    expected = sum(values) / len(values) if values else 0.0
    got = reward_rank_corr(b["adv"], b["mask"], b["rewards"], b["sizes"])
    assert math.isclose(got, expected, rel_tol=1e-9, abs_tol=1e-9)


def test_reward_rank_corr_is_one_when_advantages_order_samples_as_rewards() -> None:
    adv = torch.tensor([[0.1], [0.5], [0.3], [-1.0], [2.0], [0.0]])
    rewards = torch.tensor([0.0, 2.0, 1.0, 0.0, 1.0, 0.5])
    assert math.isclose(reward_rank_corr(adv, torch.ones(6, 1), rewards, [3, 3]), 1.0)
    assert math.isclose(reward_rank_corr(-adv, torch.ones(6, 1), rewards, [3, 3]), -1.0)


@SETTINGS
@given(st.integers(2, 6), st.integers(1, 8), st.integers(0, 2**31 - 1))
def test_gradient_snr_is_the_bias_corrected_signal_over_the_mean_s_noise(k: int, p: int, seed: int) -> None:
    grads = torch.randn(k, p, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) + 0.5
    rows = [[float(x) for x in g] for g in grads]
    mean = [sum(r[j] for r in rows) / k for j in range(p)]
    s2 = sum(sum((r[j] - mean[j]) ** 2 for j in range(p)) for r in rows) / (k - 1)
    noise = s2 / k
    expected = (sum(m * m for m in mean) - noise) / noise
    assert math.isclose(gradient_snr(grads), expected, rel_tol=1e-9)


@SETTINGS
@given(st.integers(1, 6), st.integers(1, 8), st.integers(0, 2**31 - 1), st.floats(0.0, 3.0))
def test_fold_moments_give_the_stacked_snr_and_mean(k: int, p: int, seed: int, offset: float) -> None:
    grads = torch.randn(k, p, generator=torch.Generator().manual_seed(seed)) + offset
    moments = FoldMoments()
    for g in grads:  # one fold at a time, split into two parameter tensors
        moments.add([g[: p // 2], g[p // 2 :]])
    assert moments.count == k
    assert torch.allclose(moments.mean(), grads.double().mean(0), rtol=1e-6, atol=1e-7)
    assert math.isclose(moments.snr(), gradient_snr(grads), rel_tol=1e-4, abs_tol=1e-6)


def test_fold_moments_of_equal_folds_measure_no_noise() -> None:
    equal = FoldMoments()
    for _ in range(4):
        equal.add([torch.full((5,), 0.1), torch.full((3,), -2.0)])
    assert equal.snr() == 0.0 == gradient_snr(torch.full((4, 8), 0.1))
    assert FoldMoments().snr() == 0.0 and FoldMoments().count == 0


def test_gradient_snr_of_equal_gradients_and_the_unbiased_signal() -> None:
    assert gradient_snr(torch.zeros(4, 3)) == 0.0
    assert gradient_snr(torch.ones(1, 3)) == 0.0
    # E ||mean||^2 = ||mu||^2 + tr Cov / K: with mu = 0 the corrected signal averages to 0, the raw one does not
    g = torch.Generator().manual_seed(0)
    samples = torch.randn(4000, 4, 50, generator=g, dtype=torch.float64)
    mean = samples.mean(1)
    noise = ((samples - mean[:, None]) ** 2).sum((1, 2)) / 3 / 4
    corrected = (mean**2).sum(-1) - noise
    assert abs(float(corrected.mean())) < 0.05 * float((mean**2).sum(-1).mean())


def test_cosine_and_the_zero_vector() -> None:
    assert math.isclose(cosine(torch.tensor([1.0, 0.0]), torch.tensor([1.0, 1.0])), 1 / math.sqrt(2))
    assert cosine(torch.zeros(3), torch.ones(3)) == 0.0


def test_sequence_metrics_leaves_out_the_noise_proxy_without_sum_pi_squared_and_keeps_inputs() -> None:
    adv, mask = torch.tensor([[1.0, 0.0], [0.0, 0.0]]), torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    before = (adv.clone(), mask.clone())
    out = sequence_metrics(adv, mask, torch.tensor([1.0, 0.0]), [2])
    assert list(out) == ["zero_adv_frac", "length_corr", "reward_rank_corr"]
    assert out["zero_adv_frac"] == 2 / 3
    assert torch.equal(adv, before[0]) and torch.equal(mask, before[1])
    full = sequence_metrics(adv, mask, torch.tensor([1.0, 0.0]), [2], logprobs=-mask, sum_pi_squared=mask * 0.5)
    assert list(full) == ["zero_adv_frac", "noise_proxy", "length_corr", "reward_rank_corr"]
