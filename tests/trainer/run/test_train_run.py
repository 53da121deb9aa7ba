"""Run-level behaviour: outputs, Ctrl-C, reproducibility, the CLI and checkpoints."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import torch
import warm_python

from areal_adv.api.cli_args import load_config
from areal_adv.trainer.run.loop import Trainer
from areal_adv.trainer.run.metrics import read_metrics

ROOT = Path(__file__).resolve().parents[3]
DEFAULT = ROOT / "examples" / "grpo_arith.yaml"
TINY = [
    "rollout.batch_size=2",
    "rollout.n_samples=4",
    "model.hidden_size=32",
    "model.num_heads=2",
    "model.intermediate_size=64",
    "output.progress_bar=false",
]


def _trainer(tmp_path: Path, *extra: str, config: Path = DEFAULT) -> Trainer:
    return Trainer(load_config(config, [*TINY, f"output.dir={tmp_path}", *extra]))


def test_ctrl_c_keeps_metrics_and_plot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trainer = _trainer(tmp_path, "train.steps=50")
    real_step = trainer.step
    calls = {"n": 0}

    def step(i: int):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return real_step(i)

    monkeypatch.setattr(trainer, "step", step)
    result = trainer.run()
    assert result.interrupted and result.steps_done == 2
    assert [r["step"] for r in read_metrics(result.metrics_path)] == [0, 1]
    assert result.plot_path is not None and result.plot_path.is_file()
    assert "interrupted, 2/50 steps" in result.summary("x", 50)


def _rewards(run_dir: Path) -> list[tuple]:
    return [(r["reward_mean"], r["adv_mean"], r["policy_loss"]) for r in read_metrics(run_dir / "metrics.jsonl")]


def test_same_seed_same_run(tmp_path: Path) -> None:
    a = _trainer(tmp_path / "a", "train.steps=3", "seed=7").run()
    b = _trainer(tmp_path / "b", "train.steps=3", "seed=7").run()
    c = _trainer(tmp_path / "c", "train.steps=3", "seed=8").run()
    assert _rewards(a.run_dir) == _rewards(b.run_dir)
    assert _rewards(a.run_dir) != _rewards(c.run_dir)


def test_decoupled_loss_and_per_turn_export_run(tmp_path: Path) -> None:
    trainer = _trainer(
        tmp_path,
        "train.steps=1",
        "actor.use_decoupled_loss=true",
        "actor.recompute_logprob=true",
        "actor.behav_imp_weight_cap=5.0",
        "actor.c_clip=3.0",
        "rollout.export=per_turn",
        config=ROOT / "examples" / "ppo_turn_gae_guess.yaml",
    )
    out = trainer.step(0)
    assert out.batch["prox_logp"].shape == out.batch["input_ids"].shape
    assert out.metrics["policy_loss"] is not None


def test_checkpoint_policy_loads_through_model_path(tmp_path: Path) -> None:
    trainer = _trainer(tmp_path, "train.steps=1", "experiment_name=ckpt")
    first, first_vocab = trainer.run(), trainer.tokenizer.get_vocab()
    ckpt = first.checkpoint / "policy"
    assert first.checkpoint == first.run_dir / "checkpoints" / "step_1"
    assert (ckpt / "config.json").is_file() and (ckpt / "tokenizer.json").is_file()
    overrides = [o for o in TINY if not o.startswith("model.")]
    cfg = load_config(
        DEFAULT,
        [
            *overrides,
            f"output.dir={tmp_path}",
            "train.steps=1",
            f"model.path={ckpt}",
            "experiment_name=resumed",
            "critic.enabled=true",
        ],
    )
    second = Trainer(cfg)
    second.run()
    assert second.policy.config.hidden_size == 32
    assert second.tokenizer.get_vocab() == first_vocab  # the checkpoint's own tokenizer
    assert torch.equal(second.reference.lm_head.weight, first_policy_weight(ckpt))


def first_policy_weight(folder: Path) -> torch.Tensor:
    from safetensors.torch import load_file

    return load_file(str(folder / "model.safetensors"))["lm_head.weight"]


def test_cli_entry_point_runs_the_default_config(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = warm_python.run(
        [
            sys.executable,
            "-m",
            "areal_adv.trainer.main",
            "--config",
            str(DEFAULT),
            *TINY,
            "train.steps=2",
            f"output.dir={tmp_path}",
            "experiment_name=cli",
        ],
        cwd=ROOT,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "[areal-adv] cli: done, 2/2 steps" in proc.stdout
    lines = (tmp_path / "cli" / "trial0" / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 2 and json.loads(lines[-1])["step"] == 1
    assert (tmp_path / "cli" / "trial0" / "curves.png").is_file()


def test_greedy_baseline_adds_one_reward_baseline_per_row(tmp_path: Path) -> None:
    trainer = _trainer(tmp_path, "train.steps=1", "rollout.greedy_baseline=true")
    dicts, _ = trainer.rollout()
    for group in dicts:
        base = group["reward_baselines"]
        assert base.shape == group["rewards"].shape and base.dtype == torch.float32
        assert len(set(base.tolist())) == 1 and base[0].item() in (0.0, 1.0)


def test_the_summary_compares_disjoint_reward_windows() -> None:
    from areal_adv.trainer.run.loop import RunResult
    from areal_adv.trainer.run.metrics import reward_windows

    assert [reward_windows(n) for n in (0, 1, 2, 3, 6, 14, 15, 500)] == [
        (0, 0), (1, 0), (1, 1), (1, 2), (2, 4), (4, 10), (5, 10), (5, 10)
    ]  # fmt: skip

    def line(first: int, last: int) -> str:
        result = RunResult(Path("r"), Path("r/metrics.jsonl"), None, 3, False, 1.0, 0.25, 0.5, first, last)
        return result.summary("x", 3)

    assert "| reward first step 0.250 -> last 2 steps 0.500 |" in line(1, 2)
    assert "| reward first 5 steps 0.250 -> last 10 steps 0.500 |" in line(5, 10)  # what bench_threads.py reads
    assert "| reward 0.250 (one step) |" in line(1, 0)


def test_a_run_without_checkpoints_says_so_before_it_trains(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("WARNING", logger="areal_adv.trainer"):
        result = _trainer(tmp_path, "train.steps=3", "train.save_every=0").run()
    assert "train.save_every=0: this run writes no checkpoint, so it cannot be resumed" in caplog.text
    assert "| reward first step " in result.summary("x", 3) and result.checkpoint is None
    caplog.clear()
    with caplog.at_level("WARNING", logger="areal_adv.trainer"):
        _trainer(tmp_path / "saved", "train.steps=1", "train.save_every=1")
    assert "save_every" not in caplog.text
