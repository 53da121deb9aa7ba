"""The diagnostics' metric names and the keys they are logged under, in one place.

The trainer's rows, `areal-adv diagnose`'s table, summary and plot, and the engines'
metrics all read the names from here, so a metric added or reordered here is added or
reordered everywhere. Torch-free: the `areal-adv diagnose` command imports it before it
parses its arguments.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["GRADIENT_METRICS", "METRICS", "SEQUENCE_METRICS", "diagnostic_rows", "metric_key"]

#: Every metric, in the order it is logged and shown, and whether it needs the policy's gradients (so the weights
#: that sampled the batch: a checkpoint, offline); the others come from the batch and its advantages alone.
_NEEDS_GRADIENTS = {
    "zero_adv_frac": False,
    "noise_proxy": False,
    "grad_snr": True,
    "cos_to_active": True,
    "length_corr": False,
    "reward_rank_corr": False,
}
METRICS = tuple(_NEEDS_GRADIENTS)
#: The metrics from per-fold gradients of the PPO surrogate (`gradient_probe`), in order.
GRADIENT_METRICS = tuple(name for name, grads in _NEEDS_GRADIENTS.items() if grads)
#: The metrics of the advantages alone (`diagnostic_metrics.sequence_metrics`), in order.
SEQUENCE_METRICS = tuple(name for name, grads in _NEEDS_GRADIENTS.items() if not grads)


def metric_key(estimator: str, metric: str) -> str:
    """The key a metric of an estimator is logged under: `diagnostics/<estimator>/<metric>`."""
    return f"diagnostics/{estimator}/{metric}"


def diagnostic_rows(measured: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """{estimator: {metric: value}} as the metrics row's `diagnostics/<estimator>/<metric>` keys."""
    return {metric_key(name, metric): value for name, row in measured.items() for metric, value in row.items()}
