"""The block a run opens with: validate's stage table, the matching estimator preset, threads, device."""

from __future__ import annotations

from pathlib import Path

import pytest

from areal_adv.api.cli_args import load_config
from areal_adv.api.presets import DEFAULT_RUN, preset_names
from areal_adv.cli import main
from areal_adv.trainer.run.loop import Trainer
from areal_adv.trainer.run.run_summary import matching_presets

TINY = [
    "train.steps=1",
    "rollout.batch_size=2",
    "rollout.n_samples=2",
    "model.hidden_size=32",
    "model.num_heads=2",
    "model.intermediate_size=64",
    "output.progress_bar=false",
    "output.plot=false",
    "output.loggers=[jsonl]",
    "train.num_threads=1",
    "train.save_every=0",
]


def test_every_estimator_preset_matches_itself_only():
    for name in set(preset_names()) - {DEFAULT_RUN}:
        assert matching_presets(load_config(f"preset:{name}")) == [name], name
    assert matching_presets(load_config(f"preset:{DEFAULT_RUN}")) == []


@pytest.mark.parametrize(
    "override",
    ["actor.reward_norm.eps=1e-4", "actor.kl_ctl=0.01", "actor.advantage.estimator=token_gae", "critic.enabled=true"],
)
def test_a_changed_algorithm_setting_matches_no_preset(override):
    assert matching_presets(load_config("preset:grpo", [override])) == []


def test_a_change_outside_the_algorithm_keeps_the_match():
    assert matching_presets(load_config("preset:rloo", ["train.steps=3", "task.kwargs.max_operand=9"])) == ["rloo"]


def test_the_run_opens_with_validates_table_the_preset_threads_and_device(tmp_path: Path, capsys):
    assert main(["validate", "preset:rloo", *TINY]) == 0
    table = capsys.readouterr().out.split("\n\nconfig OK")[0]
    Trainer(load_config("preset:rloo", [*TINY, f"output.dir={tmp_path}"])).run()
    out = capsys.readouterr().out
    assert f"[areal-adv] preset_rloo: what runs\n{table}\nestimator preset: preset:rloo\n" in out, out
    assert "threads: 1 per process (train.num_threads) | device: cpu\n" in out, out
