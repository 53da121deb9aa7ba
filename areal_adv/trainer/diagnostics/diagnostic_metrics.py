"""What an estimator's advantages do with a batch: the diagnostics logged as `diagnostics/<name>/<metric>`.

Pure functions of tensors, in the pipeline's next-token aligned layout: `adv`,
`mask` (the response tokens that train), `logprobs` (the behaviour policy's
log-probs of those tokens) and `sum_pi_squared` (Σ_a π(a)² of the distribution
that drew each token) are [B, T]; `rewards` is [B], one scalar per row;
`group_sizes` lists the rows of each prompt group, in row order. A row is a
sequence (one episode, or one turn under `rollout.export=per_turn`), and its
advantage Ā_i is the mean of A over its response tokens.

Where a correlation is undefined (one side has no variance, or no group varies)
it is reported as 0: no association can be measured there. Nothing here draws
random numbers, loops over tokens or edits its inputs.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from areal_adv.trainer.diagnostics.metric_names import SEQUENCE_METRICS

__all__ = [
    "ZERO_ADVANTAGE",
    "cosine",
    "gradient_snr",
    "length_corr",
    "noise_proxy",
    "pearson",
    "reward_rank_corr",
    "sequence_advantages",
    "sequence_metrics",
    "zero_adv_frac",
]

#: |A| at or below this is a zero advantage (GRPO's all-equal groups leave float dust of ~1e-9, not 0).
ZERO_ADVANTAGE = 1e-8


def zero_adv_frac(adv: torch.Tensor, mask: torch.Tensor) -> float:
    """The share of response tokens with |A| <= 1e-8: the signal lost (all-equal groups, masked rows); 0 if none."""
    active = mask.bool()
    n = int(active.sum())
    if n == 0:
        return 0.0
    return float(((adv.abs() <= ZERO_ADVANTAGE) & active).sum()) / n


def sequence_advantages(adv: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(Ā [B], L [B]) in float64: each row's mean advantage over its response tokens (0 without any), and L = their count."""
    m = mask.to(torch.float64)
    lengths = m.sum(-1)
    return (adv.to(torch.float64) * m).sum(-1) / lengths.clamp(min=1.0), lengths


def noise_proxy(adv: torch.Tensor, mask: torch.Tensor, logprobs: torch.Tensor, sum_pi_squared: torch.Tensor) -> float:
    """verl's gradient-variance proxy E_i[Ā_i² · W_i], over the rows with a response token.

    W_i = Σ_t m_it (1 − 2 π_t + Σ_a π(a)²) with π_t = exp(logprob of the drawn
    token) is ‖∇ log π(y_t)‖² w.r.t. the logits, summed over the row: the
    squared score norm of the sequence, so Ā² W approximates the squared norm
    of the row's gradient contribution (verl `compute_variance_proxy_metrics`,
    on-policy "proxy 2"; W clamped at 0 as there).
    """
    m = mask.to(torch.float64)
    w = ((1.0 - 2.0 * logprobs.to(torch.float64).exp() + sum_pi_squared.to(torch.float64)) * m).sum(-1)
    mean_adv, lengths = sequence_advantages(adv, mask)
    rows = lengths > 0
    if not bool(rows.any()):
        return 0.0
    return float((mean_adv[rows] ** 2 * w[rows].clamp(min=0.0)).mean())


def pearson(x: torch.Tensor, y: torch.Tensor) -> float:
    """The Pearson correlation of two [n] vectors; 0 when either has no variance (or n < 2)."""
    x, y = x.to(torch.float64), y.to(torch.float64)
    dx, dy = x - x.mean(), y - y.mean()
    sx, sy = (dx * dx).sum(), (dy * dy).sum()
    if x.numel() < 2 or float(sx) <= 0.0 or float(sy) <= 0.0:
        return 0.0
    return float((dx * dy).sum() / (sx.sqrt() * sy.sqrt()))


def length_corr(adv: torch.Tensor, mask: torch.Tensor) -> float:
    """Length bias: the Pearson correlation of Ā_i with the row's response length L_i, over rows with L_i > 0.

    Positive: longer answers get larger advantages (the update pushes towards
    length); 0 when the lengths or the advantages do not vary.
    """
    mean_adv, lengths = sequence_advantages(adv, mask)
    rows = lengths > 0
    return pearson(mean_adv[rows], lengths[rows])


def _average_ranks(x: torch.Tensor) -> torch.Tensor:
    """Ranks 1..n of [n] values, ties sharing their average rank: #{x_j < x_i} + (#{x_j = x_i} + 1) / 2."""
    less = (x.unsqueeze(0) < x.unsqueeze(1)).sum(-1).to(torch.float64)
    equal = (x.unsqueeze(0) == x.unsqueeze(1)).sum(-1).to(torch.float64)
    return less + (equal + 1.0) / 2.0


def reward_rank_corr(adv: torch.Tensor, mask: torch.Tensor, rewards: torch.Tensor, group_sizes: Sequence[int]) -> float:
    """Spearman's ρ of Ā_i and the reward r_i within each prompt group, averaged over the groups where both vary.

    ρ is the Pearson correlation of the average ranks (ties share theirs).
    1: within every group the advantage orders the samples as the reward
    does; below 1: the estimator reorders them (KL or length terms, per-token
    credit). Groups whose rewards or advantages are all equal carry no order
    and are left out; 0 when no group is left.
    """
    mean_adv, _ = sequence_advantages(adv, mask)
    rewards = rewards.to(torch.float64)
    values, start = [], 0
    for size in group_sizes:
        a, r = mean_adv[start : start + size], rewards[start : start + size]
        start += size
        if size >= 2 and bool((r != r[0]).any()) and bool((a != a[0]).any()):
            values.append(pearson(_average_ranks(a), _average_ranks(r)))
    return sum(values) / len(values) if values else 0.0


def sequence_metrics(
    adv: torch.Tensor,
    mask: torch.Tensor,
    rewards: torch.Tensor,
    group_sizes: Sequence[int],
    *,
    logprobs: torch.Tensor | None = None,
    sum_pi_squared: torch.Tensor | None = None,
) -> dict[str, float]:
    """The four gradient-free metrics of one estimator's advantages; `noise_proxy` only with Σπ² and log-probs."""
    out = {
        "zero_adv_frac": zero_adv_frac(adv, mask),
        "length_corr": length_corr(adv, mask),
        "reward_rank_corr": reward_rank_corr(adv, mask, rewards, group_sizes),
    }
    if logprobs is not None and sum_pi_squared is not None:
        out["noise_proxy"] = noise_proxy(adv, mask, logprobs, sum_pi_squared)
    return {name: out[name] for name in SEQUENCE_METRICS if name in out}


def gradient_snr(grads: torch.Tensor) -> float:
    """The signal-to-noise ratio of the mean of K fold gradients [K, P] (float64 inside).

    With ḡ = mean_k g_k and the unbiased sample variance S² = Σ_k ‖g_k − ḡ‖² / (K − 1)
    (an estimate of tr Cov(g)), the mean's noise is tr Cov(ḡ) = tr Cov(g) / K,
    estimated by S² / K. E‖ḡ‖² = ‖E g‖² + tr Cov(g) / K, so ‖ḡ‖² overstates the
    signal; ‖ḡ‖² − S² / K is unbiased for ‖E g‖². Reported:

        SNR = (‖ḡ‖² − S²/K) / (S²/K)

    an unbiased numerator over an unbiased denominator (the ratio itself is not
    unbiased); it is negative when the folds disagree more than their mean
    shows. 0 when every fold gradient is the same (no noise measured: all zero,
    or K < 2).
    """
    g = grads.to(torch.float64)
    k = g.shape[0]
    if k < 2:
        return 0.0
    mean = g.mean(0)
    noise = float(((g - mean) ** 2).sum() / (k - 1)) / k
    if noise <= 0.0:
        return 0.0
    return (float((mean * mean).sum()) - noise) / noise


def cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    """cos(a, b) of two flat vectors (float64); 0 when either is the zero vector."""
    a, b = a.to(torch.float64), b.to(torch.float64)
    na, nb = float(a.norm()), float(b.norm())
    if na == 0.0 or nb == 0.0:
        return 0.0
    return float((a @ b) / (na * nb))
