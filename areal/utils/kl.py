"""Per-token KL estimators between the policy and the reference policy (Schulman's k1/k2/k3)."""

from __future__ import annotations

import torch

__all__ = ["KLEstimator", "KL_ESTIMATORS"]

KL_ESTIMATORS: tuple[str, ...] = ("k1", "k2", "k3")
#: k3 = exp(-r) - 1 + r exceeds the clamp (10) for |r| >= 11 and grows monotonically beyond it.
_K3_RATIO_BOUND = 20.0


class KLEstimator:
    """Per-token KL(policy || reference) estimates from log-probabilities (Schulman's k1/k2/k3)."""

    def __init__(self, kind: str = "k1", apply_clamp: bool = True):
        if kind not in KL_ESTIMATORS:
            raise ValueError(f"actor.kl_estimator: got {kind!r}, expected one of {list(KL_ESTIMATORS)}")
        self.kind = kind
        self.apply_clamp = bool(apply_clamp)

    def __call__(self, logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
        """float32 estimate, clamped to [-10, 10] when apply_clamp (guards against outliers)."""
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
                neg.clamp_(min=-_K3_RATIO_BOUND, max=_K3_RATIO_BOUND)
            kl = neg.exp() - 1 - neg
        if self.apply_clamp:
            kl.clamp_(min=-10, max=10)  # kl is always a fresh tensor here
        return kl

    def __repr__(self) -> str:
        return f"KLEstimator(kind={self.kind!r}, apply_clamp={self.apply_clamp})"
