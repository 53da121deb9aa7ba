"""Config loading (YAML + dotted overrides) and the config dataclasses' public path.

The actor dataclasses live in `areal.api.actor_args`, the experiment sections in
`areal.api.train_args`; both are re-exported here, the import path of the spec
and of AReaL. The modules form a chain without cycles:
`config_checks` <- `actor_args` <- `task_specs` / `train_args` <- `cli_args`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from areal.api.actor_args import (
    GVPO_PARAMS,
    STAGE_NAMES,
    AdvantageConfig,
    NormConfig,
    PPOActorConfig,
    StageSpec,
)
from areal.api.config_checks import ConfigError
from areal.api.train_args import ExperimentConfig

__all__ = [
    "GVPO_PARAMS", "STAGE_NAMES", "AdvantageConfig", "ConfigError", "ExperimentConfig", "NormConfig",
    "PPOActorConfig", "StageSpec", "actor_config_from_dict", "config_to_dict", "config_to_yaml", "load_config",
]

# ---------------------------------------------------------------------------
# Loading: YAML files + dotted overrides, OmegaConf structured configs
# ---------------------------------------------------------------------------


def load_config(
    source: str | os.PathLike | Mapping[str, Any] | None = None,
    overrides: Sequence[str] = (),
    *,
    schema: type | None = None,
) -> Any:
    """Load an experiment config from a YAML file or mapping plus dotted overrides.

    `overrides` look like `actor.advantage.estimator.implementation=turn_gae`, as on
    AReaL's command line. User code is never imported here; every value is checked
    against the typed schema and the dataclass validators, and errors name the key.
    """
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    if schema is None:
        schema = ExperimentConfig
    try:
        base = OmegaConf.structured(schema)
        layers = [base]
        if source is not None:
            if isinstance(source, Mapping):
                layers.append(OmegaConf.create(dict(source)))
            else:
                path = os.fspath(source)
                if not os.path.isfile(path):
                    raise ConfigError(f"config file {path!r} does not exist")
                layers.append(OmegaConf.load(path))
        overrides = list(overrides)
        for item in overrides:
            if "=" not in item or not item.split("=", 1)[0].strip():
                raise ConfigError(f"override {item!r}: expected KEY=VALUE, e.g. actor.kl_ctl=0.05")
        if overrides:
            layers.append(OmegaConf.from_dotlist(overrides))
        merged = OmegaConf.merge(*layers)
        return OmegaConf.to_object(merged)
    except OmegaConfBaseException as exc:
        key = getattr(exc, "full_key", None)
        detail = str(exc).splitlines()[0]
        raise ConfigError(f"{key or 'config'}: {detail}") from None


def config_to_dict(config: Any) -> dict[str, Any]:
    """A plain, JSON-serialisable dict of a config (what is shipped to workers)."""
    from omegaconf import OmegaConf

    return OmegaConf.to_container(OmegaConf.structured(config), resolve=True)


def config_to_yaml(config: Any) -> str:
    from omegaconf import OmegaConf

    return OmegaConf.to_yaml(OmegaConf.structured(config))


def actor_config_from_dict(data: Mapping[str, Any]) -> PPOActorConfig:
    """Rebuild a validated `PPOActorConfig` from its serialised form (e.g. on a worker)."""
    return load_config(data, schema=PPOActorConfig)
