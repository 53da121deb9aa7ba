"""One gloo rank for the call-time agreement test: an outcome stage raises on rank 1 only, at the first call.

    RANK=r WORLD_SIZE=2 MASTER_ADDR=... MASTER_PORT=... python dist_agreement_worker.py AFTER

No trainer: `PPOActor.compute_advantages` under a bare process group (gloo, a
30 s timeout), batch-level reward normalisation, so rank 0's first collective is
the normalisation all-reduce that rank 1 never reaches. Each rank catches what
the call raises and prints it, then does what a library user might do after
the error (`AFTER`): `barrier` (then a retry of the same call, which succeeds),
or `exit` (rank 1 leaves at once). Every line carries the seconds since the call.
"""

from __future__ import annotations

import os
import sys
import time
from datetime import timedelta

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
sys.path.insert(0, os.path.dirname(os.path.dirname(_HERE)))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from areal_adv.trainer.ppo.advantage import OutcomeResult  # noqa: E402

_CALLS: list[int] = []


def fail_first_call_on_rank1(inputs):
    """An outcome-shaping plugin that raises on rank 1 at its first call (a bad batch only that rank got)."""
    _CALLS.append(1)
    if os.environ.get("RANK") == "1" and len(_CALLS) == 1:
        raise ValueError("simulated stage failure on rank 1")
    return OutcomeResult(rewards=inputs.data["rewards"].float())


def main() -> int:
    from batch_factory import make_batch

    from areal_adv.api.cli_args import NormConfig, PPOActorConfig
    from areal_adv.trainer.ppo.actor import PPOActor

    after = sys.argv[1]
    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=timedelta(seconds=30))
    rank = dist.get_rank()
    config = PPOActorConfig(
        reward_norm=NormConfig(mean_level="batch", std_level="batch"),
        advantage={"outcome_reward_shaping": {"implementation": "dist_agreement_worker.fail_first_call_on_rank1"}},
    )
    actor = PPOActor(config)
    batch, meta = make_batch(20 + rank, drop=("token_rewards",))
    start = time.monotonic()
    try:
        actor.compute_advantages(batch, meta)
        print(f"rank {rank}: returned after {time.monotonic() - start:.2f} s", flush=True)
    except Exception as exc:
        print(f"rank {rank}: raised after {time.monotonic() - start:.2f} s: {type(exc).__name__}: {exc}", flush=True)
    if after == "exit":
        os._exit(0)
    dist.barrier()
    out = actor.compute_advantages(batch, meta)
    print(f"rank {rank}: retry returned {sorted(out)[:2]} after {time.monotonic() - start:.2f} s", flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
