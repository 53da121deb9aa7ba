"""A drop-in `compute_advantage` for verl that hands the pipeline the whole DataProto.

verl's registry call gives an estimator rewards, mask and uid only. Critic GAE
(`values`), the pipeline's KL reward (`old_log_probs`, `ref_log_prob`), explicit
turns (`turn_ids`), process rewards (`token_rewards`), truncation flags
(`is_truncated`) and the optimal token baseline's `sum_pi_squared` and
`rollout_is_weights` live in the DataProto, so this wrapper reads them there. It has
verl's signature and delegates every estimator other than `areal` to verl's own
function, so replacing verl's is safe:

    from areal_adv.integrations.verl import patch_compute_advantage
    patch_compute_advantage()   # in the process that runs verl's trainer (its Ray TaskRunner)

With `diagnostics.estimators` in the pipeline config, the shadow estimators'
gradient-free diagnostics (`areal_adv.trainer.diagnostics.engine_shadows`) ride on
`data.meta_info["areal_adv_diagnostics"]`, and the patched trainer's
`compute_data_metrics` adds them to verl's metrics dict of the step.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

import torch

from areal_adv.api.cli_args import ConfigError
from areal_adv.integrations.config import PipelineSpec
from areal_adv.integrations.response_layout import response_advantages, response_advantages_with_diagnostics
from areal_adv.integrations.verl.estimator import ESTIMATOR_NAME, resolve_pipeline
from areal_adv.integrations.verl.layout import from_data_proto
from areal_adv.trainer.ppo.actor import PPOActor
from areal_adv.trainer.ppo.checks.aux_fields import SUM_PI_SQUARED, declared_fields

__all__ = [
    "DIAGNOSTICS_KEY",
    "compute_advantage",
    "compute_data_metrics",
    "patch_compute_advantage",
    "verl_compute_advantage",
]

#: Where `compute_advantage` leaves the step's `diagnostics/*` metrics for `compute_data_metrics`.
DIAGNOSTICS_KEY = "areal_adv_diagnostics"
_original: dict[str, Any] = {}


def verl_compute_advantage() -> Any:
    """verl's own `compute_advantage` (the one in place before any patch)."""
    if "fn" not in _original:
        from verl.trainer.ppo import ray_trainer

        if ray_trainer.compute_advantage is compute_advantage:
            raise RuntimeError(
                "verl.trainer.ppo.ray_trainer.compute_advantage was replaced by areal-adv's wrapper before verl's own "
                "was recorded, so other estimators could not be delegated; install it with patch_compute_advantage()"
            )
        _original["fn"] = ray_trainer.compute_advantage
    return _original["fn"]


def _name(adv_estimator: Any) -> str:
    return adv_estimator.value if isinstance(adv_estimator, Enum) else str(adv_estimator)


def _check_inputs(spec: PipelineSpec, keys: set[str]) -> None:
    if spec.critic_enabled and "values" not in keys:
        raise ConfigError(
            f"{spec.source}: critic.enabled is true, but the DataProto has no 'values'; enable verl's critic "
            "(critic.enable=True) so it computes them before the advantage step"
        )
    if spec.actor.kl_ctl != 0:
        missing = [k for k in ("old_log_probs", "ref_log_prob") if k not in keys]
        if missing:
            raise ConfigError(
                f"{spec.source}: actor.kl_ctl={spec.actor.kl_ctl} needs {missing} in the DataProto; verl computes "
                "ref_log_prob only with a reference policy: set actor_rollout_ref.actor.use_kl_loss=True (with "
                "actor_rollout_ref.actor.kl_loss_coef=0.0 only the areal KL reward remains), or set "
                "actor.kl_ctl=0.0"
            )


def _check_token_baseline_inputs(spec: PipelineSpec, actor: PPOActor, keys: set[str]) -> None:
    """A stage that reads Σπ² needs verl's `sum_pi_squared` and `old_log_probs` (π_t) in the DataProto."""
    stages = (actor.resolved.outcome, actor.resolved.estimator, actor.resolved.process)
    if not any(SUM_PI_SQUARED in declared_fields(s.fn) for s in stages if s is not None):
        return
    missing = [k for k in (SUM_PI_SQUARED, "old_log_probs") if k not in keys]
    if missing:
        raise ConfigError(
            f"{spec.source}: the configured estimator reads {missing} from the DataProto, which has none; verl's "
            "actor computes sum_pi_squared with actor_rollout_ref.actor.calculate_sum_pi_squared=True, in its "
            "old_log_probs pass"
        )


def compute_advantage(
    data: Any,
    adv_estimator: Any,
    gamma: float = 1.0,
    lam: float = 1.0,
    num_repeat: int = 1,
    norm_adv_by_std_in_grpo: bool = True,
    config: Any = None,
    *,
    areal_config: Any = None,
    areal_overrides: Any = None,
) -> Any:
    """verl's `compute_advantage`; with `adv_estimator='areal'` the pipeline computes advantages and returns.

    Like verl's, it writes `advantages` and `returns` [B, R] into `data.batch` and
    returns `data`; nothing is written unless the whole computation succeeded.
    `areal_config` / `areal_overrides` override `algorithm.areal_config` / `areal_overrides`.
    """
    if _name(adv_estimator) != ESTIMATOR_NAME:
        return verl_compute_advantage()(
            data,
            adv_estimator=adv_estimator,
            gamma=gamma,
            lam=lam,
            num_repeat=num_repeat,
            norm_adv_by_std_in_grpo=norm_adv_by_std_in_grpo,
            config=config,
        )
    spec, actor = resolve_pipeline(config, areal_config, areal_overrides)
    if "response_mask" not in data.batch.keys():
        from verl.trainer.ppo.ray_trainer import compute_response_mask

        data.batch["response_mask"] = compute_response_mask(data)
    _check_inputs(spec, set(data.batch.keys()))
    _check_token_baseline_inputs(spec, actor, set(data.batch.keys()))
    response = from_data_proto(data)
    names = spec.diagnostics.estimators
    with torch.no_grad():
        if names:
            advantages, returns, metrics = response_advantages_with_diagnostics(actor, response, names)
            data.meta_info[DIAGNOSTICS_KEY] = metrics
        else:
            advantages, returns = response_advantages(actor, response)
    data.batch["advantages"] = advantages
    data.batch["returns"] = returns
    return data


def verl_compute_data_metrics() -> Any:
    """verl's own `compute_data_metrics` (remembered before `patch_compute_advantage` replaces the trainer's)."""
    if "compute_data_metrics" not in _original:
        from verl.trainer.ppo.metric_utils import compute_data_metrics as verl_own

        _original["compute_data_metrics"] = verl_own
    return _original["compute_data_metrics"]


def compute_data_metrics(batch: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
    """verl's `compute_data_metrics`, plus the `diagnostics/*` metrics `compute_advantage` left on the batch."""
    metrics = verl_compute_data_metrics()(batch, *args, **kwargs)
    extra = getattr(batch, "meta_info", {}).get(DIAGNOSTICS_KEY)
    return {**metrics, **extra} if extra else metrics


def patch_compute_advantage() -> list[str]:
    """Make verl's trainers call `compute_advantage` above; returns the patched module names.

    verl's trainers look `compute_advantage` up as a module global at call time
    (`verl.trainer.ppo.ray_trainer`, and the V1 trainer's helper module, which
    imported it by name), so replacing those globals is enough. Idempotent.
    """
    import importlib

    verl_compute_advantage()  # remember verl's own before replacing it
    verl_compute_data_metrics()
    patched = []
    for name in ("verl.trainer.ppo.ray_trainer", "verl.trainer.ppo.v1.utils"):
        try:
            module = importlib.import_module(name)
        except ImportError:  # the V1 trainer's optional dependencies are missing
            continue
        if getattr(module, "compute_advantage", None) is not None:
            module.compute_advantage = compute_advantage
            if getattr(module, "compute_data_metrics", None) is not None:  # the diagnostics reach verl's metrics
                module.compute_data_metrics = compute_data_metrics
            patched.append(name)
    return patched
