"""`areal-adv race --compare` on event files the real verl and TRL loggers write.

verl: its `Tracking` logger (tensorboard backend) logs, per step, the metrics its
trainer computes from a batch (`compute_data_metrics` after `compute_advantage`)
and its validation metrics as its trainer names them (`_val_metrics_update`).
TRL: `GRPOTrainer` (AReaLGRPOTrainer, the tiny local model of trl_setup.py)
trains 3 steps with `report_to="tensorboard"` per estimator and seed.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import trl_setup as ts
import verl_batches as vb

from areal_adv.trainer.race.race_command import main

ROOT = Path(__file__).resolve().parents[2]
PRESETS = ROOT / "examples" / "presets"


def _verl_metrics(seed: int, step: int, lift: float) -> dict[str, float]:
    """One step's metrics as verl's trainer computes them: data metrics of a batch, and validation every 2 steps."""
    from verl.trainer.ppo.metric_utils import compute_data_metrics
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer, compute_advantage

    batch = vb.make_batch(100 * seed + step, [4, 4], binary=True, multi_turn=False).proto()
    batch.batch["token_level_scores"] = batch.batch["token_level_scores"] + lift * (batch.batch["response_mask"] > 0)
    batch.batch["token_level_rewards"] = batch.batch["token_level_scores"].clone()
    batch.batch["prompts"] = torch.zeros(len(batch), vb.PROMPT, dtype=torch.long)
    batch = compute_advantage(batch, adv_estimator="grpo", num_repeat=4)
    metrics = compute_data_metrics(batch, use_critic=False)
    if step % 2 == 0:
        rng = np.random.default_rng(seed * 10 + step)
        acc = (rng.random(8) < 0.3 + lift).astype(float)
        sources, uids = np.array(["sums"] * 8, dtype=object), np.array([f"u{i}" for i in range(8)], dtype=object)
        metrics.update(RayPPOTrainer._val_metrics_update(None, sources, uids, {"acc": list(acc)}, []))
    return metrics


def test_verl_tracking_event_files_are_compared(tmp_path, monkeypatch, capsys):
    from verl.utils.tracking import Tracking

    runs = []
    for arm, lift in (("grpo", 0.0), ("maxrl", 0.02)):
        for seed in (1, 2, 3):
            folder = tmp_path / "verl" / arm / f"seed{seed}"
            monkeypatch.setenv("TENSORBOARD_DIR", str(folder))
            tracking = Tracking(project_name="race", experiment_name=f"{arm}-{seed}", default_backend="tensorboard")
            for step in range(1, 7):  # verl's global steps start at 1
                tracking.log(data=_verl_metrics(seed, step, lift * step), step=step)
            tracking.finish()
            runs.append(f"{arm}:{seed}={folder}")
    assert main(["--compare", *runs, "--race-dir", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "maxrl learns sooner than grpo here" in out and "over 6 updates" in out
    assert main(["--compare", *runs, "--metric", "heldout", "--race-dir", str(tmp_path / "out2")]) == 0
    assert "held-out accuracy (area over the window)" in capsys.readouterr().out
    rows = [json.loads(line) for line in (tmp_path / "out" / "race.jsonl").read_text().splitlines()]
    assert {r["path"] for r in rows if r["kind"] == "run"} == {r.split("=", 1)[1] for r in runs}


@pytest.fixture(scope="module")
def trl_runs(tmp_path_factory) -> list[str]:
    """TRL runs of two presets x 2 seeds, 3 steps each, logged by transformers' TensorBoard callback."""
    model_dir = ts.build_model(tmp_path_factory.mktemp("tiny-llama"))
    out = tmp_path_factory.mktemp("trl")
    runs = []
    for arm in ("grpo", "dr_grpo"):
        for seed in (1, 2):
            folder = out / arm / f"seed{seed}"
            trainer = ts.make_trainer(
                model_dir, folder, PRESETS / f"{arm}.yaml", steps=3, seed=seed, report_to="tensorboard"
            )
            trainer.train()
            runs.append(str(folder))
    return runs


def test_trl_event_files_are_compared_with_their_arms_and_seeds_read_from_the_folders(trl_runs, tmp_path, capsys):
    assert main(["--compare", *trl_runs, "--race-dir", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "dr_grpo" in out and "over 3 updates" in out and "95 % paired Student-t interval" in out
    rows = [json.loads(line) for line in (tmp_path / "out" / "race.jsonl").read_text().splitlines()]
    assert sorted((r["arm"], r["seed"]) for r in rows if r["kind"] == "run") == [
        ("dr_grpo", 1),
        ("dr_grpo", 2),
        ("grpo", 1),
        ("grpo", 2),
    ]


def test_trl_runs_without_a_shared_seed_cannot_be_paired(trl_runs, tmp_path, capsys):
    one_each = [trl_runs[0], trl_runs[3]]  # grpo seed 1, dr_grpo seed 2
    assert main(["--compare", *one_each, "--race-dir", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert "dr_grpo and grpo cannot be paired by seed: dr_grpo has seeds [2], grpo has [1]" in err
