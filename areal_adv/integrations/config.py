"""Loading the pipeline config an engine names, and the actor built from it.

An engine names a YAML (an experiment config with an `actor:` section, e.g. a
preset such as `preset:grpo`, areal_adv/presets/) or hands a `PPOActorConfig`; dotted overrides apply on
top. The actor is built once per process and config (verl calls its estimator every
step), and it resolves every configured plugin when built, so a bad plugin path
fails at the first call with the stage and path in the message.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from areal_adv.api.cli_args import ConfigError, PPOActorConfig, load_config
from areal_adv.api.presets import is_preset_ref
from areal_adv.api.train_args import DiagnosticsConfig
from areal_adv.trainer.ppo.actor import PPOActor

__all__ = ["PipelineSpec", "load_pipeline", "pipeline_actor"]


@dataclass(frozen=True)
class PipelineSpec:
    """The pipeline an engine runs: the actor config, whether the YAML enables a critic, its `diagnostics`."""

    actor: PPOActorConfig
    critic_enabled: bool
    source: str
    diagnostics: DiagnosticsConfig = field(default_factory=DiagnosticsConfig)


def _check_overrides(overrides: Any, where: str) -> tuple[str, ...]:
    if overrides is None:
        return ()
    if isinstance(overrides, str) or not isinstance(overrides, Sequence):
        # OmegaConf ListConfig is a Sequence; a bare string is almost always a forgotten list.
        raise ConfigError(
            f"{where}: got {overrides!r} ({type(overrides).__name__}), expected a list of dotted overrides "
            "such as ['actor.kl_ctl=0.0']"
        )
    items = tuple(str(item) for item in overrides)
    for item in items:
        if "=" not in item:
            raise ConfigError(f"{where}: override {item!r} is not KEY=VALUE (e.g. actor.kl_ctl=0.0)")
    return items


def _absolute(source: str | os.PathLike) -> str:
    """A YAML path made absolute (the engine may change folders later); `preset:NAME` stays as it is."""
    return source if is_preset_ref(source) else os.path.abspath(os.fspath(source))


def load_pipeline(source: Any, overrides: Any = (), *, where: str) -> PipelineSpec:
    """Load `source` (YAML path or `PPOActorConfig`) plus `overrides`; errors name `where`."""
    items = _check_overrides(overrides, f"{where} overrides")
    if isinstance(source, PPOActorConfig):
        if items:
            raise ConfigError(f"{where}: overrides apply to a YAML path; edit the PPOActorConfig directly")
        source.validate()
        return PipelineSpec(actor=source, critic_enabled=False, source="PPOActorConfig")
    if isinstance(source, (str, os.PathLike)) and str(source):
        path = _absolute(source)
        try:
            cfg = load_config(path, list(items))
        except ConfigError as exc:
            raise ConfigError(f"{where}={os.fspath(source)!r}: {exc}") from None
        return PipelineSpec(
            actor=cfg.actor, critic_enabled=bool(cfg.critic.enabled), source=path, diagnostics=cfg.diagnostics
        )
    raise ConfigError(
        f"{where}: got {source!r} ({type(source).__name__}), expected the path of a pipeline YAML with an "
        "'actor:' section (e.g. preset:grpo) or a PPOActorConfig"
    )


@functools.lru_cache(maxsize=16)
def _cached_actor(path: str, overrides: tuple[str, ...], where: str) -> tuple[PipelineSpec, PPOActor]:
    spec = load_pipeline(path, overrides, where=where)
    return spec, PPOActor(spec.actor)


def pipeline_actor(source: Any, overrides: Any = (), *, where: str) -> tuple[PipelineSpec, PPOActor]:
    """(spec, PPOActor) for a config; YAML paths are built once per process and overrides."""
    if isinstance(source, (str, os.PathLike)) and str(source):
        items = _check_overrides(overrides, f"{where} overrides")
        return _cached_actor(_absolute(source), items, where)
    spec = load_pipeline(source, overrides, where=where)
    return spec, PPOActor(spec.actor)
