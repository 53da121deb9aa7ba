"""The training–inference mismatch of a rollout sampled from another precision than the training weights.

With `rollout.weights_dtype` the tokens are sampled from a low-precision copy
of the policy (the behaviour policy, log-probs `behaviour`) and trained under
the policy in its own precision (`training`, recomputed before the update).
On the sampled tokens, with the behaviour importance weight
w_t = π_train(y_t) / π_behav(y_t) = exp(training_t − behaviour_t):

* `kl`: mean of log π_behav − log π_train = mean of −log w_t, the direct (k1)
  estimate of KL(π_behav ‖ π_train) from samples of π_behav;
* `k3_kl`: mean of w_t − log w_t − 1, the k3 estimate of the same KL
  (non-negative, lower variance when the policies are close);
* `imp_weight_max`: the largest w_t;
* `capped_frac`: the share of tokens with w_t above the cap
  (`actor.behav_imp_weight_cap`), the tokens AReaL's decoupled objective drops.

The KL estimators are verl's (`compute_offpolicy_metrics` in
verl/trainer/ppo/rollout_corr_helper.py, verl 0.9.1: `kl` and `k3_kl`). Sums,
not means, are kept so data-parallel ranks add them before dividing.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

#: The metric-name prefix of every key `mismatch_metrics` returns.
PREFIX = "rollout_mismatch/"


@dataclass(frozen=True)
class MismatchSums:
    """Token sums of one rank's batch: tokens, Σ −log w, Σ (w − log w − 1), tokens above the cap, max w."""

    tokens: float
    kl_sum: float
    k3_sum: float
    capped: float
    weight_max: float

    def as_tensor(self) -> torch.Tensor:
        return torch.tensor([self.tokens, self.kl_sum, self.k3_sum, self.capped, self.weight_max], dtype=torch.float64)

    def __add__(self, other: MismatchSums) -> MismatchSums:
        """The sums of two disjoint sets of tokens (micro-batches): sums added, the larger `weight_max`."""
        return MismatchSums(
            self.tokens + other.tokens,
            self.kl_sum + other.kl_sum,
            self.k3_sum + other.k3_sum,
            self.capped + other.capped,
            max(self.weight_max, other.weight_max),
        )

    @classmethod
    def from_tensor(cls, values: torch.Tensor) -> MismatchSums:
        tokens, kl_sum, k3_sum, capped, weight_max = (float(v) for v in values.tolist())
        return cls(tokens, kl_sum, k3_sum, capped, weight_max)


def mismatch_sums(
    behaviour: torch.Tensor, training: torch.Tensor, mask: torch.Tensor, cap: float | None
) -> MismatchSums:
    """The sums over `mask`'s tokens of [B, T] aligned log-probs `behaviour` (sampled) and `training`.

    Computed in float64 so the sums do not depend on the batch's order of
    addition more than float64 rounding. Tokens outside `mask` are never
    read (their log-probs may be anything, also non-finite). With no token,
    `weight_max` is 0.
    """
    keep = mask.bool()
    log_w = (training.double() - behaviour.double())[keep]
    weight = log_w.exp()
    capped = float((weight > cap).sum()) if cap is not None else 0.0
    return MismatchSums(
        tokens=float(keep.sum()),
        kl_sum=float((-log_w).sum()),
        k3_sum=float((weight - log_w - 1.0).sum()),
        capped=capped,
        weight_max=float(weight.max()) if weight.numel() else 0.0,
    )


def mismatch_metrics(sums: MismatchSums, cap: float | None) -> dict[str, float]:
    """`rollout_mismatch/*` metrics of (all ranks') sums; `capped_frac` only when a cap is set."""
    n = max(sums.tokens, 1.0)
    row = {
        PREFIX + "kl": sums.kl_sum / n,
        PREFIX + "k3_kl": sums.k3_sum / n,
        PREFIX + "imp_weight_max": sums.weight_max,
    }
    if cap is not None:
        row[PREFIX + "capped_frac"] = sums.capped / n
    return row
