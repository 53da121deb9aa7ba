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

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch

from areal_adv.api.train_args import ACTIVE_ESTIMATOR, DiagnosticsConfig, ExperimentConfig
from areal_adv.trainer.diagnostics.batch_offer import run_offer
from areal_adv.trainer.diagnostics.gradient_probe import GradientProbe, probe_parameters
from areal_adv.trainer.diagnostics.measure import measure_estimators
from areal_adv.trainer.diagnostics.metric_names import GRADIENT_METRICS, diagnostic_rows
from areal_adv.trainer.diagnostics.shadow_estimators import Shadow, build_shadows, drop_on_error
from areal_adv.trainer.rollout.stage_fields import sampled_token_stats
from areal_adv.utils.batch_meta import TrajBatchMeta
from areal_adv.utils.random_states import preserved_random_states

if TYPE_CHECKING:
    from areal_adv.trainer.parallel.engine import PolicyEngine
    from areal_adv.trainer.ppo.actor import PPOActor

__all__ = ["StepDiagnostics", "gradient_skip_reason"]

logger = logging.getLogger("areal_adv.trainer")


def gradient_skip_reason(world_size: int) -> str | None:
    """Why `grad_snr` / `cos_to_active` are not measured in this run, or None."""
    if world_size > 1:
        return "a data-parallel run measures no gradients here (single process only)"
    return None


class StepDiagnostics:
    """The diagnostics of a trainer: its shadows, the probed parameters and the per-step measurement."""

    def __init__(
        self, cfg: ExperimentConfig, actor: PPOActor, engine: PolicyEngine, *, world_size: int, device: torch.device
    ) -> None:
        self.config: DiagnosticsConfig = cfg.diagnostics
        self.cfg, self.actor, self.engine, self.device = cfg, actor, engine, device
        offer = run_offer(cfg, actor.resolved)
        self.shadows: list[Shadow] = build_shadows(self.config.estimators, actor.config, offer)
        self.gradients_skipped = gradient_skip_reason(world_size)
        self.params = [] if self.gradients_skipped else probe_parameters(engine.model, self.config.params)
        chosen = [p for _, p in self.params]
        self.probe = (  # the trained module at the weights that sampled the step, under the engine's autocast
            None
            if self.gradients_skipped
            else GradientProbe(engine.model, actor.config, self.config.folds, chosen, engine.autocast)
        )
        self._drop = drop_on_error(logger)

    def opening_lines(self) -> str:
        """What is measured, on which parameters, and what is skipped and why (the run's opening lines)."""
        built = [s.name for s in self.shadows if s.actor is not None]
        every = "every step" if self.config.every == 1 else f"every {self.config.every} steps"
        if self.config.first_steps is not None:
            every += f" below step {self.config.first_steps}"
        lines = [f"diagnostics: {', '.join([*built, ACTIVE_ESTIMATOR])} ({every}; cost: time/diagnostics)"]
        if self.gradients_skipped:
            lines.append(f"diagnostics: {' and '.join(GRADIENT_METRICS)} skipped: {self.gradients_skipped}")
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
        size = self.cfg.actor.ppo_micro_batch_size or 16  # as the trainer's own pass
        made = sampled_token_stats(self.engine, batch, self.cfg.sampling_temperature, wanted, rows_per_chunk=size)
        return {**have, **made}

    def measure(self, batch: Mapping[str, Any], meta: TrajBatchMeta, data: Mapping[str, Any]) -> dict[str, float]:
        """The step's `diagnostics/*` keys (`data`: the run's pipeline output on `batch`)."""
        with preserved_random_states(self.device):
            computed = self.computed_fields(batch)
            measured = measure_estimators(
                data,
                self.shadows,
                batch,
                meta,
                computed=computed,
                sum_pi_squared=computed.get("sum_pi_squared"),
                shaping=self.cfg.rollout.prm.advantage_shaping,
                on_error=self._drop,
                probe=self.probe,
            )
        return diagnostic_rows(measured)
