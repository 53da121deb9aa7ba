"""Combine the run's own advantages with the shadows', then measure them all: the one step every caller takes.

The trainer (each due step), `areal-adv diagnose` (each saved step) and the engines (each
advantage call) differ only in what they hand in: the run's own pipeline output, the batch
fields computed for the shadows, the behaviour policy's Σπ² if known, and a gradient probe
where weights are at hand. `measure_estimators` puts the run's output under `active`
beside each shadow's on the same batch and measures every one the same way
(`measure_batch`), so a number means the same wherever it is logged.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from areal_adv.api.train_args import ACTIVE_ESTIMATOR
from areal_adv.trainer.diagnostics.diagnostic_metrics import cosine, sequence_metrics
from areal_adv.trainer.diagnostics.gradient_probe import FoldMoments, GradientProbe
from areal_adv.trainer.diagnostics.metric_names import METRICS
from areal_adv.trainer.diagnostics.shadow_estimators import Shadow, shadow_advantages
from areal_adv.trainer.lm.logprobs import aligned_from_rollout
from areal_adv.utils.batch_meta import TrajBatchMeta

__all__ = ["measure_batch", "measure_estimators", "scalar_rewards"]


def scalar_rewards(batch: Mapping[str, Any], meta: TrajBatchMeta | None) -> torch.Tensor:
    """[B] float64: each row's reward (several components: their weighted sum, `meta.reward_weights` or ones)."""
    rewards = batch["rewards"].to(torch.float64)
    if rewards.dim() == 1:
        return rewards
    weights = meta.reward_weights if meta is not None and meta.reward_weights is not None else None
    w = torch.tensor(weights, dtype=torch.float64) if weights else torch.ones(rewards.shape[-1], dtype=torch.float64)
    return rewards @ w.to(rewards.device)


def _aligned(x: torch.Tensor) -> torch.Tensor:
    """A per-token field stored at its token (rollout layout) in the pipeline's next-token layout."""
    return torch.nn.functional.pad(x[:, 1:], (0, 1))


def measure_batch(
    outputs: Mapping[str, Mapping[str, Any]],
    batch: Mapping[str, Any],
    meta: TrajBatchMeta,
    *,
    sum_pi_squared: torch.Tensor | None,
    gradients: Mapping[str, FoldMoments] | None = None,
) -> dict[str, dict[str, float]]:
    """{estimator: {metric: value}} for the pipeline outputs of one batch (`outputs[ACTIVE_ESTIMATOR]`: the run's).

    Token metrics count the batch's response tokens (the rollout's loss mask,
    aligned). `gradients` ({estimator: its fold gradients' moments}) adds `grad_snr`
    and `cos_to_active` (the cosine of the estimator's mean fold gradient with
    the active one's).
    """
    mask = aligned_from_rollout(batch["loss_mask"]).float()
    rewards = scalar_rewards(batch, meta)
    logprobs = _aligned(batch["logprobs"])
    spp = None if sum_pi_squared is None else _aligned(sum_pi_squared)
    out: dict[str, dict[str, float]] = {}
    active = None if gradients is None else gradients.get(ACTIVE_ESTIMATOR)
    active_mean = None if active is None else active.mean()
    for name, data in outputs.items():
        row = sequence_metrics(
            data["advantages"],
            mask,
            rewards,
            meta.traj_group_sizes,
            logprobs=logprobs if spp is not None else None,
            sum_pi_squared=spp,
        )
        if gradients is not None and name in gradients:
            row["grad_snr"] = gradients[name].snr()
            if active_mean is not None:
                row["cos_to_active"] = cosine(gradients[name].mean(), active_mean)
        out[name] = {metric: row[metric] for metric in METRICS if metric in row}
    return out


def measure_estimators(
    active: Mapping[str, Any],
    shadows: Sequence[Shadow],
    batch: Mapping[str, Any],
    meta: TrajBatchMeta,
    *,
    computed: Mapping[str, torch.Tensor],
    sum_pi_squared: torch.Tensor | None,
    shaping: Any = None,
    on_error: Callable[[Shadow, Exception], None] | None = None,
    probe: GradientProbe | None = None,
) -> dict[str, dict[str, float]]:
    """{estimator: {metric: value}}: `active` (the run's own pipeline output on `batch`) and every built shadow's.

    The shadows compute their advantages on `batch` plus the `computed` fields they read
    (`shadow_advantages`; `on_error` as there); `probe` adds the gradient metrics, and
    `sum_pi_squared` (the behaviour policy's, in the rollout layout) the noise proxy.
    """
    outputs = {
        ACTIVE_ESTIMATOR: active,
        **shadow_advantages(shadows, batch, meta, computed, shaping=shaping, on_error=on_error),
    }
    gradients = None if probe is None else probe(outputs, meta.traj_group_sizes)
    return measure_batch(outputs, batch, meta, sum_pi_squared=sum_pi_squared, gradients=gradients)
