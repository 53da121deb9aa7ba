"""AReaL's experiment configs with `actor.advantage`, and our `PPOActorConfig` built from AReaL's.

AReaL loads its YAML into structured dataclasses (`load_expr_config(argv, GRPOConfig)`,
OmegaConf underneath), which reject unknown keys, so `actor.advantage` needs a config
class that declares it. `AdvPPOActorConfig` is AReaL's `PPOActorConfig` plus our
advantage fields; `AdvGRPOConfig` and `AdvPPOConfig` are AReaL's experiment configs
whose `actor` is that class. Pass them to AReaL's own loader.

The two actor configs share the fields of `SHARED_FIELDS` (21 with AReaL 1.0.4, 23 with
AReaL 2); `areal_config_to_ours` copies them (`areal_adv.integrations.areal_bridge`).
`EXTRA_FIELDS` are ours alone and travel on the subclass. AReaL's other actor fields (the
loss: SAPO, CISPO, M2PO, rejection sampling, importance-sampling level, the proximal
log-prob method; the engine) are not read by the advantage computation; AReaL keeps using them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from areal.api import cli_args as areal_args

from areal_adv.api.cli_args import AdvantageConfig, PPOActorConfig
from areal_adv.api.train_args import DiagnosticsConfig
from areal_adv.integrations.areal_bridge import OURS_ONLY, areal_config_to_ours, shared_fields

__all__ = [
    "EXTRA_FIELDS",
    "SHARED_FIELDS",
    "AdvGRPOConfig",
    "AdvPPOActorConfig",
    "AdvPPOConfig",
    "areal_config_to_ours",
]

#: `PPOActorConfig` fields that the installed AReaL and we both have, with the same meaning: copied by name.
SHARED_FIELDS: tuple[str, ...] = shared_fields(areal_args.PPOActorConfig)
_AREAL_HAS_TURN_GAE = "gae_timestep_unit" in SHARED_FIELDS
#: Our advantage fields that the installed AReaL lacks, declared on `AdvPPOActorConfig` (same defaults as ours).
EXTRA_FIELDS: tuple[str, ...] = OURS_ONLY if _AREAL_HAS_TURN_GAE else (*OURS_ONLY, "gae_timestep_unit")


def _our_default(name: str) -> Any:
    """The default of our `PPOActorConfig.<name>`, so the subclass cannot drift from it."""
    spec = PPOActorConfig.__dataclass_fields__[name]
    return spec.default_factory() if spec.default_factory is not dataclasses.MISSING else spec.default


def _help(name: str) -> dict[str, str]:
    return {"help": PPOActorConfig.__dataclass_fields__[name].metadata["help"]}


@dataclass
class AdvPPOActorConfig(areal_args.PPOActorConfig):
    """AReaL's actor config plus `advantage`, `token_rewards_as_adv`, `diagnostics` and, before AReaL 2,
    `gae_timestep_unit` (ours)."""

    advantage: AdvantageConfig = field(default_factory=AdvantageConfig, metadata=_help("advantage"))
    if not _AREAL_HAS_TURN_GAE:  # AReaL 2 declares it, with the same default and meaning
        gae_timestep_unit: str = field(default=_our_default("gae_timestep_unit"), metadata=_help("gae_timestep_unit"))
    token_rewards_as_adv: bool = field(
        default=_our_default("token_rewards_as_adv"), metadata=_help("token_rewards_as_adv")
    )
    diagnostics: DiagnosticsConfig = field(
        default_factory=DiagnosticsConfig,
        metadata={
            "help": "Shadow estimators whose gradient-free diagnostics go to AReaL's stats tracker as "
            "`diagnostics/<name>/<metric>` (areal_adv.trainer.diagnostics.engine_shadows); `every`, `folds` and "
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
