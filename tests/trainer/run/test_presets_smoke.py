"""Every preset trains with the real trainer: `python -m areal_adv.trainer.main --config PRESET`.

Two steps each on the default arithmetic task with tiny overrides, through
`areal_adv.trainer.main.main(argv)` (the same code path as the command line), plus
multi-turn runs that exercise split rollouts and turn-level REINFORCE.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from areal_adv.trainer.main import main

PRESETS = Path(__file__).resolve().parents[3] / "examples" / "presets"
TINY = (
    "train.steps=2",
    "rollout.batch_size=2",
    "rollout.n_samples=3",
    "actor.max_new_tokens=4",
    "output.plot=false",
    "output.progress_bar=false",
    "train.num_threads=1",
)


def train(tmp_path: Path, preset: str, *extra: str) -> list[dict]:
    name = f"{preset}-{len(extra)}"
    argv = [
        "--config",
        str(PRESETS / f"{preset}.yaml"),
        *TINY,
        f"output.dir={tmp_path}",
        f"experiment_name={name}",
        *extra,
    ]
    assert main(argv) == 0
    rows = [json.loads(line) for line in (tmp_path / name / "trial0" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1]
    for r in rows:
        if r.get("filtered_group_frac") == 1.0:  # rollout.filter_zero_advantage left nothing: no update this step
            assert r["policy_loss"] is None and math.isfinite(r["adv_mean"]), r
            continue
        assert math.isfinite(r["policy_loss"]) and math.isfinite(r["adv_mean"]), r
    return rows


@pytest.mark.parametrize("preset", sorted(p.stem for p in PRESETS.glob("*.yaml") if p.stem != "remax"))
def test_preset_trains_two_steps(tmp_path, preset):
    rows = train(tmp_path, preset)
    if preset == "ppo":
        assert all(math.isfinite(r["value_loss"]) for r in rows)


def test_remax_preset_trains_two_steps(tmp_path):
    """The preset turns on rollout.greedy_baseline, which fills `reward_baselines`."""
    train(tmp_path, "remax")


def test_remax_without_greedy_baseline_names_the_missing_field(tmp_path, capsys):
    """The run ends with one line naming the stage and the missing field (the traceback in error.log)."""
    argv = ["--config", str(PRESETS / "remax.yaml"), *TINY, f"output.dir={tmp_path}", "rollout.greedy_baseline=false"]
    assert main(argv) == 1
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("error in step 0 > advantages: ValueError: outcome_reward_shaping 'remax': "), last
    assert "no 'reward_baselines'" in last and "error.log" in last


def test_remax_trains_once_the_rollout_adds_baselines(tmp_path, monkeypatch):
    """The rest of the path works: a stand-in baseline (the group's mean reward) instead of the greedy one."""
    from areal_adv.trainer.run.loop import Trainer

    rollout = Trainer.rollout

    def with_baselines(self):
        dicts, records = rollout(self)
        for group in dicts:
            group["reward_baselines"] = torch.full_like(group["rewards"], float(group["rewards"].mean()))
        return dicts, records

    monkeypatch.setattr(Trainer, "rollout", with_baselines)
    train(tmp_path, "remax")


@pytest.mark.parametrize(
    "preset,extra",
    [
        # One row per turn (split rollouts): group statistics over episodes, turn-level returns.
        (
            "gpg",
            (
                "task.name=guess",
                "rollout.export=per_turn",
                "actor.advantage.estimator.implementation=turn_reinforce_return",
            ),
        ),
        # Per-turn process rewards folded at turn ends, discounted per turn.
        (
            "opo",
            (
                "task.name=guess",
                "rollout.prm.enabled=true",
                "actor.token_rewards_as_adv=false",
                "actor.advantage.estimator.implementation=turn_reinforce_return",
                "actor.advantage.estimator.kwargs={turn_discount: 0.9}",
            ),
        ),
    ],
)
def test_multi_turn_variants_train(tmp_path, preset, extra):
    train(tmp_path, preset, *extra)
