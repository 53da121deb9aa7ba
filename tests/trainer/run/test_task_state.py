"""A task's own state (`Task.state_dict`) is in every checkpoint: a resumed run equals the uninterrupted one."""

from __future__ import annotations

from pathlib import Path

import pytest
import tiny_run

from areal_adv.api.cli_args import load_config
from areal_adv.trainer.run.loop import Trainer
from areal_adv.trainer.run.metrics import is_wall_clock, read_metrics
from areal_adv.trainer.run.trainer_state import CheckpointError

TINY = [
    *tiny_run.TINY,
    "train.num_threads=1",
    "train.save_every=2",
    "train.steps=4",
    "task.implementation=plugins.noisy_task.make_noisy_arith",
]


def _rows(run_dir: Path) -> list[dict]:
    return [{k: v for k, v in r.items() if not is_wall_clock(k)} for r in read_metrics(run_dir / "metrics.jsonl")]


def _run(tmp_path: Path, name: str, *extra: str) -> Path:
    cfg = load_config("preset:grpo_arith", [*TINY, f"output.dir={tmp_path}", f"experiment_name={name}", *extra])
    return Trainer(cfg).run().run_dir


@pytest.mark.parametrize("keeps_state", [True, False])
def test_a_resumed_run_draws_the_task_s_stream_where_it_stopped(tmp_path: Path, keeps_state: bool) -> None:
    kwargs = f"task.kwargs={{flip: 0.5, keeps_state: {str(keeps_state).lower()}}}"
    reference = _rows(_run(tmp_path, "whole", kwargs))
    first = _run(tmp_path, "parts", kwargs, "train.steps=2")
    resumed = _run(tmp_path, "parts", kwargs, f"train.resume={first / 'checkpoints' / 'step_2'}")
    rows = _rows(resumed)
    assert rows[:2] == reference[:2]
    if keeps_state:
        assert rows == reference
    else:  # the stream restarts at the resume: the noisy rewards of steps 2-3 differ (a check the test can fail)
        assert [r["reward_mean"] for r in rows[2:]] != [r["reward_mean"] for r in reference[2:]]


def test_a_task_with_state_refuses_a_checkpoint_without_it(tmp_path: Path) -> None:
    first = _run(tmp_path, "stateless", "task.kwargs={keeps_state: false}", "train.steps=2")
    with pytest.raises(CheckpointError, match=r"holds no state of task NoisyArithWithState, which keeps one"):
        _run(
            tmp_path, "stateless", "task.kwargs={keeps_state: true}", f"train.resume={first / 'checkpoints' / 'step_2'}"
        )
