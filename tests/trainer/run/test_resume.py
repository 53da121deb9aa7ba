"""Exact resume: a run killed with SIGKILL and resumed equals the same run uninterrupted.

The config is PPO with a critic and a KL reference on the multi-turn task, plus
a stage that keeps state across steps (`tests/trainer/stateful_stage.py`), so
every piece of a checkpoint matters: policy and critic weights, both AdamW
states, every RNG, the prompt position, the stage state and the step. Equal
means the same per-step metrics (wall-clock fields aside) and bitwise the same
final weights and optimiser states.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
from checkpoint_state import state_tensors
from dist_launch import clean_env

from areal_adv.api.cli_args import load_config
from areal_adv.trainer.main import main
from areal_adv.trainer.run.loop import Trainer
from areal_adv.trainer.run.metrics import is_wall_clock, read_metrics
from areal_adv.utils.checkpoint_folders import latest_checkpoint

ROOT = Path(__file__).resolve().parents[3]
CONFIG = ROOT / "examples" / "ppo_token_gae.yaml"
STEPS = 6  # three checkpoints (every 2 steps): a resume from the first redoes two saves
TINY = [
    "rollout.batch_size=2",
    "rollout.n_samples=4",
    "model.hidden_size=32",
    "model.num_heads=2",
    "model.intermediate_size=64",
    "output.progress_bar=false",
    "output.plot=false",
    "train.num_threads=1",
    "train.save_every=2",
    "train.keep_last=null",
    f"train.steps={STEPS}",
    "actor.advantage.outcome_reward_shaping={implementation: stateful_stage.running_baseline, kwargs: {decay: 0.5}}",
]
JOB_TIMEOUT_S = 240
#: one reference run (the `reference` fixture) for the module: its tests stay on one pytest-xdist worker (`--dist loadgroup`)
pytestmark = pytest.mark.xdist_group("resume")


def _rows(run_dir: Path) -> list[dict]:
    return [{k: v for k, v in r.items() if not is_wall_clock(k)} for r in read_metrics(run_dir / "metrics.jsonl")]


def _tensors(folder: Path) -> dict[str, torch.Tensor]:
    """Every weight and optimiser tensor of a checkpoint, by name."""
    from safetensors.torch import load_file

    out = {}
    for file in sorted(folder.rglob("*.safetensors")):
        for key, value in load_file(str(file)).items():
            out[f"{file.relative_to(folder)}:{key}"] = value
    out.update(state_tensors(folder))  # policy and critic weights and AdamW states
    return out


def assert_same_run(run_dir: Path, reference: Path) -> None:
    rows, expected = _rows(run_dir), _rows(reference)
    assert [r["step"] for r in rows] == list(range(STEPS))  # no duplicated, no missing step
    assert rows == expected
    mine, theirs = (
        _tensors(run_dir / "checkpoints" / f"step_{STEPS}"),
        _tensors(reference / "checkpoints" / f"step_{STEPS}"),
    )
    assert mine.keys() == theirs.keys() and len(mine) > 10
    different = [k for k in mine if mine[k].dtype != theirs[k].dtype or not torch.equal(mine[k], theirs[k])]
    assert not different, f"not bitwise equal: {different[:5]}"


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The uninterrupted run, in this process."""
    from stateful_stage import running_baseline

    running_baseline.reset()
    out = tmp_path_factory.mktemp("reference")
    result = Trainer(load_config(CONFIG, [*TINY, f"output.dir={out}", "experiment_name=ref"])).run()
    assert result.steps_done == STEPS and running_baseline.calls == STEPS
    return result.run_dir


def _main_cmd(out: Path, *extra: str, script: str | None = None) -> list[str]:
    """The killed run: a separate process (`script` patches something before calling main)."""
    head = (
        [sys.executable, "-c", textwrap.dedent(script)] if script else [sys.executable, "-m", "areal_adv.trainer.main"]
    )
    return [*head, "--config", str(CONFIG), *TINY, f"output.dir={out}", "experiment_name=run", *extra]


def _resume(out: Path, capsys: pytest.CaptureFixture) -> str:
    """`python -m areal_adv.trainer.main ... train.resume=auto`, through `main(argv)` in this process.

    The stage object is reset first, as a new process would have it: only the checkpoint restores it.
    """
    from stateful_stage import running_baseline

    running_baseline.reset()
    capsys.readouterr()
    assert main(["--config", str(CONFIG), *TINY, f"output.dir={out}", "experiment_name=run", "train.resume=auto"]) == 0
    return capsys.readouterr().out


def _kill_after_rows(cmd: list[str], metrics: Path, rows: int) -> None:
    """Start the run and SIGKILL it as soon as `rows` metrics rows exist (wherever it is then)."""
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env=clean_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
    )
    deadline = time.monotonic() + JOB_TIMEOUT_S
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            if metrics.is_file() and len(metrics.read_text().splitlines()) >= rows:
                os.killpg(proc.pid, signal.SIGKILL)
                break
            time.sleep(0.01)
    finally:
        if proc.poll() is None and time.monotonic() >= deadline:
            os.killpg(proc.pid, signal.SIGKILL)
        err = proc.communicate()[1].decode()
    assert proc.returncode == -signal.SIGKILL, f"the run was not killed (exit {proc.returncode}):\n{err[-3000:]}"


def test_sigkill_and_resume_gives_the_uninterrupted_run(
    tmp_path: Path, reference: Path, capsys: pytest.CaptureFixture
) -> None:
    run_dir = tmp_path / "run" / "trial0"
    _kill_after_rows(_main_cmd(tmp_path), run_dir / "metrics.jsonl", rows=3)  # 3 steps before the last save
    last = latest_checkpoint(run_dir / "checkpoints")
    assert last is not None and last.name != f"step_{STEPS}"  # killed mid-run, after at least one checkpoint
    out = _resume(tmp_path, capsys)
    assert f"[areal-adv] resuming from {last} (step {last.name.removeprefix('step_')})\n" in out
    assert f"[areal-adv] run: done, {STEPS}/{STEPS} steps" in out
    assert_same_run(run_dir, reference)
    _check_tensorboard(run_dir, reference)


def _check_tensorboard(run_dir: Path, reference: Path) -> None:
    """TensorBoard events of the resumed run: one value per step (the killed tail purged), the reference's."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir / "tensorboard"))
    events.Reload()
    scalars = events.Scalars("reward_mean")
    assert [e.step for e in scalars] == list(range(STEPS))
    expected = [r["reward_mean"] for r in read_metrics(reference / "metrics.jsonl")]
    assert [e.value for e in scalars] == pytest.approx(expected, abs=1e-6)


_KILL_IN_SAVE = """
import os, signal, sys
from areal_adv.utils import checkpoint_folders as checkpoint
real = checkpoint._fsync_tree
def fsync_tree(folder):
    if folder.name.startswith(".tmp-step_4-"):  # every file of step 4 written, nothing published yet
        os.kill(os.getpid(), signal.SIGKILL)
    return real(folder)
checkpoint._fsync_tree = fsync_tree
from areal_adv.trainer.main import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_kill_during_a_save_resumes_from_the_previous_checkpoint(
    tmp_path: Path, reference: Path, capsys: pytest.CaptureFixture
) -> None:
    run_dir = tmp_path / "run" / "trial0"
    proc = subprocess.run(
        _main_cmd(tmp_path, script=_KILL_IN_SAVE),
        cwd=ROOT,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=JOB_TIMEOUT_S,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-3000:]
    checkpoints = run_dir / "checkpoints"
    assert [p.name for p in checkpoints.iterdir() if p.name.startswith(".tmp-step_4-")]  # the torn save
    assert latest_checkpoint(checkpoints) == checkpoints / "step_2"
    assert [r["step"] for r in read_metrics(run_dir / "metrics.jsonl")] == [0, 1, 2, 3]
    _resume(tmp_path, capsys)
    assert not [p for p in checkpoints.iterdir() if p.name.startswith(".")]  # leftovers cleaned up
    assert_same_run(run_dir, reference)


def test_resume_from_an_older_checkpoint_replaces_the_later_history(
    tmp_path: Path, reference: Path, capsys: pytest.CaptureFixture
) -> None:
    """In process: continue from step 2 of a run that got to 4; rows, checkpoints and events after 2 are redone."""
    from stateful_stage import running_baseline

    running_baseline.reset()
    common = [*TINY, f"output.dir={tmp_path}", "experiment_name=run"]
    first = Trainer(load_config(CONFIG, [*common, "train.steps=4"])).run()
    assert sorted(p.name for p in (first.run_dir / "checkpoints").iterdir()) == ["step_2", "step_4"]
    running_baseline.reset()  # a fresh process would start with a fresh stage: the checkpoint restores it
    older = first.run_dir / "checkpoints" / "step_2"
    capsys.readouterr()
    result = Trainer(load_config(CONFIG, [*common, f"train.resume={older}"])).run()
    assert result.resumed_from == older and result.steps_done == STEPS
    assert f"[areal-adv] resuming from {older} (step 2)\n" in capsys.readouterr().out
    assert sorted(p.name for p in (first.run_dir / "checkpoints").iterdir()) == ["step_2", "step_4", "step_6"]
    assert_same_run(first.run_dir, reference)
    _check_tensorboard(first.run_dir, reference)
