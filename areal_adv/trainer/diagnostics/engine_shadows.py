"""Shadow estimators inside other engines: the gradient-free diagnostics, for AReaL, verl and TRL.

The engines compute advantages through our pipeline (the AReaL hook, verl's
`compute_advantage` wrapper, `AReaLGRPOTrainer`, in `areal_adv.integrations`); with
`diagnostics.estimators` in the pipeline config each listed estimator also computes its
advantages on the same batch and `diagnostics/<name>/<metric>` (and `diagnostics/active/*`,
the engine's own advantages) goes to the engine's metrics: `zero_adv_frac`,
`length_corr`, `reward_rank_corr`, and `noise_proxy` where the batch carries
the behaviour log-probs and Σπ² (`sum_pi_squared`). No extra forward or
backward pass runs: `grad_snr` and `cos_to_active` are the trainer's only.

Shadows are built once per engine actor and list of names (their plugins are
resolved then); one that needs a field the engine's batch lacks (a critic's
values, greedy baselines, ...) is left out, logged once with the reason, as is
one whose computation fails on a batch.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch

from areal_adv.trainer.diagnostics.batch_offer import BatchOffer
from areal_adv.trainer.diagnostics.measure import measure_estimators
from areal_adv.trainer.diagnostics.metric_names import diagnostic_rows
from areal_adv.trainer.diagnostics.shadow_estimators import Shadow, build_shadows, drop_on_error
from areal_adv.utils.batch_meta import TrajBatchMeta

if TYPE_CHECKING:
    from areal_adv.trainer.ppo.actor import PPOActor

__all__ = ["pipeline_diagnostics", "shadows_for"]

logger = logging.getLogger("areal_adv.integrations.diagnostics")
_drop = drop_on_error(logger)
_SHADOWS: weakref.WeakKeyDictionary[PPOActor, dict[tuple[tuple[str, ...], BatchOffer], list[Shadow]]] = (
    weakref.WeakKeyDictionary()
)


def shadows_for(actor: PPOActor, names: Sequence[str], offer: BatchOffer) -> list[Shadow]:
    """The shadows of `names` beside the engine's `actor` (built on first use; skipped ones logged once)."""
    per_actor = _SHADOWS.setdefault(actor, {})
    key = (tuple(names), offer)
    if key not in per_actor:
        per_actor[key] = build_shadows(list(names), actor.config, offer)
        for shadow in per_actor[key]:
            if shadow.skipped:
                logger.warning("diagnostics: %s skipped: %s", shadow.name, shadow.skipped)
    return per_actor[key]


def pipeline_diagnostics(
    actor: PPOActor,
    names: Sequence[str],
    batch: Mapping[str, Any],
    meta: TrajBatchMeta,
    output: Mapping[str, Any],
    *,
    with_logprobs: bool = True,
) -> dict[str, float]:
    """`diagnostics/<name>/<metric>` of the shadows and of `output` (the engine's own pipeline output on `batch`).

    `batch` is in the pipeline's rollout layout, and its fields are what the shadows may
    rely on (`BatchOffer.of_fields`); `with_logprobs` says whether its
    `logprobs` are the behaviour policy's (not placeholders), which the noise
    proxy needs together with `sum_pi_squared`.
    """
    if not names:
        return {}
    with torch.no_grad():
        shadows = shadows_for(actor, names, BatchOffer.of_fields(batch))
        spp = batch.get("sum_pi_squared") if with_logprobs else None
        measured = measure_estimators(output, shadows, batch, meta, computed={}, sum_pi_squared=spp, on_error=_drop)
        return diagnostic_rows(measured)
