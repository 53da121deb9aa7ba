"""`areal-adv race --compare`: runs named or recognised, paired by seed and step, and the errors when they cannot be.

Run directories are written by hand here (our `metrics.jsonl` and `config.yaml`)
and event files with torch's SummaryWriter under AReaL's tag names;
tests/integrations/test_race_compare.py reads the files the real verl and TRL loggers write.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from areal_adv.trainer.race.compare_runs import parse_run
from areal_adv.trainer.race.race_command import main
from areal_adv.trainer.race.race_spec import RaceError

SHIFT = {"grpo": 0.0, "maxrl": 0.05, "rloo": -0.001}


def _run(root: Path, arm: str, seed: int, steps: int = 6, *, eval_every: int | None = None) -> Path:
    run_dir = root / arm / f"seed{seed}"
    run_dir.mkdir(parents=True)
    (run_dir / "config.yaml").write_text(yaml.safe_dump({"experiment_name": arm, "seed": seed}))
    rows = []
    for step in range(steps):
        row = {"step": step, "reward_mean": 0.1 * seed + SHIFT[arm] * step + 0.003 * ((seed + step) % 3)}
        if eval_every and step % eval_every == 0:
            row |= {"eval/updates": step, "eval/accuracy": 0.1 * seed + SHIFT[arm] * step}
        rows.append(row)
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run_dir


def test_runs_are_read_paired_and_judged(tmp_path, capsys):
    runs = [_run(tmp_path / "runs", arm, seed) for arm in ("grpo", "maxrl", "rloo") for seed in (1, 2, 3)]
    out_dir = tmp_path / "out"
    assert main(["--compare", *map(str, runs), "--race-dir", str(out_dir)]) == 0
    out = capsys.readouterr().out
    assert "maxrl learns sooner than grpo here" in out and "over 6 updates" in out
    rows = [json.loads(line) for line in (out_dir / "race.jsonl").read_text().splitlines()]
    verdicts = {r["arm"]: r for r in rows if r["kind"] == "verdict"}
    assert verdicts["maxrl"]["mean"] == pytest.approx(0.05 * 15 / 6) and verdicts["maxrl"]["n"] == 3
    assert (out_dir / "race.png").is_file()


def test_a_run_is_named_explicitly_or_by_its_config_or_its_folders(tmp_path):
    run = _run(tmp_path, "grpo", 4)
    assert parse_run(str(run)) == parse_run(f"grpo:4={run}")
    (run / "config.yaml").unlink()
    assert parse_run(str(run)).arm == "grpo" and parse_run(str(run)).seed == 4  # from .../grpo/seed4
    bare = tmp_path / "logs"
    bare.mkdir()
    with pytest.raises(RaceError, match="cannot tell the estimator and seed of .*ESTIMATOR:SEED=PATH"):
        parse_run(str(bare))


def test_held_out_accuracy_is_compared_on_the_evaluations_all_runs_share(tmp_path, capsys):
    runs = [_run(tmp_path, arm, s, eval_every=2) for arm in ("grpo", "maxrl") for s in (1, 2)]
    assert main(["--compare", *map(str, runs), "--metric", "heldout", "--race-dir", str(tmp_path / "o")]) == 0
    assert "held-out accuracy (area over the window) over 4 updates" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("layout", "message"),
    [
        ({"grpo": (1, 2), "maxrl": (3, 4)}, "maxrl and grpo cannot be paired by seed: maxrl has seeds [3, 4]"),
        ({"grpo": (1, 2)}, "runs of one arm only"),
    ],
)
def test_runs_that_cannot_be_paired_by_seed_are_refused(tmp_path, capsys, layout, message):
    runs = [_run(tmp_path, arm, s) for arm, seeds in layout.items() for s in seeds]
    assert main(["--compare", *map(str, runs), "--race-dir", str(tmp_path / "o")]) == 1
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_runs_that_cannot_be_paired_by_step_are_refused(tmp_path, capsys):
    runs = [_run(tmp_path, "grpo", s, steps=4) for s in (1, 2)] + [_run(tmp_path, "maxrl", s) for s in (1, 2)]
    assert main(["--compare", *map(str, runs), "--updates", "6", "--race-dir", str(tmp_path / "o")]) == 1
    assert "the runs share 4 logged steps, fewer than the window of 6; they cannot be paired by step" in (
        capsys.readouterr().err
    )
    sparse = tmp_path / "sparse"
    runs = [_run(sparse, "grpo", s) for s in (1, 2)] + [_run(sparse, "maxrl", s) for s in (1, 2)]
    rows = (runs[0] / "metrics.jsonl").read_text().splitlines()
    (runs[0] / "metrics.jsonl").write_text("\n".join(rows[::2]) + "\n")  # logs every other step
    assert main(["--compare", *map(str, runs), "--race-dir", str(tmp_path / "o")]) == 1
    assert "inside the window that another run lacks" in capsys.readouterr().err
    assert main(["--compare", *map(str, runs[:2]), str(runs[2]), str(runs[2]), "--race-dir", str(tmp_path / "o")]) == 1
    assert "maxrl seed 1 is given twice" in capsys.readouterr().err


def test_areal_event_files_are_read_by_their_tags(tmp_path, capsys):
    from torch.utils.tensorboard import SummaryWriter

    runs = []
    for arm in ("grpo", "maxrl"):
        for seed in (1, 2, 3):
            folder = tmp_path / arm / f"seed{seed}" / "tb"
            with SummaryWriter(str(folder)) as writer:  # AReaL's StatsLogger: one scalar per stats key and step
                for step in range(5):
                    writer.add_scalar("rollout/reward", 0.1 * seed + SHIFT[arm] * step + 0.01 * (seed % 2), step)
                    writer.add_scalar("ppo_actor/update/grad_norm", 1.0, step)
            runs.append(f"{arm}:{seed}={folder}")
    assert main(["--compare", *runs, "--race-dir", str(tmp_path / "o")]) == 0
    assert "maxrl learns sooner than grpo here" in capsys.readouterr().out
    assert main(["--compare", *runs, "--train-tag", "nope", "--race-dir", str(tmp_path / "o")]) == 1
    assert "has no train-reward tag (looked for --train-tag 'nope')" in capsys.readouterr().err


def test_our_own_event_files_map_evaluations_to_the_updates_they_measured(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    from areal_adv.trainer.race.series import from_event_files

    with SummaryWriter(str(tmp_path / "tensorboard")) as writer:  # our TensorBoardSink: one tag per metric and step
        for step in range(4):
            writer.add_scalar("reward_mean", 0.1 * step, step)
            if step in (0, 3):  # evaluated before step 0's update, and after the last one (updates 4)
                writer.add_scalar("eval/accuracy", 0.5 + 0.1 * step, step)
                writer.add_scalar("eval/updates", 0 if step == 0 else 4, step)
    series = from_event_files(tmp_path)
    assert series.engine == "areal-adv" and series.train == pytest.approx({s: 0.1 * s for s in range(4)})
    assert series.heldout == pytest.approx({0: 0.5, 4: 0.8})
