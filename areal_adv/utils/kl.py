"""Per-token KL estimators between the policy and the reference policy (Schulman's k1/k2/k3)."""

from __future__ import annotations

import math

import numpy as np
import torch

try:
    import numba

    NUMBA_AVAILABLE = True
except ImportError:  # pragma: no cover - numba is a declared dependency
    NUMBA_AVAILABLE = False

__all__ = ["KLEstimator", "KL_ESTIMATORS", "K3_RATIO_BOUND", "exp_reduced", "k3_bounded", "k3_bounded_torch"]

KL_ESTIMATORS: tuple[str, ...] = ("k1", "k2", "k3")
#: k3 = exp(-r) - 1 + r exceeds the clamp (10) for |r| >= 11 and grows monotonically beyond it.
K3_RATIO_BOUND = 20.0

# k3's exp on the bounded log-ratio, in float64 operations that torch and numba evaluate alike.
# Why not torch.exp: the fused CPU kernels (areal_adv.trainer.ppo.kernels.fused_cpu) cannot call it,
# and two exp implementations (torch's vectorised one and libm's) differ in the last bit of some
# results, so k3 could not be bit for bit the same on both paths. Only +, - and * of IEEE doubles
# are used (no fused multiply-add, no reassociation: neither torch's separate operations nor
# numba's default compilation does either), so every result is determined by the operands.
_SHIFTER = 6755399441055744.0  # 1.5 * 2**52: (x + S) - S is x rounded to the nearest integer for |x| < 2**51
_INV_LN2 = 1.4426950408889634  # 1 / ln 2
_LN2_HI = 6.93147180369123816490e-01  # ln 2 split so that k * _LN2_HI is exact for |k| < 2**20
_LN2_LO = 1.90821492927058770002e-10
#: Taylor coefficients 1/i! of exp on |r| <= ln(2)/2, highest degree first (Horner); the
#: truncation error r^14/14! < 5e-18 is below float64's resolution.
_EXP_TOP = 1.0 / math.factorial(13)
_EXP_NEXT = 1.0 / math.factorial(12)
_EXP_REST = tuple(1.0 / math.factorial(i) for i in range(11, -1, -1))
#: 2**k for k = -_POW2_OFFSET .. _POW2_OFFSET (|k| <= 29 for |x| <= K3_RATIO_BOUND).
_POW2_OFFSET = 32
_POW2 = np.array([2.0**k for k in range(-_POW2_OFFSET, _POW2_OFFSET + 1)], dtype=np.float64)
_POW2_TENSORS: dict[torch.device, torch.Tensor] = {}
#: Below this many elements a CPU tensor's k3 runs in torch operations (a numba call costs a few microseconds).
_NUMBA_MIN_ELEMENTS = 4096


def exp_reduced(x):
    """(k, p) with exp(x) = p * 2**k, for float64 x (a tensor or a number) with |x| <= K3_RATIO_BOUND.

    k is an integral float64, p = exp(r) for r = x - k ln 2 (Cody-Waite reduction);
    p carries a relative error of a few 1e-16, so float32(p * 2**k) is exp(x)
    correctly rounded but for results within ~1e-16 of a float32 rounding boundary.
    """
    # Augmented assignments to fresh temporaries: in place for tensors (a [B, T] float64
    # allocation per operation costs more than the operation), plain rebinding for numbers.
    k = x * _INV_LN2
    k += _SHIFTER
    k -= _SHIFTER
    r = x - k * _LN2_HI
    r -= k * _LN2_LO
    p = r * _EXP_TOP
    p += _EXP_NEXT
    for c in _EXP_REST:
        p *= r
        p += c
    return k, p


_exp_reduced_scalar = exp_reduced  # what k3_bounded calls: the compiled twin when numba is there (below)


def k3_bounded(log_ratio):
    """k3 = exp(-r) - 1 + r of one float32 log-ratio, -r bounded to ±K3_RATIO_BOUND (numba; NaN stays NaN)."""
    bound = np.float32(K3_RATIO_BOUND)
    neg = min(max(-log_ratio, -bound), bound)
    k, p = _exp_reduced_scalar(np.float64(neg))
    # |k| <= 29 for a bounded -r; the clamp only keeps a NaN's k (int64 min) inside the table (p is NaN there).
    index = min(max(np.int64(k), -_POW2_OFFSET), _POW2_OFFSET) + _POW2_OFFSET
    return np.float32(p * _POW2[index]) - np.float32(1.0) - neg


def k3_bounded_torch(log_ratio: torch.Tensor) -> torch.Tensor:
    """`k3_bounded` of a float32 tensor, in torch operations (any device): the same bits."""
    neg = (-log_ratio).clamp_(min=-K3_RATIO_BOUND, max=K3_RATIO_BOUND)
    k, p = exp_reduced(neg.to(torch.float64))
    table = _POW2_TENSORS.get(neg.device)
    if table is None:
        table = _POW2_TENSORS.setdefault(neg.device, torch.from_numpy(_POW2).to(neg.device))
    p *= table[k.long().clamp_(-_POW2_OFFSET, _POW2_OFFSET) + _POW2_OFFSET]  # as k3_bounded (a NaN's k)
    return p.to(torch.float32) - 1 - neg


def _k3_rows(log_ratio, out):
    """out = k3_bounded of every element (flat float32 arrays); one compiled loop, vectorised."""
    for i in range(log_ratio.shape[0]):
        out[i] = k3_bounded(log_ratio[i])


if NUMBA_AVAILABLE:
    _exp_reduced_scalar = numba.njit(cache=True, nogil=True, inline="always")(exp_reduced)
    k3_bounded = numba.njit(cache=True, nogil=True, inline="always")(k3_bounded)  # the fused kernels call it
    _k3_rows = numba.njit(cache=True, nogil=True)(_k3_rows)


def _k3(log_ratio: torch.Tensor) -> torch.Tensor:
    """Bounded k3 of a float32 tensor: the compiled loop for CPU tensors, torch operations elsewhere."""
    if not (NUMBA_AVAILABLE and log_ratio.device.type == "cpu" and log_ratio.numel() >= _NUMBA_MIN_ELEMENTS):
        return k3_bounded_torch(log_ratio)
    flat = log_ratio.detach().contiguous().view(-1)
    out = torch.empty_like(flat)
    _k3_rows(flat.numpy(), out.numpy())
    return out.view(log_ratio.shape)


class KLEstimator:
    """Per-token KL(policy || reference) estimates from log-probabilities (Schulman's k1/k2/k3)."""

    def __init__(self, kind: str = "k1", apply_clamp: bool = True):
        if kind not in KL_ESTIMATORS:
            raise ValueError(f"actor.kl_estimator: got {kind!r}, expected one of {list(KL_ESTIMATORS)}")
        self.kind = kind
        self.apply_clamp = bool(apply_clamp)

    def __call__(self, logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
        """float32 estimate, clamped to [-10, 10] when apply_clamp (guards against outliers).

        With the clamp, k3 bounds the log-ratio first (which changes no clamped
        value and keeps exp(inf) - inf = NaN out of extreme finite inputs) and
        takes its exp from `exp_reduced` (within one float32 step of torch.exp,
        the same bits as the fused CPU kernels); without the clamp, or for inputs
        that require grad, torch.exp.
        """
        log_ratio = logp.float() - ref_logp.float()
        if self.kind == "k1":
            kl = log_ratio
        elif self.kind == "k2":
            kl = log_ratio**2 / 2.0
        elif self.apply_clamp and not log_ratio.requires_grad:
            kl = _k3(log_ratio)
        else:  # unclamped, or differentiated (the rounding in exp_reduced has no useful gradient): torch.exp
            neg = -log_ratio
            if self.apply_clamp:
                neg = neg.clamp(min=-K3_RATIO_BOUND, max=K3_RATIO_BOUND)
            kl = neg.exp() - 1 - neg
        if self.apply_clamp:
            kl.clamp_(min=-10, max=10)  # kl is always a fresh tensor here
        return kl

    def __repr__(self) -> str:
        return f"KLEstimator(kind={self.kind!r}, apply_clamp={self.apply_clamp})"
