"""Races with the real trainer: an arm is the run its estimator gives, across rungs; a race from a checkpoint.

Tiny runs (a few updates of the tiny random-init model): the suite's `sparse`
task with GRPO and MaxRL, and the default task from a GRPO run's checkpoint
with two jobs.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from areal_adv.api.cli_args import load_config
from areal_adv.trainer.race.race_command import main
from areal_adv.trainer.run.loop import Trainer

ROOT = Path(__file__).resolve().parents[3]

from bench.suite.suite_definitions import run_config  # noqa: E402

SMALL = ["rollout.batch_size=4", "rollout.n_samples=4", "eval.every=null", "output.plot=false"]


def _rewards(run_dir: Path) -> list[float]:
    return [json.loads(line)["reward_mean"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_an_arm_is_its_estimators_run_and_continues_exactly_across_rungs(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)  # the suite's task plugins import as bench.suite.suite_tasks
    config = run_config("sparse", "grpo", 0)
    config["output"]["dir"] = str(tmp_path / "runs")
    path = tmp_path / "sparse.yaml"
    path.write_text(yaml.safe_dump(config))
    race = tmp_path / "race"
    argv = [str(path), "--estimators", "grpo", "maxrl", "--updates", "3", "--seeds", "2", "--race-dir", str(race)]
    assert main([*argv, "--set", *SMALL, "--metric", "train_reward"]) == 0
    direct = run_config("sparse", "maxrl", 2, steps=3)
    direct["output"] = {**direct["output"], "dir": str(tmp_path / "direct")}
    for key, value in (item.split("=") for item in SMALL):
        section, field = key.split(".")
        direct[section][field] = None if value == "null" else int(value) if value.isdigit() else value == "true"
    result = Trainer(load_config(direct)).run()  # one piece, where the arm ran in two (to update 1, then 3)
    assert _rewards(race / "arms" / "maxrl" / "seed2") == _rewards(result.run_dir)
    verdicts = [json.loads(r) for r in (race / "race.jsonl").read_text().splitlines()]
    assert [v["arm"] for v in verdicts if v["kind"] == "verdict"] == ["grpo", "maxrl"]


def test_a_race_from_a_checkpoint_of_the_default_task_with_two_jobs(tmp_path, capsys):
    from areal_adv.trainer.main import main as train

    run = ["output.dir=" + str(tmp_path / "runs"), "train.steps=1", "train.save_every=1", *SMALL]
    assert train(["--config", "preset:grpo_arith", "train.num_threads=1", *run]) == 0
    run_dir = tmp_path / "runs" / "grpo_arith" / "trial0"
    race = tmp_path / "race"
    argv = ["--from", f"{run_dir}:1", "--estimators", "grpo", "rloo", "--updates", "2", "--rungs", "1"]
    assert main([*argv, "--seeds", "2", "--jobs", "2", "--race-dir", str(race), "--set", "train.num_threads=1"]) == 0
    arm = yaml.safe_load((race / "configs" / "rloo.yaml").read_text())
    assert arm["model"]["path"] == str(run_dir / "checkpoints" / "step_1" / "policy")
    assert arm["model"]["hidden_size"] is None and arm["experiment_name"] == "rloo"
    for name in ("grpo", "rloo"):
        assert len(_rewards(race / "arms" / name / "seed1")) == 2
    out = capsys.readouterr().out
    assert "fresh optimiser moments" in out and "\n- rloo " in out
