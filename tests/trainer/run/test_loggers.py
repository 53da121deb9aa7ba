"""Metric sinks: TensorBoard events read back with tensorboard's reader, W&B offline, rank 0 only."""

from __future__ import annotations

import math
import time
from pathlib import Path

import pytest
import tiny_run  # noqa: E402

from areal_adv.api.cli_args import load_config
from areal_adv.trainer.run.loggers import open_loggers
from areal_adv.trainer.run.loop import Trainer
from areal_adv.trainer.run.metrics import read_metrics

ROOT = Path(__file__).resolve().parents[3]
DEFAULT = ROOT / "examples" / "grpo_arith.yaml"
TINY = [
    *tiny_run.TINY,
    "train.num_threads=1",
    "train.save_every=2",
]


def _events(folder: Path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    return acc


def test_tensorboard_events_hold_every_metric_of_every_step(tmp_path: Path) -> None:
    result = Trainer(load_config(DEFAULT, [*TINY, "train.steps=3", f"output.dir={tmp_path}"])).run()
    rows = read_metrics(result.metrics_path)
    events = _events(result.run_dir / "tensorboard")
    tags = set(events.Tags()["scalars"])
    numeric = {k for r in rows for k, v in r.items() if k != "step" and isinstance(v, (int, float))}
    assert numeric <= tags and {"reward_mean", "kl", "entropy", "policy_loss", "grad_norm"} <= tags
    for tag in ("reward_mean", "policy_loss", "kl"):
        scalars = events.Scalars(tag)
        assert [e.step for e in scalars] == [0, 1, 2]
        assert [e.value for e in scalars] == pytest.approx([r[tag] for r in rows], rel=1e-6, abs=1e-7)
    text = events.Tensors("config/text_summary")[0].tensor_proto.string_val[0].decode()
    assert "experiment_name: grpo_arith" in text  # the resolved config, as text


def test_loggers_choose_the_sinks_and_only_rank_0_opens_any(tmp_path: Path) -> None:
    cfg = load_config(DEFAULT, [*TINY, "train.steps=2", f"output.dir={tmp_path}", "output.loggers=[tensorboard]"])
    result = Trainer(cfg).run()
    assert not (result.run_dir / "metrics.jsonl").exists() and (result.run_dir / "tensorboard").is_dir()
    assert result.first_reward is not None  # rows still kept in memory for the summary
    off_rank = open_loggers(cfg, tmp_path / "elsewhere", records=[], start_step=0, is_main=False)
    assert off_rank.sinks == [] and not (tmp_path / "elsewhere").exists()
    off_rank.log({"step": 0, "reward_mean": 1.0})
    assert off_rank.records == [{"step": 0, "reward_mean": 1.0}]


def test_non_finite_values_are_logged_as_missing(tmp_path: Path) -> None:
    cfg = load_config(DEFAULT, [*TINY, f"output.dir={tmp_path}"])
    loggers = open_loggers(cfg, tmp_path, records=[], start_step=0, is_main=True)
    loggers.log({"step": 0, "reward_mean": float("nan"), "kl": 0.5})
    loggers.close()
    assert read_metrics(tmp_path / "metrics.jsonl") == [{"step": 0, "reward_mean": None, "kl": 0.5}]
    events = _events(tmp_path / "tensorboard")
    assert "reward_mean" not in events.Tags()["scalars"] and events.Scalars("kl")[0].value == 0.5


def test_a_resumed_tensorboard_file_is_read_after_the_killed_segment_s_file(tmp_path: Path) -> None:
    """A segment started within the second of the previous one still purges its tail.

    The earlier file's name carries a start second no earlier than now and a pid
    that sorts after any real one, so without waiting, the resumed writer's file
    would be read first and the purge would drop nothing.
    """
    from torch.utils.tensorboard import SummaryWriter

    from areal_adv.trainer.run.loggers import TensorBoardSink

    folder = tmp_path / "tensorboard"
    killed = SummaryWriter(log_dir=str(folder))
    for step in range(4):
        killed.add_scalar("reward_mean", 10.0 + step, global_step=step)
    killed.close()
    (written,) = folder.glob("events.out.tfevents.*")
    second = int(time.time()) + 1
    written.rename(folder / f"events.out.tfevents.{second:010d}.host.99999999.0")
    resumed = TensorBoardSink(folder, purge_step=2, config_yaml="")
    for step in (2, 3):
        resumed.log({"step": step, "reward_mean": float(step)})
    resumed.close()
    names = sorted(p.name for p in folder.glob("events.out.tfevents.*"))
    assert names[-1].split(".")[5] != "99999999"  # the resumed file is read last
    scalars = _events(folder).Scalars("reward_mean")
    assert [(e.step, e.value) for e in scalars] == [(0, 10.0), (1, 11.0), (2, 2.0), (3, 3.0)]


@pytest.fixture
def offline_wandb(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    pytest.importorskip("wandb")
    for name, value in (
        ("WANDB_MODE", "offline"),
        ("WANDB_SILENT", "true"),
        ("WANDB_DISABLE_GIT", "true"),
        ("WANDB_CONFIG_DIR", str(tmp_path / "wandb_config")),
        ("WANDB_CACHE_DIR", str(tmp_path / "wandb_cache")),
        ("WANDB_DATA_DIR", str(tmp_path / "wandb_data")),
    ):
        monkeypatch.setenv(name, value)
    yield
    import wandb

    wandb.teardown()  # stop wandb's service process


def test_wandb_offline_run_holds_the_rows_and_a_resume_keeps_the_run_id(tmp_path: Path, offline_wandb) -> None:
    from wandb_records import history_rows

    common = [*TINY, f"output.dir={tmp_path / 'runs'}", "output.loggers=[jsonl,wandb]", "output.wandb_project=t"]
    first = Trainer(load_config(DEFAULT, [*common, "train.steps=2"])).run()
    time.sleep(1.1)  # wandb names offline folders by the second: two segments in one second would share one
    second = Trainer(load_config(DEFAULT, [*common, "train.steps=3", "train.resume=auto"])).run()
    assert second.resumed_from == first.run_dir / "checkpoints" / "step_2"
    import wandb

    wandb.teardown()  # the service process writes the run files; stopping it drains everything to disk
    segments = sorted((first.run_dir / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(segments) == 2
    (id1, rows1), (id2, rows2) = history_rows(segments[0]), history_rows(segments[1])
    run_id = (first.run_dir / "wandb" / "areal_run_id").read_text()
    assert id1 == id2 == run_id
    expected = read_metrics(second.metrics_path)
    assert [r["_step"] for r in rows1] == [0, 1] and [r["_step"] for r in rows2] == [2]
    for got, want in zip(rows1 + rows2, expected):
        for key in ("reward_mean", "policy_loss", "adv_std"):
            assert math.isclose(got[key], want[key], rel_tol=1e-12), key
