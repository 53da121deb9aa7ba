"""The trainer's diagnostics: shadow estimators measured beside the run's own advantages on each step's batch.

With `diagnostics.estimators` set, every `diagnostics.every`-th step, after the
run's advantages and before its update, each shadow estimator
(`shadow_estimators`) computes its advantages on the step's batch, and
`diagnostics/<name>/<metric>` is logged for it and for `active` (the run's own
advantages): the gradient-free metrics of `diagnostic_metrics`, plus `grad_snr`
and `cos_to_active` from per-fold gradients (`gradient_probe`). The trainer runs
it through the `ShadowDiagnostics` step observer
(`areal_adv.trainer.run.diagnostics_observers`).

Training is unchanged, bit for bit: the run's batch, advantages and stage state
are not touched (shadows have their own actors and get new dicts), gradients
come from `torch.autograd.grad` (nothing is accumulated in `.grad`), every
forward here runs in eval mode (no dropout draws), and the torch and Python
random states are restored afterwards (nothing here draws; the restore
makes sure). The cost is the row's `time/diagnostics`.

In a data-parallel run each rank measures its own groups and the rows average
the ranks' values; the gradient metrics are single-process only there.
"""

from __future__ import annotations

import contextlib
import logging
import random
from collections.abc import Iterator, Mapping
from typing import Any

import torch

from areal_adv.api.train_args import ACTIVE_ESTIMATOR, DiagnosticsConfig, ExperimentConfig
from areal_adv.trainer.diagnostics.diagnostic_metrics import cosine, sequence_metrics
from areal_adv.trainer.diagnostics.gradient_probe import FoldMoments, fold_gradients, fold_rows, probe_parameters
from areal_adv.trainer.diagnostics.shadow_estimators import BatchOffer, Shadow, build_shadows, shadow_advantages
from areal_adv.trainer.lm.logprobs import aligned_from_rollout
from areal_adv.trainer.rollout.stage_fields import behaviour_token_stats, stage_batch_fields
from areal_adv.utils.batch_meta import TrajBatchMeta

__all__ = [
    "StepDiagnostics",
    "diagnostic_rows",
    "measure_batch",
    "preserved_rng",
    "scalar_rewards",
]

logger = logging.getLogger("areal_adv.trainer")

#: Every metric, in the order logged: the gradient-free ones, then the gradient ones.
METRICS = ("zero_adv_frac", "noise_proxy", "grad_snr", "cos_to_active", "length_corr", "reward_rank_corr")


@contextlib.contextmanager
def preserved_rng(device: torch.device) -> Iterator[None]:
    """Restore torch's (CPU and this CUDA device's) and Python's random states on exit."""
    state, py = torch.get_rng_state(), random.getstate()
    cuda = torch.cuda.get_rng_state(device) if device.type == "cuda" else None
    try:
        yield
    finally:
        torch.set_rng_state(state)
        random.setstate(py)
        if cuda is not None:
            torch.cuda.set_rng_state(cuda, device)


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


def diagnostic_rows(measured: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """The metrics row's `diagnostics/<estimator>/<metric>` keys."""
    return {f"diagnostics/{name}/{metric}": value for name, row in measured.items() for metric, value in row.items()}


def gradient_skip_reason(world_size: int) -> str | None:
    """Why `grad_snr` / `cos_to_active` are not measured in this run, or None."""
    if world_size > 1:
        return "a data-parallel run measures no gradients here (single process only)"
    return None


class StepDiagnostics:
    """The diagnostics of a trainer: its shadows, the probed parameters and the per-step measurement."""

    def __init__(self, cfg: ExperimentConfig, actor: Any, engine: Any, *, world_size: int, device: torch.device):
        self.config: DiagnosticsConfig = cfg.diagnostics
        self.cfg, self.actor, self.engine, self.device = cfg, actor, engine, device
        offer = BatchOffer(
            values=cfg.critic.enabled,
            greedy_baselines=cfg.rollout.greedy_baseline,
            process_rewards=cfg.rollout.prm.enabled,
            export=cfg.rollout.export,
            seats="role_ids" in stage_batch_fields(actor.resolved),
        )
        self.shadows: list[Shadow] = build_shadows(self.config.estimators, actor.config, offer)
        self.gradients_skipped = gradient_skip_reason(world_size)
        self.params = [] if self.gradients_skipped else probe_parameters(engine.model, self.config.params)

    def opening_lines(self) -> str:
        """What is measured, on which parameters, and what is skipped and why (the run's opening lines)."""
        built = [s.name for s in self.shadows if s.actor is not None]
        every = "every step" if self.config.every == 1 else f"every {self.config.every} steps"
        if self.config.first_steps is not None:
            every += f" below step {self.config.first_steps}"
        lines = [f"diagnostics: {', '.join([*built, ACTIVE_ESTIMATOR])} ({every}; cost: time/diagnostics)"]
        if self.gradients_skipped:
            lines.append(f"diagnostics: grad_snr and cos_to_active skipped: {self.gradients_skipped}")
        else:
            numbers = sum(p.numel() for _, p in self.params)
            lines.append(
                f"diagnostics: grad_snr over up to {self.config.folds} folds of the prompt groups, "
                f"params {self.config.params} ({len(self.params)} tensors, {numbers:,} numbers)"
            )
        lines += [f"diagnostics: {s.name} skipped: {s.skipped}" for s in self.shadows if s.skipped]
        return "\n".join(lines)

    def computed_fields(self, batch: Mapping[str, Any]) -> dict[str, torch.Tensor]:
        """Σπ² (for the noise proxy) and the fields the shadows read that the batch lacks, from one forward."""
        wanted = {"sum_pi_squared"}.union(*(s.fields for s in self.shadows)) - set(batch)
        have = {k: batch[k] for k in ("sum_pi_squared", "token_entropy") if k in batch}
        if not wanted:
            return have
        size = self.cfg.actor.ppo_micro_batch_size or 16
        # as the trainer's own pass: the distribution the log-probs were sampled from (the cast copy under
        # rollout.weights_dtype), in the rollout's autocast
        with self.engine.autocast():
            made = behaviour_token_stats(
                self.engine.sampled_by,
                batch["input_ids"],
                batch["attention_mask"],
                self.cfg.sampling_temperature,
                wanted,
                rows_per_chunk=size,
            )
        return {**have, **made}

    def _drop(self, shadow: Shadow, exc: Exception) -> None:
        """A shadow whose advantages failed on a batch: dropped from the run's diagnostics, with the cause."""
        shadow.actor, shadow.skipped = None, f"failed on a batch ({type(exc).__name__}: {exc})"
        logger.warning("diagnostics: %s dropped: %s", shadow.name, shadow.skipped)

    def measure(self, batch: Mapping[str, Any], meta: TrajBatchMeta, data: Mapping[str, Any]) -> dict[str, float]:
        """The step's `diagnostics/*` keys (`data`: the run's pipeline output on `batch`)."""
        with preserved_rng(self.device):
            computed = self.computed_fields(batch)
            outputs = {
                ACTIVE_ESTIMATOR: data,
                **shadow_advantages(
                    self.shadows,
                    batch,
                    meta,
                    computed,
                    shaping=self.cfg.rollout.prm.advantage_shaping,
                    on_error=self._drop,
                ),
            }
            gradients = None
            if not self.gradients_skipped:
                gradients = fold_gradients(
                    self.engine.model,
                    self.actor.config,
                    outputs,
                    fold_rows(meta.traj_group_sizes, self.config.folds),
                    [p for _, p in self.params],
                    autocast=self.engine.autocast,
                )
            measured = measure_batch(
                outputs, batch, meta, sum_pi_squared=computed.get("sum_pi_squared"), gradients=gradients
            )
        return diagnostic_rows(measured)
