"""AReaL's experiment configs with `actor.advantage`, and our `PPOActorConfig` built from AReaL's.

AReaL loads its YAML into structured dataclasses (`load_expr_config(argv, GRPOConfig)`,
OmegaConf underneath), which reject unknown keys, so `actor.advantage` needs a config
class that declares it. `AdvPPOActorConfig` is AReaL's `PPOActorConfig` plus our
advantage fields; `AdvGRPOConfig` and `AdvPPOConfig` are AReaL's experiment configs
whose `actor` is that class. Pass them to AReaL's own loader.

The two actor configs share 21 fields with the same names and meanings
(`SHARED_FIELDS`); `areal_config_to_ours` copies them. `EXTRA_FIELDS` are ours alone
and travel on the subclass. AReaL's other actor fields (the loss: SAPO, M2PO,
rejection sampling, importance-sampling level, the proximal log-prob method; the
engine) are not read by the advantage computation; AReaL keeps using them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from areal.api import cli_args as areal_args

from areal_adv.api.cli_args import AdvantageConfig, NormConfig, PPOActorConfig
from areal_adv.api.train_args import DiagnosticsConfig

#: `PPOActorConfig` fields that AReaL 1.0.4 and we both have, with the same meaning: copied by name.
SHARED_FIELDS: tuple[str, ...] = tuple(
    """reward_bias reward_scaling reward_clip reward_norm overlong_reward_penalty overlong_tokens
    overlong_penalty_factor max_new_tokens mask_no_eos_with_zero kl_ctl kl_estimator discount gae_lambda
    adv_norm use_decoupled_loss recompute_logprob eps_clip eps_clip_higher c_clip ppo_n_minibatches
    temperature""".split()
)
#: Our advantage fields that AReaL lacks, declared on `AdvPPOActorConfig` (same defaults as ours).
EXTRA_FIELDS: tuple[str, ...] = ("advantage", "gae_timestep_unit", "token_rewards_as_adv")


def _our_default(name: str) -> Any:
    """The default of our `PPOActorConfig.<name>`, so the subclass cannot drift from it."""
    spec = PPOActorConfig.__dataclass_fields__[name]
    return spec.default_factory() if spec.default_factory is not dataclasses.MISSING else spec.default


def _help(name: str) -> dict[str, str]:
    return {"help": PPOActorConfig.__dataclass_fields__[name].metadata["help"]}


@dataclass
class AdvPPOActorConfig(areal_args.PPOActorConfig):
    """AReaL's actor config plus `advantage`, `gae_timestep_unit`, `token_rewards_as_adv` and `diagnostics` (ours)."""

    advantage: AdvantageConfig = field(default_factory=AdvantageConfig, metadata=_help("advantage"))
    gae_timestep_unit: str = field(default=_our_default("gae_timestep_unit"), metadata=_help("gae_timestep_unit"))
    token_rewards_as_adv: bool = field(
        default=_our_default("token_rewards_as_adv"), metadata=_help("token_rewards_as_adv")
    )
    diagnostics: DiagnosticsConfig = field(
        default_factory=DiagnosticsConfig,
        metadata={
            "help": "Shadow estimators whose gradient-free diagnostics go to AReaL's stats tracker as "
            "`diagnostics/<name>/<metric>` (areal_adv.integrations.shadow_diagnostics); `every`, `folds` and "
            "`params` are the trainer's only."
        },
    )


@dataclass
class AdvPPOConfig(areal_args.PPOConfig):
    """AReaL's `PPOConfig` whose `actor` section takes `advantage`."""

    actor: AdvPPOActorConfig = field(default_factory=AdvPPOActorConfig, metadata={"help": "The actor (AReaL's)."})


@dataclass
class AdvGRPOConfig(areal_args.GRPOConfig):
    """AReaL's `GRPOConfig` whose `actor` section takes `advantage`."""

    actor: AdvPPOActorConfig = field(default_factory=AdvPPOActorConfig, metadata={"help": "The actor (AReaL's)."})


def _norm(value: areal_args.NormConfig | None) -> NormConfig | None:
    """AReaL's `NormConfig` (same six fields) as ours; None stays None."""
    if value is None:
        return None
    return NormConfig(**{f.name: getattr(value, f.name) for f in dataclasses.fields(NormConfig)})


def areal_config_to_ours(config: areal_args.PPOActorConfig) -> PPOActorConfig:
    """Our `PPOActorConfig` from AReaL's actor config (or `AdvPPOActorConfig`): shared fields by name.

    A plain AReaL config gets our defaults for `EXTRA_FIELDS`, which reproduce AReaL's own
    computation. Errors name our field (`PPOActorConfig.<field>`), as for our own YAML.
    """
    values: dict[str, Any] = {name: getattr(config, name) for name in SHARED_FIELDS}
    values["reward_norm"] = _norm(values["reward_norm"])
    values["adv_norm"] = _norm(values["adv_norm"])
    values.update({name: getattr(config, name) for name in EXTRA_FIELDS if hasattr(config, name)})
    return PPOActorConfig(**values)
