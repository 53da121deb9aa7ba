"""Each arm of a race: the race's run with one estimator's algorithm, written as an ordinary config file.

An arm is `areal_adv.api.estimator_algorithm`'s rule applied to the race's
config (so arms differ only in the estimator), then `--set` (the same for every
arm), then what makes it one arm of the race: `experiment_name` (the arm's
label) and `output.dir` (the race's `arms/`), so seed s of arm E runs in
`<race dir>/arms/<E>/seed<s>/`, an ordinary run directory. `configs/<E>.yaml`
is the arm's whole resolved config: `areal-adv train --config configs/<E>.yaml
seed=<s> trial_name=seed<s> train.resume=auto train.steps=<N>` continues an arm,
and `areal-adv export` exports it.

From a checkpoint (`--from RUN_DIR[:STEP]`) every arm starts from that
checkpoint's policy (`model.path=<checkpoint>/policy`, the folder a checkpoint
keeps loadable for this): the weights, not the optimiser's moments or the step
count, which start afresh in every arm alike.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from areal_adv.api.cli_args import ConfigError, config_to_dict, config_to_yaml, load_config
from areal_adv.api.estimator_algorithm import algorithm_of, apply_algorithm
from areal_adv.trainer.race.race_spec import RaceError, RaceSpec

ARMS_DIR, CONFIGS_DIR, LOGS_DIR = "arms", "configs", "logs"
#: The tiny random model's architecture fields: errors next to `model.path`, so a start from a checkpoint clears them.
_TINY_FIELDS = ("arch", "hidden_size", "num_layers", "num_heads", "intermediate_size", "max_position_embeddings")


@dataclass(frozen=True)
class Arm:
    """One estimator of a race: its label (experiment name and folder) and its config file."""

    label: str
    estimator: str
    config: Path

    def run_dir(self, race_dir: Path, seed: int) -> Path:
        return race_dir / ARMS_DIR / self.label / f"seed{seed}"

    def log(self, race_dir: Path, seed: int) -> Path:
        return race_dir / LOGS_DIR / f"{self.label}-seed{seed}.log"


def arm_label(estimator: str) -> str:
    """The arm's name: the estimator, without `preset:`, or a config file's stem."""
    if estimator.endswith((".yaml", ".yml")):
        return Path(estimator).stem
    return estimator.removeprefix("preset:")


def start_overrides(checkpoint: Path) -> dict[str, Any]:
    """The model section of a start from `checkpoint`: its policy folder, no tiny-model or GGUF fields."""
    from areal_adv.utils.checkpoint_folders import read_manifest

    if read_manifest(checkpoint).get("lora"):
        raise RaceError(
            f"--from: {checkpoint} holds LoRA adapters only; export the run first (areal-adv export RUN_DIR OUT) "
            "and race from a config whose model.path is OUT"
        )
    return {"path": str((checkpoint / "policy").resolve()), "gguf_file": None, **dict.fromkeys(_TINY_FIELDS)}


def base_mapping(spec: RaceSpec) -> dict[str, Any]:
    """The race's run as a plain mapping (the config, and the model of `--from`)."""
    try:
        mapping = config_to_dict(load_config(spec.config))
    except ConfigError as exc:
        raise RaceError(f"CONFIG {spec.config}: {exc}") from None
    if spec.start is not None:
        mapping["model"] = {**mapping["model"], **start_overrides(Path(spec.start))}
    return mapping


def arm_mapping(spec: RaceSpec, race_dir: Path, estimator: str, base: dict[str, Any]) -> dict[str, Any]:
    """The arm's whole resolved config: the algorithm, `--set`, then its name, folder and checkpoint schedule."""
    mapping = apply_algorithm(base, algorithm_of(estimator))
    try:
        cfg = load_config(mapping, spec.overrides)
    except ConfigError as exc:
        raise RaceError(f"--estimators {estimator}: its config does not load: {exc}") from None
    out = config_to_dict(cfg)
    out["experiment_name"] = arm_label(estimator)
    out["output"] = {**out["output"], "dir": str((race_dir / ARMS_DIR).resolve()), "overwrite": False}
    out["output"]["progress_bar"] = False
    # every launch ends at a rung and must leave a checkpoint there to go on from
    out["train"] = {**out["train"], "save_every": out["train"]["save_every"] or spec.updates, "resume": None}
    return out


def write_arm_configs(spec: RaceSpec, race_dir: Path) -> list[Arm]:
    """Write (or check) `configs/<label>.yaml` of every arm; a config that changed since the race began is refused."""
    labels = [arm_label(e) for e in spec.estimators]
    if len(set(labels)) != len(labels):
        raise RaceError(f"--estimators: two arms would share a name: {labels}")
    base = base_mapping(spec)
    arms = []
    for estimator, label in zip(spec.estimators, labels):
        path = race_dir / CONFIGS_DIR / f"{label}.yaml"
        text = config_to_yaml(load_config(arm_mapping(spec, race_dir, estimator, base)))
        if path.is_file() and path.read_text(encoding="utf-8") != text:
            raise RaceError(
                f"{path}: the arm's config is not the one it started with (CONFIG, --set or an estimator's file "
                "changed since); restore them to continue, or give another --race-dir"
            )
        if not path.is_file():
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(path.name + ".tmp")
            tmp.write_text(text, encoding="utf-8")
            os.replace(tmp, path)
        arms.append(Arm(label, estimator, path))
    return arms
