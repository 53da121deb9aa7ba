"""A 2-rank torchrun job killed with SIGKILL and resumed equals the same job uninterrupted; its checkpoints resume
at another world size and under the other engine.

For DDP and FSDP2 (`train.parallel`). Both ranks restore their own RNG states (each rank samples its own episodes),
the shared prompt position, the replicas' weights and optimiser states; every rank writes its shard of the
weights and AdamW states (a torch.distributed.checkpoint folder), rank 0 alone the rest of the checkpoint, the
metrics and the TensorBoard events.

The uninterrupted job's checkpoint at step 4 then resumes to step 6 elsewhere: the DDP job's in one process
(whose final checkpoint then resumes as a 2-rank FSDP2 job to step 8), the FSDP2 job's as a 2-rank DDP job. Steps 4 and 5 are logged once, after the 4 rows of the checkpoint. The
weights and AdamW states a process loads are those saved (checked bit for bit in one process for both engines'
checkpoints); the sampling after that is the new world size's own (its per-rank RNGs start afresh).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch
import warm_python
from checkpoint_state import engine_tensors, state_tensors
from dist_launch import clean_env, kill_tree, run_bounded, warm_torchrun

from areal_adv.api.cli_args import load_config
from areal_adv.trainer.run.loop import Trainer
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
        *warm_torchrun(),
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
    [(code, out, err)] = run_bounded([cmd], [clean_env()], JOB_TIMEOUT_S, warm=True)
    assert code == 0, f"torchrun exited with {code}:\n{out[-3000:]}\n{err[-3000:]}"
    return out + err


def _kill_job_after_rows(cmd: list[str], metrics: Path, rows: int) -> None:
    """SIGKILL torchrun and both ranks (one process group) once `rows` metrics rows exist."""
    proc = warm_python.start(cmd, cwd=ROOT, env=clean_env(), new_session=True)
    deadline = time.monotonic() + JOB_TIMEOUT_S
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            if metrics.is_file() and len(metrics.read_text().splitlines()) >= rows:
                break
            time.sleep(0.01)
        killed = proc.poll() is None
    finally:
        kill_tree(proc)  # torchrun starts each rank in a session of its own
    assert killed, f"the job ended (exit {proc.returncode}) before it could be killed"


def _final_tensors(run_dir: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    folder = run_dir / "checkpoints" / f"step_{STEPS}"
    out = {f"policy:{k}": v for k, v in load_file(str(folder / "policy" / "model.safetensors")).items()}
    return {**out, **state_tensors(folder)}


def _assert_dcp_folder(checkpoint: Path) -> None:
    """Each rank's shard and the `.metadata` describing them: a torch.distributed.checkpoint folder."""
    state = checkpoint / "state"
    assert (state / ".metadata").is_file(), sorted(p.name for p in checkpoint.iterdir())
    assert sorted(p.name for p in state.glob("*.distcp")) == ["__0_0.distcp", "__1_0.distcp"]
    assert not (checkpoint / "optimizer.pt").exists()


def _loads_exactly_in_one_process(tmp_path: Path, checkpoint: Path) -> None:
    """A 1-process trainer resumed from a 2-rank checkpoint holds the saved weights and AdamW states bit for bit."""
    step = int(checkpoint.name.removeprefix("step_"))
    overrides = [o for o in TINY if not o.startswith("train.steps=")]
    cfg = load_config(
        ROOT / "examples" / "grpo_arith.yaml",
        [
            *overrides,
            f"train.steps={step}",
            f"output.dir={tmp_path}",
            "experiment_name=loaded",
            f"train.resume={checkpoint}",
        ],
    )
    trainer = Trainer(cfg)
    assert trainer.run().steps_done == step  # restored, nothing left to run
    saved, live = state_tensors(checkpoint), engine_tensors(trainer.engine, "policy")
    assert saved.keys() == live.keys() and len(saved) > 10
    assert all(torch.equal(saved[k], live[k]) for k in saved), "loaded weights or AdamW states differ"
    assert all(
        torch.equal(v, trainer.policy.state_dict()[k.removeprefix("policy.model.")])
        for k, v in saved.items()
        if k.startswith("policy.model.")
    )  # the module that samples holds them too


def _resumed_to_six(run_dir: Path, reference: Path) -> None:
    """Steps 0-3 are the checkpoint's rows, steps 4 and 5 were run once each by the resumed job."""
    rows = _rows(run_dir)
    assert [r["step"] for r in rows] == list(range(STEPS))
    assert rows[:4] == _rows(reference)[:4]
    assert latest_checkpoint(run_dir / "checkpoints") == run_dir / "checkpoints" / f"step_{STEPS}"


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
    for folder in (reference / "checkpoints").iterdir():
        _assert_dcp_folder(folder)

    step4 = reference / "checkpoints" / "step_4"
    _loads_exactly_in_one_process(tmp_path / "loaded", step4)
    if parallel == "ddp":  # 2 ranks -> 1 process
        resumed = Trainer(
            load_config(
                ROOT / "examples" / "grpo_arith.yaml",
                [*TINY, f"output.dir={tmp_path}", "experiment_name=one", f"train.resume={step4}"],
            )
        ).run()
        assert resumed.steps_done == STEPS
        _resumed_to_six(resumed.run_dir, reference)
        # and back: the 1-process checkpoint (fused AdamW, plain tensors) resumed as a 2-rank FSDP2 job
        one = resumed.run_dir / "checkpoints" / f"step_{STEPS}"
        more = STEPS + 2
        log = _run(_torchrun(tmp_path, "as_fsdp", "train.parallel=fsdp", f"train.resume={one}", f"train.steps={more}"))
        assert log.count(f"[areal-adv] as_fsdp: done, {more}/{more} steps") == 1
        rows = _rows(tmp_path / "as_fsdp" / "trial0")
        assert [r["step"] for r in rows] == list(range(more)) and rows[:STEPS] == _rows(resumed.run_dir)
        _assert_dcp_folder(tmp_path / "as_fsdp" / "trial0" / "checkpoints" / f"step_{more}")
    else:  # FSDP2 -> DDP, 2 ranks
        log = _run(_torchrun(tmp_path, "as_ddp", "train.parallel=ddp", f"train.resume={step4}"))
        assert log.count(f"[areal-adv] as_ddp: done, {STEPS}/{STEPS} steps") == 1
        _resumed_to_six(tmp_path / "as_ddp" / "trial0", reference)
