"""Experiment-level configuration: the actor plus the trainer sections around it.

`ExperimentConfig` is the schema that `areal.api.cli_args.load_config` fills from
YAML and dotted overrides.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from areal.api.cli_args import ConfigError, PPOActorConfig


@dataclass
class ExperimentConfig:
    """A whole experiment: the `actor:` section and the trainer around it."""

    experiment_name: str = "default"
    seed: int = 1
    actor: PPOActorConfig = field(default_factory=PPOActorConfig)

    def __post_init__(self) -> None:
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise ConfigError(f"seed: got {self.seed!r}, expected an integer")
