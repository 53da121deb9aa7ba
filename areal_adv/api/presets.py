"""Presets shipped with the package, found by name: `preset:NAME`.

Every `*.yaml` in the package's `areal_adv/presets/` folder is a preset named by its
file stem: the default run (`grpo_arith`) and one file per well-known estimator,
each building on the default run. They are package data, so a pip install and a
clone both have them, and a config anywhere can name one:

    defaults: [preset:grpo]                             # in a YAML file
    load_config("preset:grpo", ["actor.kl_ctl=0.01"])  # in Python
    python -m areal_adv.trainer.main --config preset:grpo  # on the command line

A preset's description is its file's first line, a comment (`# GRPO: ...`);
`areal-adv presets` prints them. Dropping a new `*.yaml` into the folder is all it
takes to add a preset. Imports nothing from areal_adv but `areal_adv.utils.suggest`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TypeGuard

from areal_adv.utils.suggest import did_you_mean

__all__ = [
    "DEFAULT_RUN",
    "PRESET_DIR",
    "PREFIX",
    "PresetError",
    "describe_preset",
    "is_preset_ref",
    "preset_names",
    "preset_path",
    "resolve_source",
]

#: The scheme that names a preset instead of a file path.
PREFIX = "preset:"
#: The preset every other one builds on: a whole run (task, model, schedule), not an estimator.
DEFAULT_RUN = "grpo_arith"
#: The package's preset folder (package data: see `[tool.setuptools.package-data]` in pyproject.toml).
PRESET_DIR = Path(__file__).resolve().parents[1] / "presets"


class PresetError(ValueError):
    """`preset:NAME` names no preset; the message lists the known ones."""


def is_preset_ref(source: object) -> TypeGuard[str]:
    """Whether `source` is a `preset:NAME` reference (a string, not a path object)."""
    return isinstance(source, str) and source.startswith(PREFIX)


def preset_names() -> list[str]:
    """Every preset's name, sorted: the stems of the `*.yaml` files in `PRESET_DIR`."""
    return sorted(p.stem for p in PRESET_DIR.glob("*.yaml"))


def preset_path(name: str) -> Path:
    """The file of preset `name` (with or without the `preset:` prefix); a one-line error if there is none."""
    name = name[len(PREFIX) :] if name.startswith(PREFIX) else name
    path = PRESET_DIR / f"{name}.yaml"
    if name and os.sep not in name and "/" not in name and path.is_file():
        return path
    known = preset_names()
    raise PresetError(
        f"unknown preset {name!r}{did_you_mean(name, known)} "
        f"(known presets: {', '.join(known)}; `areal-adv presets` describes them)"
    )


def resolve_source(source: str | os.PathLike) -> str:
    """A config source as a file path: `preset:NAME` becomes its file, anything else is returned unchanged."""
    return str(preset_path(source)) if is_preset_ref(source) else os.fspath(source)


def describe_preset(name: str) -> str:
    """The preset's one-line description: its file's first line when that is a comment, else ''."""
    with preset_path(name).open(encoding="utf-8") as handle:
        first = handle.readline().strip()
    return first.lstrip("#").strip() if first.startswith("#") else ""
