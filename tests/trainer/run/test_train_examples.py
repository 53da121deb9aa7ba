"""Smoke: every top-level example config trains for a few tiny steps end to end."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from areal_adv.api.cli_args import load_config
from areal_adv.trainer.run.loop import Trainer

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
TINY = [
    "train.steps=2",
    "rollout.batch_size=2",
    "rollout.n_samples=4",
    "model.hidden_size=32",
    "model.num_heads=2",
    "model.intermediate_size=64",
    "output.progress_bar=false",
]


def test_the_examples_exist() -> None:
    names = {p.stem for p in EXAMPLES}
    assert {
        "grpo_arith",
        "ppo_token_gae",
        "ppo_turn_gae_guess",
        "guess_gvpo",
        "guess_process_weighted",
        "guess_split_rollouts",
    } <= names


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_trains(path: Path, tmp_path: Path) -> None:
    cfg = load_config(path, [*TINY, f"output.dir={tmp_path}"])
    trainer = Trainer(cfg)
    result = trainer.run()
    assert result.steps_done == 2 and not result.interrupted
    rows = [json.loads(line) for line in result.metrics_path.read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1]
    for row in rows:
        for key in (
            "reward_mean",
            "success_rate",
            "adv_mean",
            "adv_std",
            "policy_loss",
            "entropy",
            "clip_frac",
            "tokens_per_s",
            "seconds",
        ):
            assert row[key] is not None and math.isfinite(row[key]), key
        if cfg.critic.enabled:
            assert math.isfinite(row["value_loss"])
        if cfg.actor.kl_ctl:
            assert math.isfinite(row["kl"])
    assert result.plot_path is not None and result.plot_path.stat().st_size > 1000
    assert result.plot_path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (result.run_dir / "config.yaml").is_file()

    out = trainer.step(2)
    batch, data = out.batch, out.data
    shape = batch["input_ids"].shape
    for key in ("advantages", "returns", "loss_mask", "logprobs"):
        assert data[key].shape == shape, key
        assert torch.isfinite(data[key].float()).all(), key
    mask = data["loss_mask"]
    assert set(mask.unique().tolist()) <= {0, 1}
    # aligned = the input (unshifted) loss mask rolled left by one, last column 0
    assert torch.equal(mask[:, :-1].bool(), batch["loss_mask"][:, 1:].bool())
    assert not mask[:, -1].bool().any()
    if cfg.critic.enabled:
        assert batch["values"].shape == shape
    if cfg.actor.kl_ctl:
        assert batch["ref_logp"].shape == shape
    if cfg.rollout.prm.enabled:
        assert batch["token_rewards"].shape == shape
