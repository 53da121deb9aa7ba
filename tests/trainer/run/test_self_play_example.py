"""The self-play RAE example: it validates, trains a few steps, and the seats reach the RAE state."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from areal_adv.api.cli_args import load_config
from areal_adv.cli import main
from areal_adv.trainer.run.loop import Trainer
from areal_adv.trainer.run.metrics import read_metrics
from examples.self_play.nim import NimEnvironment

ROOT = Path(__file__).resolve().parents[3]
CONFIG = ROOT / "examples" / "self_play" / "rae_nim.yaml"
TINY = [
    "rollout.batch_size=4",
    "rollout.n_samples=2",
    "model.hidden_size=32",
    "model.num_heads=2",
    "model.intermediate_size=64",
    "output.progress_bar=false",
    "output.plot=false",
    "eval.every=null",
    "train.num_threads=1",
    "train.save_every=0",
]


def test_rae_example_validates_with_a_dry_run(capsys):
    assert main(["validate", str(CONFIG), "--dry-run"]) == 0, capsys.readouterr().err
    assert "dry run OK" in capsys.readouterr().out


def test_rae_example_trains_and_keeps_one_baseline_per_seat(tmp_path: Path) -> None:
    trainer = Trainer(load_config(CONFIG, [*TINY, "train.steps=2", f"output.dir={tmp_path}"]))
    result = trainer.run()
    assert [r["step"] for r in read_metrics(result.metrics_path)] == [0, 1]
    out = trainer.step(2)
    seats = torch.tensor([rec.row["role_id"] for rec in out.records])
    assert torch.equal(out.batch["role_ids"], seats) and set(out.batch["game_ids"].tolist()) == {
        int(out.batch["game_ids"][0])
    }
    state = trainer.actor.stage_states["outcome_reward_shaping"]
    assert set((state.get("keys") % 2**31).tolist()) <= {0, 1} and len(state.get("keys")) >= 1
    for rec in out.records:
        assert rec.reward in (-1.0, 1.0)


@pytest.mark.parametrize(
    "stones, seat, move, reward, done",
    [
        (2, 0, "2", 1.0, True),  # takes the last stone: a win
        (5, 0, "3", -1.0, True),  # not 1 or 2: an invalid move loses
        (2, 0, "x", -1.0, True),
        (1, 0, "2", -1.0, True),  # more than the pile
    ],
)
def test_nim_rules(stones, seat, move, reward, done):
    env = NimEnvironment(stones, seat, seed=0)
    assert env.reset() == f"nim {stones} first"
    result = env.step(move)
    assert (result.reward, result.done) == (reward, done)


def test_nim_second_seat_sees_the_opponents_first_move_and_the_opponent_can_win():
    outcomes = set()
    for seed in range(12):
        env = NimEnvironment(4, 1, seed=seed)
        words = env.reset().split()
        assert words[:4] == ["nim", "4", "second", "took"] and int(words[4]) + int(words[6]) == 4
        result = env.step("1")
        if result.done:  # the opponent took the rest
            assert result.reward == -1.0
        else:
            assert result.observation.split()[0] == "took" and result.reward == 0.0
        outcomes.add(result.done)
    assert outcomes == {True, False}
