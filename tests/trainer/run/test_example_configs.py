"""Every example and preset composes, has its own experiment_name, and the composed snippets train."""

from __future__ import annotations

from pathlib import Path

import pytest

from areal_adv.api.cli_args import config_to_dict, load_config
from areal_adv.trainer.run.loop import Trainer

ROOT = Path(__file__).resolve().parents[3]
ALL = sorted((ROOT / "examples").rglob("*.yaml"))
SNIPPETS = sorted((ROOT / "examples" / "custom_advantage").glob("*.yaml"))
TINY = [
    "train.steps=1",
    "rollout.batch_size=2",
    "rollout.n_samples=3",
    "model.hidden_size=32",
    "model.num_heads=2",
    "model.intermediate_size=64",
    "output.progress_bar=false",
    "output.plot=false",
    "output.loggers=[jsonl]",
    "train.num_threads=1",
    "train.save_every=0",
]


def test_every_example_and_preset_has_its_own_experiment_name() -> None:
    names = {p.relative_to(ROOT).as_posix(): load_config(p).experiment_name for p in ALL}
    assert len(names) >= 20 and "default" not in names.values()
    assert len(set(names.values())) == len(names), names


def test_presets_and_snippets_build_on_the_default_run() -> None:
    base = config_to_dict(load_config(ROOT / "examples" / "grpo_arith.yaml"))
    for path in sorted((ROOT / "examples" / "presets").glob("*.yaml")):
        cfg = config_to_dict(load_config(path))
        assert cfg["task"] == base["task"] and cfg["train"] == base["train"] and cfg["model"] == base["model"], path


@pytest.mark.parametrize("path", SNIPPETS, ids=[p.stem for p in SNIPPETS])
def test_composed_snippet_trains(path: Path, tmp_path: Path) -> None:
    result = Trainer(load_config(path, [*TINY, f"output.dir={tmp_path}"])).run()
    assert result.steps_done == 1 and result.run_dir.parent.name == f"custom_{path.stem}"
