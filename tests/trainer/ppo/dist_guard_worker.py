"""One gloo rank for the output-guard test: rank 1 holds critic values near the float32 limit.

    RANK=r WORLD_SIZE=2 MASTER_ADDR=... MASTER_PORT=... python dist_guard_worker.py

Batch-level advantage normalisation all-reduces, so rank 1's overflow reaches
rank 0's statistics; rank 0's own inputs are harmless. Each rank prints what
happened: the error it raised, or that it returned.
"""

from __future__ import annotations

import os
import sys
from datetime import timedelta

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
sys.path.insert(0, os.path.dirname(os.path.dirname(_HERE)))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from batch_factory import make_batch  # noqa: E402

from areal_adv.api.cli_args import NormConfig, PPOActorConfig  # noqa: E402
from areal_adv.trainer.ppo.actor import PPOActor  # noqa: E402


def main() -> int:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=timedelta(seconds=60))
    rank = dist.get_rank()
    batch, meta = make_batch(10 + rank, drop=("token_rewards",))
    if rank == 1:
        batch["values"] = torch.where(batch["values"] >= 0, 3e38, -3e38)
    try:
        out = PPOActor(PPOActorConfig(kl_ctl=0.1, adv_norm=NormConfig())).compute_advantages(batch, meta)
        finite = all(
            bool(torch.isfinite(v).all()) for v in out.values() if torch.is_tensor(v) and v.is_floating_point()
        )
        print(f"rank {rank}: returned, all finite: {finite}", flush=True)
    except Exception as exc:
        print(f"rank {rank}: raised {type(exc).__name__}: {exc}", flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
