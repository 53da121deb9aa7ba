"""The `areal` estimator of verl's advantage-estimator registry.

verl's `compute_advantage` calls a registered estimator with
`token_level_rewards`, `response_mask`, `config` (the `algorithm` section), the
`uid` index and, for ReMax, `reward_baselines` — no critic values, no log-probs.
The pipeline config is named in that `algorithm` section:

    algorithm.adv_estimator=areal
    +algorithm.areal_config=/path/to/pipeline.yaml        # or env AREAL_VERL_CONFIG
    +algorithm.areal_overrides='[actor.kl_ctl=0.0]'       # optional dotted overrides

A config that needs what the registry call does not pass (a critic, a KL reward)
is refused with a pointer to `areal_adv.integrations.verl.compute_advantage`.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import torch

from areal_adv.api.cli_args import ConfigError
from areal_adv.integrations.config import PipelineSpec, pipeline_actor
from areal_adv.integrations.response_layout import ResponseBatch, response_advantages
from areal_adv.integrations.verl.layout import from_registry_call
from areal_adv.trainer.ppo.actor import PPOActor
from areal_adv.trainer.ppo.checks.aux_fields import SUM_PI_SQUARED, declared_fields

__all__ = [
    "ESTIMATOR_NAME",
    "CONFIG_KEY",
    "OVERRIDES_KEY",
    "ENV_CONFIG",
    "areal_advantage",
    "resolve_pipeline",
    "register",
]

ESTIMATOR_NAME = "areal"
CONFIG_KEY = "areal_config"
OVERRIDES_KEY = "areal_overrides"
ENV_CONFIG = "AREAL_VERL_CONFIG"
WRAPPER_HINT = (
    "use areal_adv.integrations.verl.compute_advantage (a drop-in for verl.trainer.ppo.ray_trainer.compute_advantage "
    "that reads the whole DataProto; areal_adv.integrations.verl.patch_compute_advantage() installs it)"
)
logger = logging.getLogger("areal_adv.integrations.verl")
_warned: set[tuple[str, str]] = set()


def _config_get(config: Any, key: str) -> Any:
    """`key` of verl's algorithm config (DictConfig, AlgoConfig dataclass or dict), or None."""
    if config is None:
        return None
    getter = getattr(config, "get", None)
    if callable(getter):
        try:
            return getter(key, None)
        except Exception:  # a struct DictConfig without the key, a dataclass without the field
            return None
    return getattr(config, key, None)


def resolve_pipeline(
    config: Any, areal_config: Any = None, areal_overrides: Any = None
) -> tuple[PipelineSpec, PPOActor]:
    """The pipeline named by an explicit argument, `algorithm.areal_config` or `$AREAL_VERL_CONFIG`."""
    source, where = areal_config, "areal_config"
    if source is None:
        source, where = _config_get(config, CONFIG_KEY), f"algorithm.{CONFIG_KEY}"
    if source is None and os.environ.get(ENV_CONFIG):
        source, where = os.environ[ENV_CONFIG], ENV_CONFIG
    if source is None:
        raise ConfigError(
            f"algorithm.adv_estimator={ESTIMATOR_NAME}: no pipeline config; name a YAML with an 'actor:' section "
            f"(e.g. preset:grpo) as +algorithm.{CONFIG_KEY}=/path/to/pipeline.yaml on verl's command "
            f"line, or in the environment variable {ENV_CONFIG}"
        )
    overrides = areal_overrides if areal_overrides is not None else _config_get(config, OVERRIDES_KEY)
    spec, actor = pipeline_actor(source, overrides, where=where)
    _warn_ignored_verl_fields(config, spec)
    return spec, actor


def _warn_ignored_verl_fields(config: Any, spec: PipelineSpec) -> None:
    """verl's gamma/lam are not read (the pipeline's discount and lambda are); say so once."""
    for verl_key, ours, value in (
        ("gamma", "actor.discount", spec.actor.discount),
        ("lam", "actor.gae_lambda", spec.actor.gae_lambda),
    ):
        theirs = _config_get(config, verl_key)
        if isinstance(theirs, (int, float)) and not isinstance(value, str) and float(theirs) != float(value):
            if (spec.source, verl_key) not in _warned:
                _warned.add((spec.source, verl_key))
                logger.warning(
                    "algorithm.%s=%s is not used by the areal estimator; %s=%s from %s applies",
                    verl_key,
                    theirs,
                    ours,
                    value,
                    spec.source,
                )


def check_registry_config(spec: PipelineSpec, actor: PPOActor | None = None) -> None:
    """Refuse configs that need inputs verl's registry call does not pass."""
    stages = () if actor is None else (actor.resolved.outcome, actor.resolved.estimator, actor.resolved.process)
    if any(SUM_PI_SQUARED in declared_fields(s.fn) for s in stages if s is not None):
        raise ConfigError(
            f"{spec.source}: the configured estimator reads old_log_probs and sum_pi_squared (set "
            "actor_rollout_ref.actor.calculate_sum_pi_squared=True in verl), which verl's estimator registry call "
            f"does not pass; {WRAPPER_HINT}"
        )
    if spec.critic_enabled:
        raise ConfigError(
            f"{spec.source}: critic.enabled is true, but verl's estimator registry call passes no critic values; "
            f"for critic GAE {WRAPPER_HINT} and set critic.enable=True in verl"
        )
    estimator = spec.actor.advantage.estimator
    if (
        estimator is not None
        and estimator.implementation == "combine"
        and any(isinstance(t, dict) and "term" in t for t in (estimator.kwargs.get("terms") or ()))
    ):
        raise ConfigError(
            f"{spec.source}: the combine estimator's distillation term needs old_log_probs and the teacher's "
            f"log-probs, which verl's estimator registry call does not pass; {WRAPPER_HINT}"
        )
    if spec.actor.kl_ctl != 0:
        raise ConfigError(
            f"{spec.source}: actor.kl_ctl={spec.actor.kl_ctl} needs old_log_probs and ref_log_prob, which verl's "
            f"estimator registry call does not pass; set +algorithm.{OVERRIDES_KEY}='[actor.kl_ctl=0.0]' or "
            f"{WRAPPER_HINT}"
        )


def areal_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    config: Any = None,
    index: Any = None,
    reward_baselines: torch.Tensor | None = None,
    **_ignored: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(advantages, returns) [B, R] from the configured pipeline, for verl's registry."""
    spec, actor = resolve_pipeline(config)
    check_registry_config(spec, actor)
    if spec.diagnostics.estimators and (spec.source, "diagnostics") not in _warned:
        _warned.add((spec.source, "diagnostics"))
        logger.warning(
            "diagnostics.estimators of %s: the registry call has no metrics to return them in; %s",
            spec.source,
            WRAPPER_HINT,
        )
    response: ResponseBatch = from_registry_call(token_level_rewards, response_mask, index, reward_baselines)
    with torch.no_grad():
        return response_advantages(actor, response)


def register() -> None:
    """Put `areal_advantage` in verl's registry under `areal` (idempotent)."""
    from verl.trainer.ppo import core_algos

    if core_algos.ADV_ESTIMATOR_REGISTRY.get(ESTIMATOR_NAME) is not areal_advantage:
        core_algos.ADV_ESTIMATOR_REGISTRY.pop(ESTIMATOR_NAME, None)  # a reloaded copy of this module
        core_algos.register_adv_est(ESTIMATOR_NAME)(areal_advantage)
