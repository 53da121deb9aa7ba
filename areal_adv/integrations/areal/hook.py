"""AReaL's `PPOActor.compute_advantages`, computed by the areal-adv pipeline.

`install()` replaces the method on AReaL's class, in this process. The replacement
does what AReaL's does around the computation: `concat_batch` the per-trajectory
dicts, compute, `split_batch` back (`areal_adv.integrations.areal_bridge`). The
computation in between is ours, given the layout AReaL's `concat_batch` records: each
input dict's rows form a group, as in AReaL 2's own computation. (AReaL 1.0.4 cut the
batch into runs of the fixed `NormConfig.group_size`, which mixes prompts whenever
prompts have different numbers of samples; with equal groups of `group_size` rows both
agree.)

Our actor is built once per AReaL actor and config (it resolves and checks every
configured plugin then, so a bad plugin path fails at the first call, naming the
stage and the path).

With `actor.diagnostics.estimators` (`AdvPPOActorConfig`), the shadow estimators'
gradient-free diagnostics of each call go to AReaL's stats tracker
(`stats_tracker.scalar`) as `diagnostics/<name>/<metric>`
(`areal_adv.trainer.diagnostics.engine_shadows`); `noise_proxy` only when the batch
carries `sum_pi_squared`.
"""

from __future__ import annotations

import functools
import os
from typing import Any

from areal.trainer.ppo.actor import PPOActor as ArealPPOActor
from areal.utils import data as areal_data
from areal.utils.perf_tracer import trace_perf

from areal_adv.import_paths import HOOK_ENV
from areal_adv.integrations.areal_bridge import areal_config_to_ours, compute_in_areal_layout
from areal_adv.trainer.diagnostics.engine_shadows import pipeline_diagnostics
from areal_adv.trainer.ppo.actor import PPOActor
from areal_adv.utils.data import TrajBatchMeta

__all__ = ["compute_advantages", "install", "installed", "uninstall"]

_ORIGINAL = ArealPPOActor.compute_advantages
#: Where our actor is kept on AReaL's actor, with the config object it was built from.
_CACHE = "_areal_adv_actor"


def our_actor(areal_actor: ArealPPOActor) -> PPOActor:
    """The areal-adv actor for this AReaL actor, built on first use and again when its config object changes."""
    cached = getattr(areal_actor, _CACHE, None)
    if cached is None or cached[0] is not areal_actor.config:
        cached = (areal_actor.config, PPOActor(areal_config_to_ours(areal_actor.config)))
        setattr(areal_actor, _CACHE, cached)
    return cached[1]


@trace_perf("ppo_actor.compute_advantages", category="compute")  # AReaL's trace of its own method
def compute_advantages(self: ArealPPOActor, data: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """AReaL's `compute_advantages(data)`: one dict per trajectory group in, the same out, with advantages."""
    actor = our_actor(self)
    return compute_in_areal_layout(
        actor,
        data,
        concat_batch=areal_data.concat_batch,
        split_batch=areal_data.split_batch,
        observe=functools.partial(_track_diagnostics, self.config, actor),
    )


def _track_diagnostics(
    config: Any, actor: PPOActor, batched: dict[str, Any], meta: TrajBatchMeta, result: dict[str, Any]
) -> None:
    """The shadow estimators' `diagnostics/*` of this batch, into AReaL's stats tracker (none configured: nothing)."""
    section = getattr(config, "diagnostics", None)
    names = list(getattr(section, "estimators", None) or ())
    if not names:
        return
    from areal.utils import stats_tracker

    stats_tracker.scalar(**pipeline_diagnostics(actor, names, batched, meta, result))


def install() -> None:
    """Make every AReaL `PPOActor` of this process compute advantages with areal-adv (idempotent)."""
    ArealPPOActor.compute_advantages = compute_advantages


def uninstall() -> None:
    """Put AReaL's own method back."""
    ArealPPOActor.compute_advantages = _ORIGINAL


def installed() -> bool:
    return ArealPPOActor.compute_advantages is compute_advantages


if os.environ.get(HOOK_ENV) == "1":
    install()  # AREAL_ADV_HOOK_AREAL=1: every process that loads AReaL's actor (areal_adv.import_paths)
