"""What a race is: its arms, seeds, window, rungs, decision metric and test, declared before the first update.

A race directory holds `race.yaml`, this declaration, written when the race
starts. Running the same command again continues the race; a command that
declares another race there is refused (naming the field), so the decision
metric and the test cannot change after data exist.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import yaml

from areal_adv.api.cli_args import ConfigError

DECLARATION = "race.yaml"
#: The decision metrics: the mean train reward over the window, or the held-out accuracy's area over it.
METRICS = ("train_reward", "heldout")
METRIC_WORDS = {"train_reward": "mean train reward", "heldout": "held-out accuracy (area over the window)"}


class RaceError(ConfigError):
    """A race that cannot start or continue as asked: one line naming the flag, field or path."""


@dataclass(frozen=True)
class RaceSpec:
    """One race. `config`: the run every arm is (a path or `preset:NAME`); `estimators[0]`... see `baseline`."""

    config: str
    estimators: tuple[str, ...]
    baseline: str
    seeds: tuple[int, ...]
    updates: int
    rungs: int
    metric: str
    alpha: float
    overrides: tuple[str, ...] = ()
    seed_fields: tuple[str, ...] = ()
    start: str | None = None  # the checkpoint folder the arms start from (`--from`)
    full_updates: int | None = None  # the updates of a full run (the config's train.steps), for the compute line

    def __post_init__(self) -> None:
        if len(set(self.estimators)) != len(self.estimators) or len(self.estimators) < 2:
            raise RaceError(f"--estimators: expected at least 2 different estimators, got {list(self.estimators)}")
        if self.baseline not in self.estimators:
            raise RaceError(f"--baseline: {self.baseline!r} is not one of --estimators {list(self.estimators)}")
        if len(set(self.seeds)) != len(self.seeds) or len(self.seeds) < 2:
            raise RaceError(f"--seeds: a paired interval needs at least 2 different seeds, got {list(self.seeds)}")
        if self.metric not in METRICS:
            raise RaceError(f"--metric: expected one of {list(METRICS)}, got {self.metric!r}")
        if not 0 < self.alpha < 1:
            raise RaceError(f"--alpha: expected a probability in (0, 1), got {self.alpha}")
        if self.rungs < 1 or self.updates < self.rungs:
            raise RaceError(
                f"--updates {self.updates} and --rungs {self.rungs}: each rung needs at least one update "
                "(expected 1 <= rungs <= updates)"
            )

    def rung_ends(self) -> list[int]:
        """The update each rung ends at: round(updates · i / rungs) rounded down, the last at `updates`."""
        return [self.updates * i // self.rungs for i in range(1, self.rungs + 1)]

    @property
    def look_alpha(self) -> float:
        """The test level at each elimination (the looks share `alpha` equally: Bonferroni over rungs)."""
        return self.alpha / max(self.rungs - 1, 1)


def parse_seeds(text: str) -> tuple[int, ...]:
    """`S` (seeds 1..S), `A-B` (seeds A..B) or `A,B,C`; a one-line error naming --seeds otherwise."""
    try:
        if "," in text:
            seeds = tuple(int(s) for s in text.split(","))
        elif "-" in text.strip("-"):
            low, high = (int(s) for s in text.split("-", 1))
            seeds = tuple(range(low, high + 1))
        else:
            seeds = tuple(range(1, int(text) + 1))
    except ValueError:
        raise RaceError(f"--seeds: expected a count S, a range A-B or a list A,B,C, got {text!r}") from None
    if not seeds or min(seeds) < 0:
        raise RaceError(f"--seeds: expected non-negative seeds, got {text!r}")
    return seeds


def write_or_check(spec: RaceSpec, race_dir: Path) -> None:
    """Write the declaration into a new race directory, or check that the one there is this race."""
    path = race_dir / DECLARATION
    mine = _plain(spec)
    if not path.is_file():
        race_dir.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(yaml.safe_dump(mine, sort_keys=False), encoding="utf-8")
        os.replace(tmp, path)
        return
    theirs = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    for field in fields(RaceSpec):
        if theirs.get(field.name) != mine[field.name]:
            raise RaceError(
                f"{path}: this race directory holds a race with {field.name}={theirs.get(field.name)!r}, this "
                f"command declares {mine[field.name]!r}; rerun the command that started it to continue, or give "
                "another --race-dir"
            )


def read_declaration(race_dir: Path) -> RaceSpec:
    """The race a directory holds (to report it again without training)."""
    path = race_dir / DECLARATION
    if not path.is_file():
        raise RaceError(f"--race-dir: {race_dir} holds no {DECLARATION}; it is not a race directory")
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    data = {k: tuple(v) if isinstance(v, list) else v for k, v in data.items()}
    return RaceSpec(**data)


def _plain(spec: RaceSpec) -> dict[str, Any]:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(spec).items()}
