"""One rank of the stage-state test: `python -m torch.distributed.run ... state_worker.py OUT_DIR`.

For every case in `state_cases` it runs the steps on its share of each step's
prompt groups, and saves its outputs, its stage states and their fingerprints.
"""

from __future__ import annotations

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(_HERE)))
for _path in (_ROOT, _HERE):
    if _path not in sys.path:
        sys.path.insert(0, _path)

import torch  # noqa: E402
from state_cases import CASES, STEPS, fingerprints, make_config, rank_share, step_groups, to_cpu  # noqa: E402

from areal_adv.trainer.parallel.distributed import destroy, init_distributed  # noqa: E402
from areal_adv.trainer.ppo.actor import PPOActor  # noqa: E402
from areal_adv.utils.data import concat_batch  # noqa: E402


def main(out_dir: str) -> int:
    torch.set_num_threads(1)
    ctx = init_distributed(timeout=60.0)
    try:
        results = {}
        for name in CASES:
            actor = PPOActor(make_config(name))
            steps = []
            for step in range(STEPS):
                batch, meta = concat_batch(rank_share(step_groups(name, step), ctx.rank, ctx.world_size))
                out = actor.compute_advantages(batch, meta)
                steps.append({"out": to_cpu(out), "fingerprints": fingerprints(actor)})
            results[name] = {"steps": steps, "states": {k: s.state_dict() for k, s in actor.stage_states.items()}}
        torch.save(results, os.path.join(out_dir, f"rank{ctx.rank}.pt"))
    finally:
        destroy(ctx)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
