"""bench/real_model/compare_estimators.py stays runnable: every estimator on a tiny random model, parts, resume, report.

The real campaign (SmolLM2-135M, hours) is not run here; this runs the same
script end to end with `--tiny` (a random-init model, 2 x 2 samples of 4 tokens).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import warm_python
import yaml

from areal_adv.api.cli_args import load_config

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = "bench.real_model.compare_estimators"  # run as python -m SCRIPT
ESTIMATORS = ("grpo", "dr_grpo", "rloo", "reinforce_plus_plus_baseline", "gdpo")
# one pytest-xdist worker runs the module, so the module-scoped campaign (about 20 s) is built once, not per worker
pytestmark = pytest.mark.xdist_group("compare_estimators")


def _run(tmp: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = [
        sys.executable,
        "-m",
        SCRIPT,
        "--tiny",
        "--runs-dir",
        str(tmp / "runs"),
        "--results",
        str(tmp / "results.jsonl"),
        "--plot",
        str(tmp / "plot.png"),
        "--set",
        "eval.every=2",
        *args,
    ]
    return warm_python.run(cmd, cwd=ROOT, timeout=600)


def _rows(tmp: Path) -> list[dict]:
    return [json.loads(line) for line in (tmp / "results.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def campaign(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every estimator, one seed, 4 updates in one piece: the results file, the plot, the generated configs."""
    tmp = tmp_path_factory.mktemp("compare")
    proc = _run(tmp, "--steps", "4", "--chunk-steps", "0", "--seeds", "1", "--tag", "all")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return tmp


def test_every_estimator_runs_and_appends_one_row(campaign: Path):
    rows = _rows(campaign)
    assert [r["estimator"] for r in rows] == list(ESTIMATORS)
    for row in rows:
        assert row["steps"] == 4 and row["seed"] == 1 and row["chunks"] == 1
        assert [p["updates"] for p in row["curve"]] == [0, 2, 4]  # eval.every=2, and after the last update
        assert row["curve"][0]["train_seconds"] == 0.0
        assert row["curve"][1]["train_seconds"] == pytest.approx(sum(row["step_seconds"][:2]))
        assert row["curve"][2]["train_seconds"] == pytest.approx(sum(row["step_seconds"]))
        assert all(0.0 <= p["accuracy"] <= 1.0 and "format" in p for p in row["curve"])
        assert len(row["step_seconds"]) == 4 and row["load1_mean"] is not None
        assert len(row["samples"]["0"]) == 2 and len(row["samples"]["4"]) == 2  # eval.n_prompts=2
        assert row["commands"] and "train.resume=auto" in row["commands"][0]
        assert "model.mixed_precision=null" in row["commands"][0]  # campaigns run float32, as recorded
    assert (campaign / "plot.png").stat().st_size > 0


def test_each_run_is_the_base_run_with_the_presets_algorithm(campaign: Path):
    configs = campaign / "runs" / "all" / "configs"
    base = load_config(ROOT / "examples" / "real_model" / "grpo_smollm2.yaml")
    for name in ESTIMATORS:
        path = ROOT / "areal_adv" / "presets" / f"{name}.yaml"
        algorithm = yaml.safe_load(path.read_text())["actor"]
        cfg, preset = load_config(configs / f"{name}.yaml"), load_config(path)
        assert {"reward_norm", "adv_norm", "advantage"} <= set(algorithm), name
        for key in algorithm:  # every field the preset sets, with all its sub-fields (no leak from the run)
            assert getattr(cfg.actor, key) == getattr(preset.actor, key), (name, key)
        for key in set(vars(base.actor)) - set(algorithm):  # everything else is the run's
            assert getattr(cfg.actor, key) == getattr(base.actor, key), (name, key)
        assert (cfg.task, cfg.data, cfg.reward, cfg.rollout, cfg.eval, cfg.train.lr) == (
            base.task,
            base.data,
            base.reward,
            base.rollout,
            base.eval,
            base.train.lr,
        ), name
    # the example run itself is the GRPO row: examples/real_model/run.sh trains exactly that
    assert load_config(configs / "grpo.yaml").actor == base.actor


def test_a_finished_campaign_is_skipped_and_the_doc_block_is_rebuilt(campaign: Path):
    proc = _run(campaign, "--steps", "4", "--chunk-steps", "0", "--seeds", "1", "--tag", "all")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "python -m areal_adv.trainer.main" not in proc.stdout  # nothing trained again
    assert len(_rows(campaign)) == len(ESTIMATORS)
    doc = campaign / "page.md"
    doc.write_text("intro\n<!-- compare_estimators:begin -->\nold\n<!-- compare_estimators:end -->\noutro\n")
    proc = _run(campaign, "--report-only", "--tag", "all", "--doc", str(doc))
    assert proc.returncode == 0, proc.stderr[-3000:]
    page = doc.read_text()
    assert page.startswith("intro\n") and page.endswith("outro\n") and "old" not in page
    assert all(f"| {name} | 1 |" in page for name in ESTIMATORS)


def test_a_stopped_part_resumes_from_its_checkpoint_and_equals_the_run_in_one_piece(campaign: Path, tmp_path: Path):
    first = _run(
        tmp_path,
        "--estimators",
        "grpo",
        "--seeds",
        "1",
        "--steps",
        "4",
        "--chunk-steps",
        "2",
        "--stop-after-hours",
        "0",
        "--tag",
        "part",
    )
    assert first.returncode == 0, first.stderr[-3000:]
    assert "--stop-after-hours 0.0: 1 chunks done" in first.stdout
    assert not (tmp_path / "results.jsonl").exists()
    metrics = tmp_path / "runs" / "part" / "grpo" / "seed1" / "metrics.jsonl"
    assert len(metrics.read_text().splitlines()) == 2
    second = _run(
        tmp_path, "--estimators", "grpo", "--seeds", "1", "--steps", "4", "--chunk-steps", "2", "--tag", "part"
    )
    assert second.returncode == 0, second.stderr[-3000:]
    (row,) = _rows(tmp_path)
    assert row["chunks"] == 2 and [r for r in row["commands"] if "train.steps=4" in r]
    # the chunk boundary evaluates the same policy twice; the curve keeps it once
    assert [p["updates"] for p in row["curve"]] == [0, 2, 4]
    chunked = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert [r["step"] for r in chunked] == [0, 1, 2, 3]
    assert not list((tmp_path / "runs" / "part" / "grpo" / "seed1" / "checkpoints").glob("step_*"))
    # chunks change nothing but the clock: the campaign's grpo run (in one piece) has the same metrics and curve
    one = [
        json.loads(line)
        for line in (campaign / "runs" / "all" / "grpo" / "seed1" / "metrics.jsonl").read_text().splitlines()
    ]
    assert [_untimed(r) for r in chunked] == [_untimed(r) for r in one]
    whole = next(r for r in _rows(campaign) if r["estimator"] == "grpo")
    assert [p["accuracy"] for p in whole["curve"]] == [p["accuracy"] for p in row["curve"]]


def _untimed(row: dict) -> dict:
    """A metrics row without its wall-clock and memory fields, and without the evaluations (a chunk adds one)."""
    return {
        k: v
        for k, v in row.items()
        if k not in ("seconds", "elapsed", "tokens_per_s")
        and not k.startswith(("eval/", "time/", "throughput/", "memory/"))
    }


def test_bad_arguments_name_the_option(tmp_path: Path):
    proc = _run(tmp_path, "--estimators", "nope", "--steps", "2")
    assert proc.returncode != 0 and "--estimators: no preset" in proc.stderr
    proc = _run(tmp_path, "--chunk-steps", "1", "--steps", "2")
    assert proc.returncode != 0 and "--chunk-steps: got 1" in proc.stderr


def test_a_run_stopped_after_its_last_chunk_gets_its_row_without_training(tmp_path: Path):
    args = ("--estimators", "rloo", "--seeds", "3", "--steps", "2", "--chunk-steps", "0", "--tag", "late")
    first = _run(tmp_path, *args, "--keep-checkpoints")
    assert first.returncode == 0, first.stderr[-3000:]
    (written,) = _rows(tmp_path)
    (tmp_path / "results.jsonl").unlink()  # as if the script had been stopped between the chunk and its row
    again = _run(tmp_path, *args)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "python -m areal_adv.trainer.main" not in again.stdout  # the checkpoint holds every update: no training
    (row,) = _rows(tmp_path)
    assert row["curve"] == written["curve"] and row["step_seconds"] == written["step_seconds"]
    assert not list((tmp_path / "runs" / "late" / "rloo" / "seed3" / "checkpoints").glob("step_*"))


def test_verify_prefix_reruns_a_rows_first_updates_and_compares_its_evaluations(campaign: Path):
    proc = _run(campaign, "--verify-prefix", "2", "--estimators", "grpo", "rloo", "--seeds", "1", "--tag", "all")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "grpo seed 1 (recorded at commit" in proc.stdout and "at updates [0, 2] reproduced exactly" in proc.stdout
    assert "2 of 2 rows reproduced their first 2 updates' evaluations" in proc.stdout
    assert len(_rows(campaign)) == len(ESTIMATORS)  # nothing appended
    altered = campaign / "altered.jsonl"
    rows = _rows(campaign)
    for row in rows:
        row["curve"][1]["accuracy"] += 0.5
    altered.write_text("".join(json.dumps(r) + "\n" for r in rows))
    proc = _run(
        campaign,
        "--verify-prefix",
        "2",
        "--estimators",
        "grpo",
        "--seeds",
        "1",
        "--tag",
        "all",
        "--results",
        str(altered),
    )
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "grpo seed 1 (recorded at commit" in proc.stdout and ": DIFFERS: update 2: accuracy" in proc.stdout
