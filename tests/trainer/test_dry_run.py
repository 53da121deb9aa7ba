"""`areal validate --dry-run`: every configured stage runs once on a synthetic batch of the config's layout."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from areal.api.cli_args import load_config
from areal.cli import main
from areal.trainer.dry_run import synthetic_batch

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted(p for p in (ROOT / "examples").rglob("*.yaml"))
GRPO = str(ROOT / "examples/grpo_arith.yaml")


@pytest.mark.parametrize("path", EXAMPLES, ids=[str(p.relative_to(ROOT / "examples")) for p in EXAMPLES])
def test_every_example_config_passes_the_dry_run(path, capsys):
    assert main(["validate", str(path), "--dry-run"]) == 0, capsys.readouterr().err
    assert "dry run OK: every configured stage ran on a synthetic batch" in capsys.readouterr().out


@pytest.mark.parametrize(
    "overrides, stage, needle",
    [
        (["actor.advantage.outcome_reward_shaping.implementation=dry_run_plugins.outcome_wrong_shape"],
         "outcome_reward_shaping", "rewards: returned shape"),
        (["actor.advantage.estimator.implementation=dry_run_plugins.estimator_int_dtype"],
         "estimator", "advantages: returned dtype torch.int64, expected a floating dtype"),
        (["actor.advantage.process_adv_shaping.implementation=dry_run_plugins.process_wrong_shape"],
         "process_adv_shaping", "advantages: returned shape"),
        (["actor.advantage.compute.implementation=dry_run_plugins.replacement_float_truncation",
          "actor.reward_norm=null"],
         "compute", "extras['is_truncated']: returned dtype torch.float32, expected torch.bool"),
    ],
    ids=["outcome-shape", "estimator-dtype", "process-shape", "replacement-truncation-dtype"],
)
def test_a_plugin_breaking_its_contract_is_reported_before_launch(overrides, stage, needle, capsys):
    assert main(["validate", GRPO, *overrides]) == 0  # it resolves: without the dry run the config looks fine
    assert "config OK" in capsys.readouterr().out
    assert main(["validate", GRPO, "--dry-run", *overrides]) == 1
    err = capsys.readouterr().err
    path = overrides[0].split("=", 1)[1]
    assert err.startswith("error: dry run on a synthetic batch: ") and f"'{stage}'" in err and path in err and needle in err


def test_the_dry_run_batch_follows_the_config_layout():
    split = load_config(ROOT / "examples/guess_split_rollouts.yaml")
    batch, meta = synthetic_batch(split)
    assert meta.rollout_groups is not None and all(g is not None and g.rewards is not None for g in meta.rollout_groups)
    assert int(batch["turn_ids"].max()) == 0  # one generated turn per exported row
    multi = load_config(ROOT / "examples/ppo_turn_gae_guess.yaml")
    batch, meta = synthetic_batch(multi)
    assert int(batch["turn_ids"].max()) >= 1 and "values" in batch and meta.rollout_groups is None
    prm = load_config(ROOT / "examples/guess_process_weighted.yaml")
    batch, _ = synthetic_batch(prm)
    active = batch["loss_mask"].bool()
    assert ((batch["token_rewards"][active] >= 0) & (batch["token_rewards"][active] <= 1)).all()
    remax = load_config(ROOT / "examples/presets/remax.yaml")
    assert "reward_baselines" in synthetic_batch(remax)[0]
    recompute = load_config(None, ["actor.recompute_logprob=true", "actor.kl_ctl=0"])
    batch, _ = synthetic_batch(recompute)
    assert "prox_logp" in batch and "ref_logp" not in batch
    assert batch["is_truncated"].dtype == torch.bool and batch["is_truncated"].shape == batch["rewards"].shape


@pytest.mark.parametrize(
    "config, overrides, layout",
    [
        ("guess_split_rollouts.yaml", ["rollout.explicit_rollout_rewards=false",
         "actor.advantage.outcome_reward_shaping.implementation=dry_run_plugins.needs_split_rollouts"],
         "split rollouts"),
        ("grpo_arith.yaml", ["actor.advantage.process_adv_shaping.implementation=dry_run_plugins.needs_process_rewards"],
         "process rewards"),
    ],
    ids=["split-rollouts", "process-rewards"],
)
def test_plugins_see_the_layout_they_are_configured_for(config, overrides, layout, capsys):
    assert main(["validate", str(ROOT / "examples" / config), "--dry-run", *overrides]) == 0, capsys.readouterr().err
    assert layout in capsys.readouterr().out


def test_the_dry_run_catches_a_missing_shaped_reference(capsys):
    """Explicit references need shaped ones from a custom outcome stage: found before launch."""
    overrides = ["actor.advantage.outcome_reward_shaping.implementation=dry_run_plugins.needs_split_rollouts"]
    path = str(ROOT / "examples/guess_split_rollouts.yaml")
    assert main(["validate", path, *overrides]) == 0
    assert main(["validate", path, "--dry-run", *overrides]) == 1
    assert "must return OutcomeResult.normalization_rewards" in capsys.readouterr().err


def test_the_dry_run_takes_the_turn_count_from_the_task():
    """A single-turn task gets one generated turn per row; a multi-turn task plugin gets several."""
    single = load_config(ROOT / "examples/custom_task/single_turn.yaml")
    assert int(synthetic_batch(single)[0]["turn_ids"].max()) == 0
    multi = load_config(ROOT / "examples/custom_task/multi_turn.yaml")
    assert int(synthetic_batch(multi)[0]["turn_ids"].max()) >= 1
