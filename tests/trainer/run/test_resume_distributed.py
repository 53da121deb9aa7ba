"""A 2-rank torchrun job killed with SIGKILL and resumed equals the same job uninterrupted.

For DDP and FSDP2 (`train.parallel`). Both ranks restore their own RNG states (each rank samples its own episodes),
the shared prompt position, the replicas' weights and optimiser states; rank 0
alone writes the checkpoint, the metrics and the TensorBoard events.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from dist_launch import clean_env, descendants, run_bounded

from areal_adv.trainer.run.metrics import is_wall_clock, read_metrics
from areal_adv.utils.checkpoint_folders import latest_checkpoint

ROOT = Path(__file__).resolve().parents[3]
STEPS = 6
TINY = [
    "rollout.batch_size=2",
    "rollout.n_samples=4",
    "model.hidden_size=32",
    "model.num_heads=2",
    "model.intermediate_size=64",
    "output.progress_bar=false",
    "output.plot=false",
    "train.num_threads=1",
    "train.dist_timeout_s=60",
    "train.save_every=2",
    "train.keep_last=null",
    f"train.steps={STEPS}",
]
JOB_TIMEOUT_S = 360  # shared CPUs; FSDP jobs are slower; a hang still fails


def _torchrun(out: Path, name: str, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=2",
        "-m",
        "areal_adv.trainer.main",
        "--config",
        str(ROOT / "examples" / "grpo_arith.yaml"),
        *TINY,
        f"output.dir={out}",
        f"experiment_name={name}",
        *extra,
    ]


def _run(cmd: list[str]) -> str:
    [(code, out, err)] = run_bounded([cmd], [clean_env()], JOB_TIMEOUT_S)
    assert code == 0, f"torchrun exited with {code}:\n{out[-3000:]}\n{err[-3000:]}"
    return out + err


def _kill_job_after_rows(cmd: list[str], metrics: Path, rows: int) -> None:
    """SIGKILL torchrun and both ranks (one process group) once `rows` metrics rows exist."""
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env=clean_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    deadline = time.monotonic() + JOB_TIMEOUT_S
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            if metrics.is_file() and len(metrics.read_text().splitlines()) >= rows:
                break
            time.sleep(0.01)
        killed = proc.poll() is None
    finally:
        if proc.poll() is None:
            workers = descendants(proc.pid)  # torchrun starts each rank in a session of its own
            os.killpg(proc.pid, signal.SIGKILL)
            for pid in workers:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        proc.wait()
    assert killed, f"the job ended (exit {proc.returncode}) before it could be killed"


def _final_tensors(run_dir: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    folder = run_dir / "checkpoints" / f"step_{STEPS}"
    out = {f"policy:{k}": v for k, v in load_file(str(folder / "policy" / "model.safetensors")).items()}
    for pid, slots in torch.load(folder / "optimizer.pt", weights_only=True)["state"].items():
        out.update({f"adam:{pid}:{slot}": v for slot, v in slots.items()})
    return out


def _rows(run_dir: Path) -> list[dict]:
    return [{k: v for k, v in r.items() if not is_wall_clock(k)} for r in read_metrics(run_dir / "metrics.jsonl")]


@pytest.mark.parametrize("parallel", ["ddp", "fsdp"])
def test_two_rank_job_resumes_exactly(tmp_path: Path, parallel: str) -> None:
    mode = f"train.parallel={parallel}"
    _run(_torchrun(tmp_path, "ref", mode))
    reference = tmp_path / "ref" / "trial0"
    run_dir = tmp_path / "run" / "trial0"
    _kill_job_after_rows(_torchrun(tmp_path, "run", mode), run_dir / "metrics.jsonl", rows=3)
    last = latest_checkpoint(run_dir / "checkpoints")
    assert last is not None and last.name != f"step_{STEPS}"
    log = _run(_torchrun(tmp_path, "run", mode, "train.resume=auto"))
    assert log.count(f"[areal-adv] run: done, {STEPS}/{STEPS} steps") == 1  # rank 0 reports, once
    rows = _rows(run_dir)
    assert [r["step"] for r in rows] == list(range(STEPS)) and rows == _rows(reference)
    mine, theirs = _final_tensors(run_dir), _final_tensors(reference)
    assert mine.keys() == theirs.keys()
    assert all(torch.equal(mine[k], theirs[k]) for k in mine), "final weights or Adam states differ"
    assert len(list((run_dir / "tensorboard").glob("events.out.tfevents.*"))) == 2  # rank 0 only: one per segment
