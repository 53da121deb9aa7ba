"""Config loading (YAML + dotted overrides) and the config dataclasses' public path.

The actor dataclasses live in `areal_adv.api.actor_args`, the experiment sections in
`areal_adv.api.train_args`; both are re-exported here, the import path of the docs
and of AReaL. The modules form a chain without cycles:
`config_checks` <- `actor_args` <- `task_specs` / `train_args` <- `cli_args`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any, cast

from areal_adv.api.actor_args import (
    GVPO_PARAMS,
    PRM_MODES,
    STAGE_NAMES,
    AdvantageConfig,
    AdvantageShaping,
    NormConfig,
    PPOActorConfig,
    StageSpec,
    check_gvpo_values,
)
from areal_adv.api.config_checks import ConfigError
from areal_adv.api.train_args import ExperimentConfig

__all__ = [
    "PRM_MODES",
    "AdvantageShaping",
    "check_gvpo_values",
    "GVPO_PARAMS",
    "STAGE_NAMES",
    "AdvantageConfig",
    "ConfigError",
    "ExperimentConfig",
    "NormConfig",
    "PPOActorConfig",
    "StageSpec",
    "actor_config_from_dict",
    "config_to_dict",
    "config_to_yaml",
    "load_config",
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

    Layers, in merge order: the files of a `defaults:` list (paths relative to
    the including file, recursively), the file itself, then `overrides` such as
    `actor.advantage.estimator.implementation=turn_gae` (AReaL's command line).
    A stage given as a bare string means `{implementation: NAME, kwargs: {}}`
    (see `areal_adv.api.compose`). A config file that names no `experiment_name`
    itself (a preset it builds on does not count) is named after the file:
    `my_exp.yaml` runs in `runs/my_exp/`. User code is never imported here; every value is
    checked against the typed schema and the dataclass validators, and errors
    name the key (and the file it came from).
    """
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from areal_adv.api.compose import (
        CompositionError,
        file_layers,
        mapping_layers,
        merge_layers,
        override_layer,
        run_name_layer,
    )

    if schema is None:
        schema = ExperimentConfig
    try:
        layers = (
            mapping_layers(source) if isinstance(source, Mapping) else [] if source is None else file_layers(source)
        )
        extra = override_layer(overrides)
        later = [extra] if extra else []
        if source is not None and not isinstance(source, Mapping) and _has_field(schema, RUN_NAME_KEY):
            named = run_name_layer(source, [*layers, *later], RUN_NAME_KEY)
            layers = [*layers, named] if named else layers
        merged = merge_layers(schema, [*layers, *later], _named_nodes(schema))
    except CompositionError as exc:
        raise ConfigError(str(exc)) from None
    try:
        return OmegaConf.to_object(merged)
    except OmegaConfBaseException as exc:
        key = getattr(exc, "full_key", None)
        detail = str(exc).splitlines()[0]
        raise ConfigError(f"{key or 'config'}: {detail}") from None


#: The run's name (the middle level of its directory): a user's config file that sets none is named after itself.
RUN_NAME_KEY = "experiment_name"


def _has_field(schema: type, name: str) -> bool:
    import dataclasses

    return dataclasses.is_dataclass(schema) and name in {f.name for f in dataclasses.fields(schema)}


def _named_nodes(schema: type) -> list[Any]:
    """The nodes whose kwargs belong to a name: every advantage stage, and the task (see areal_adv.api.compose)."""
    import dataclasses

    from areal_adv.api.compose import NamedNode

    names = {f.name for f in dataclasses.fields(schema)} if dataclasses.is_dataclass(schema) else set()
    prefix = (
        ()
        if schema is AdvantageConfig
        else ("advantage",)
        if "advantage" in names
        else ("actor", "advantage")
        if "actor" in names
        else None
    )
    nodes = (
        []
        if prefix is None
        else [
            NamedNode(
                (*prefix, stage), "implementation", fresh=lambda name: StageSpec(implementation=name), bare_string=True
            )
            for stage in ("compute", *STAGE_NAMES)
        ]
    )
    if "task" in names:
        nodes.append(NamedNode(("task",), "implementation", aliases=("name",)))
    return nodes


def config_to_dict(config: Any) -> dict[str, Any]:
    """A plain, JSON-serialisable dict of a config (what is shipped to workers)."""
    from omegaconf import OmegaConf

    return cast("dict[str, Any]", OmegaConf.to_container(OmegaConf.structured(config), resolve=True))


def config_to_yaml(config: Any) -> str:
    from omegaconf import OmegaConf

    return OmegaConf.to_yaml(OmegaConf.structured(config))


def actor_config_from_dict(data: Mapping[str, Any]) -> PPOActorConfig:
    """Rebuild a validated `PPOActorConfig` from its serialised form (e.g. on a worker)."""
    return load_config(data, schema=PPOActorConfig)
