"""A race's course without training: rungs, drops, resume, outputs and refusals (the trainer replaced by a fake).

`arm_runs.run_launch` is the one place a race hands work to the trainer; here
it writes the metrics rows a run would, with rewards set per arm, so the
race's own logic is checked in milliseconds. tests/trainer/race/test_race_training.py
runs the real trainer.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from areal_adv.trainer.race import arm_runs
from areal_adv.trainer.race.race_command import main

SHIFT = {"grpo": 0.0, "rloo": 0.002, "gpg": -0.4}


class FakeTrainer:
    """Writes `reward_mean` rows up to `train.steps`: a seed's level, plus the arm's shift, plus a little noise."""

    def __init__(self, fail_after: int | None = None) -> None:
        self.calls: list[tuple[str, int, int]] = []
        self.fail_after = fail_after

    def __call__(self, argv: list[str], log: Path) -> int:
        config = yaml.safe_load(Path(argv[1]).read_text())
        options = dict(a.split("=", 1) for a in argv[2:])
        arm, seed, until = config["experiment_name"], int(options["seed"]), int(options["train.steps"])
        if self.fail_after is not None and len(self.calls) == self.fail_after:
            return 130  # Ctrl-C inside the trainer: its outputs kept, the race stops
        self.calls.append((arm, seed, until))
        run_dir = Path(config["output"]["dir"]) / arm / options["trial_name"]
        run_dir.mkdir(parents=True, exist_ok=True)
        path = run_dir / "metrics.jsonl"
        have = len(path.read_text().splitlines()) if path.exists() else 0
        with path.open("a") as fh:
            for step in range(have, until):
                reward = 0.1 * seed + SHIFT[arm] + 0.01 * ((seed * 3 + step + len(arm)) % 4)
                fh.write(json.dumps({"step": step, "reward_mean": reward, "time/step": 0.5}) + "\n")
        return 0


def _race(tmp_path: Path, *extra: str) -> list[str]:
    return [
        "preset:grpo_arith",
        "--estimators",
        "grpo",
        "rloo",
        "gpg",
        "--updates",
        "6",
        "--seeds",
        "4",
        "--race-dir",
        str(tmp_path / "race"),
        *extra,
    ]


def _rows(race_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (race_dir / "race.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> tuple[Path, FakeTrainer, str]:
    """One whole race with the fake trainer: (its parent folder, the fake, what it printed)."""
    import contextlib
    import io

    tmp_path, fake = tmp_path_factory.mktemp("finished"), FakeTrainer()
    out = io.StringIO()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(out):
        patch.setattr(arm_runs, "run_launch", fake)
        assert main(_race(tmp_path)) == 0
    return tmp_path, fake, out.getvalue()


def test_the_worse_arm_is_dropped_at_the_first_rung_and_not_trained_further(finished):
    tmp_path, fake, out = finished
    assert sorted(c for c in fake.calls if c[0] == "gpg") == [("gpg", s, 3) for s in range(1, 5)]
    assert sum(c[2] == 6 for c in fake.calls) == 8  # grpo and rloo, 4 seeds each, to the end
    rows = _rows(tmp_path / "race")
    verdicts = {r["arm"]: r for r in rows if r["kind"] == "verdict"}
    assert verdicts["gpg"]["status"] == "dropped" and verdicts["gpg"]["updates"] == 3
    assert verdicts["gpg"]["high"] < 0 and "learns later than grpo" in verdicts["gpg"]["words"]
    assert verdicts["rloo"]["status"] == "finished" and verdicts["rloo"]["updates"] == 6
    assert next(r for r in rows if r["kind"] == "rung")["dropped"] == ["gpg"]
    cost = next(r for r in rows if r["kind"] == "compute")
    assert (cost["trained"], cost["without_dropping"]) == (4 * 3 + 8 * 6, 3 * 4 * 6)
    assert "What it cannot tell" in out and "95 % paired Student-t interval" in out
    assert (tmp_path / "race" / "race.png").stat().st_size > 0 and (tmp_path / "race" / "race.md").is_file()
    for arm in ("grpo", "rloo", "gpg"):  # ordinary run directories, one config per arm
        assert (tmp_path / "race" / "arms" / arm / "seed1" / "metrics.jsonl").is_file()
        assert yaml.safe_load((tmp_path / "race" / "configs" / f"{arm}.yaml").read_text())["experiment_name"] == arm


def test_an_interrupted_race_continues_where_it_stopped(tmp_path, monkeypatch, finished):
    stopped = FakeTrainer(fail_after=5)
    monkeypatch.setattr(arm_runs, "run_launch", stopped)
    assert main(_race(tmp_path)) == 130
    again = FakeTrainer()
    monkeypatch.setattr(arm_runs, "run_launch", again)
    assert main(_race(tmp_path)) == 0
    assert not set(stopped.calls) & set(again.calls)  # nothing trained twice
    assert len(stopped.calls) + len(again.calls) == 12 + 8

    resumed = [r for r in _rows(tmp_path / "race") if r["kind"] == "verdict"]
    assert resumed == [r for r in _rows(finished[0] / "race") if r["kind"] == "verdict"]


def test_a_race_directory_refuses_another_race_and_a_changed_config(finished, monkeypatch, capsys):
    tmp_path = finished[0]
    monkeypatch.setattr(arm_runs, "run_launch", FakeTrainer())
    assert main(_race(tmp_path, "--alpha", "0.1")) == 1
    assert "race.yaml: this race directory holds a race with alpha=0.05" in capsys.readouterr().err
    assert main(_race(tmp_path, "--set", "train.lr=0.1")) == 1
    assert "holds a race with overrides=[]" in capsys.readouterr().err
    config = tmp_path / "race" / "configs" / "rloo.yaml"
    kept = config.read_text()
    config.write_text(kept.replace("lr: ", "lr: 1"))
    assert main(_race(tmp_path)) == 1
    assert "rloo.yaml: the arm's config is not the one it started with" in capsys.readouterr().err
    config.write_text(kept)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["preset:grpo_arith", "--estimators", "grpo"], "--estimators: expected at least 2"),
        (["preset:grpo_arith", "--estimators", "grpo", "rloo", "--baseline", "ppo"], "--baseline: 'ppo' is not one"),
        (["preset:grpo_arith", "--estimators", "grpo", "rloo", "--seeds", "1"], "--seeds: a paired interval"),
        (["preset:grpo_arith", "--estimators", "grpo", "rloo", "--seeds", "x-y"], "--seeds: expected a count"),
        (["preset:grpo_arith", "--estimators", "grpo", "rloo", "--updates", "1", "--rungs", "2"], "--updates 1 and"),
        (["preset:grpo_arith", "--estimators", "grpo", "rloo", "--metric", "heldout"], None),
        (["--estimators", "grpo", "rloo"], "give CONFIG (or --from RUN_DIR)"),
        (["nope.yaml", "--estimators", "grpo", "rloo"], "CONFIG nope.yaml"),
        (["preset:grpo_arith", "--estimators", "grpo", "rloo", "--from", "/no/such/run"], "does not exist"),
    ],
)
def test_bad_arguments_are_one_line_errors_naming_the_flag(tmp_path, monkeypatch, capsys, args, message):
    monkeypatch.setattr(arm_runs, "run_launch", FakeTrainer())
    status = main([*args, "--race-dir", str(tmp_path / "r")])
    err = capsys.readouterr().err
    if message is None:  # the held-out metric without evaluations: named once the runs exist
        assert status == 1 and "held-out evaluations within the first" in err and "eval.every" in err
        return
    assert status == 1 and message in err and err.count("\n") == 1, err
