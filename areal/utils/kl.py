"""Per-token KL estimators between the policy and the reference policy (Schulman's k1/k2/k3)."""

from __future__ import annotations

import math

import torch

__all__ = ["KLEstimator", "KL_ESTIMATORS", "K3_RATIO_BOUND", "POW2_OFFSET", "POW2_TABLE", "exp_reduced"]

KL_ESTIMATORS: tuple[str, ...] = ("k1", "k2", "k3")
#: k3 = exp(-r) - 1 + r exceeds the clamp (10) for |r| >= 11 and grows monotonically beyond it.
K3_RATIO_BOUND = 20.0

# exp on the bounded log-ratio, in float64 operations that torch and the fused numba kernels
# (areal.trainer.ppo.kernels.fused_cpu) evaluate alike. Why not torch.exp: the kernels cannot call
# it, and two exp implementations (torch's vectorised one and libm's) differ in the last bit of
# some results, so k3 could not be bit for bit the same on both paths. Only +, - and * of IEEE
# doubles are used (no fused multiply-add, no reassociation: neither torch nor the kernels'
# default compilation does either), so every result is determined by the operands.
_SHIFTER = 6755399441055744.0  # 1.5 * 2**52: (x + S) - S is x rounded to the nearest integer for |x| < 2**51
_INV_LN2 = 1.4426950408889634  # 1 / ln 2
_LN2_HI = 6.93147180369123816490e-01  # ln 2 split so that k * _LN2_HI is exact for |k| < 2**20
_LN2_LO = 1.90821492927058770002e-10
#: Taylor coefficients 1/i! of exp on |r| <= ln(2)/2, highest degree first (Horner); the
#: truncation error r^14/14! < 5e-18 is below float64's resolution.
_EXP_TOP = 1.0 / math.factorial(13)
_EXP_REST = tuple(1.0 / math.factorial(i) for i in range(12, -1, -1))
#: 2**k for k = -POW2_OFFSET .. POW2_OFFSET (|k| <= 29 for |x| <= K3_RATIO_BOUND).
POW2_OFFSET = 32
POW2_TABLE = tuple(2.0 ** k for k in range(-POW2_OFFSET, POW2_OFFSET + 1))
_POW2_TENSORS: dict[torch.device, torch.Tensor] = {}


def exp_reduced(x):
    """(k, p) with exp(x) = p * 2**k, for float64 x (a tensor or a number) with |x| <= K3_RATIO_BOUND.

    k is an integral float64, p = exp(r) for r = x - k ln 2 (Cody-Waite reduction);
    p carries a relative error of a few 1e-16, so float32(p * 2**k) is exp(x)
    correctly rounded but for results within ~1e-16 of a float32 rounding boundary.
    """
    k = (x * _INV_LN2 + _SHIFTER) - _SHIFTER
    r = (x - k * _LN2_HI) - k * _LN2_LO
    p = _EXP_TOP
    for c in _EXP_REST:
        p = p * r + c
    return k, p


def _exp_bounded(x: torch.Tensor) -> torch.Tensor:
    """float32 exp of a float32 tensor with |x| <= K3_RATIO_BOUND, through `exp_reduced`."""
    k, p = exp_reduced(x.to(torch.float64))
    table = _POW2_TENSORS.get(x.device)
    if table is None:
        table = _POW2_TENSORS.setdefault(x.device, torch.tensor(POW2_TABLE, dtype=torch.float64, device=x.device))
    return (p * table[k.long() + POW2_OFFSET]).to(torch.float32)


class KLEstimator:
    """Per-token KL(policy || reference) estimates from log-probabilities (Schulman's k1/k2/k3)."""

    def __init__(self, kind: str = "k1", apply_clamp: bool = True):
        if kind not in KL_ESTIMATORS:
            raise ValueError(f"actor.kl_estimator: got {kind!r}, expected one of {list(KL_ESTIMATORS)}")
        self.kind = kind
        self.apply_clamp = bool(apply_clamp)

    def __call__(self, logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
        """float32 estimate, clamped to [-10, 10] when apply_clamp (guards against outliers).

        With the clamp, k3's exp is `exp_reduced`'s (within one float32 step of
        torch.exp, the same bits as the fused CPU kernels); without it, torch.exp.
        """
        log_ratio = logp.float() - ref_logp.float()
        if self.kind == "k1":
            kl = log_ratio
        elif self.kind == "k2":
            kl = log_ratio**2 / 2.0
        else:
            neg = -log_ratio
            if self.apply_clamp:
                # Bounding the log-ratio first leaves every clamped result unchanged (k3 is past the
                # clamp there already) and keeps exp(inf) - inf = NaN out of extreme finite inputs.
                neg.clamp_(min=-K3_RATIO_BOUND, max=K3_RATIO_BOUND)
                kl = _exp_bounded(neg) - 1 - neg
            else:
                kl = neg.exp() - 1 - neg
        if self.apply_clamp:
            kl.clamp_(min=-10, max=10)  # kl is always a fresh tensor here
        return kl

    def __repr__(self) -> str:
        return f"KLEstimator(kind={self.kind!r}, apply_clamp={self.apply_clamp})"
