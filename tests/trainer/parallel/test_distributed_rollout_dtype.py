"""`rollout.weights_dtype: bfloat16` on 2 gloo ranks (DDP and FSDP2), through the real launcher.

Each rank samples from its own bfloat16 copy, refreshed after every update: the per-rank
checksums of the policy and of the copy agree after each step, the saved policy is the trained
one in float32, and a fresh bfloat16 cast of it has the copy's checksum after the last update.
`rollout_mismatch/*` are logged, finite, on every step.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import tiny_run
import torch
from dist_launch import clean_env, run_bounded, warm_torchrun

from areal_adv.trainer.parallel.checksum import module_checksum
from areal_adv.trainer.parallel.engine import cast_copy

ROOT = Path(__file__).resolve().parents[3]
JOB_TIMEOUT_S = 360  # the 2 CPU cores are shared; a hang still fails
TINY = [
    "train.steps=2",
    *tiny_run.TINY,
    "train.num_threads=1",
    "train.dist_timeout_s=60",
    "train.debug_param_checksum=true",
    "rollout.weights_dtype=bfloat16",
    "actor.use_decoupled_loss=true",
    "actor.behav_imp_weight_cap=5.0",
]


@pytest.mark.parametrize("parallel", ["ddp", "fsdp"])
def test_two_ranks_sample_from_refreshed_bf16_copies(tmp_path: Path, parallel: str) -> None:
    cmd = [
        *warm_torchrun(),
        "--standalone",
        "--nproc_per_node=2",
        "-m",
        "areal_adv.trainer.main",
        "--config",
        str(ROOT / "examples" / "grpo_arith.yaml"),
        *TINY,
        f"output.dir={tmp_path}",
        f"train.parallel={parallel}",
    ]
    [(code, out, err)] = run_bounded([cmd], [clean_env()], JOB_TIMEOUT_S, warm=True)
    assert code == 0, f"torchrun exited with {code}:\n{out[-3000:]}\n{err[-3000:]}"
    run_dir = tmp_path / "grpo_arith" / "trial0"
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1]
    for row in rows:
        for key in ("kl", "k3_kl", "imp_weight_max", "capped_frac"):
            assert math.isfinite(row[f"rollout_mismatch/{key}"]), row
    checksums = [json.loads(line) for line in (run_dir / "param_checksums.jsonl").read_text().splitlines()]
    assert all(c["policy"][0] == c["policy"][1] and c["sampler"][0] == c["sampler"][1] for c in checksums), checksums
    from transformers import AutoModelForCausalLM

    saved = AutoModelForCausalLM.from_pretrained(run_dir / "checkpoints" / "step_2" / "policy", local_files_only=True)
    assert all(p.dtype == torch.float32 for p in saved.parameters())
    assert module_checksum(saved) == checksums[-1]["policy"][0]  # the trained policy, in float32
    # the sampling copy after the last update is a fresh cast of those weights
    assert module_checksum(cast_copy(saved, torch.bfloat16)) == checksums[-1]["sampler"][0]
