"""One data-parallel rank for the distributed tests; run under torchrun or with RANK/WORLD_SIZE set.

    python tests/trainer/dist_worker.py advantages OUT_DIR   # every case in dist_cases, outputs -> OUT_DIR
    python tests/trainer/dist_worker.py plugin               # PPOActor with dist_rank_plugin (fails on rank 1)

Each rank builds its actor from the serialised config (as a remote worker
would), takes its whole groups with `shard_groups`, concatenates them and
computes advantages; the parent compares with the 1-process result.
"""

from __future__ import annotations

import json
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.dirname(os.path.dirname(_HERE))
for _path in (_ROOT, _HERE):
    if _path not in sys.path:
        sys.path.insert(0, _path)

import torch  # noqa: E402

from areal_adv.api.cli_args import PPOActorConfig, actor_config_from_dict, config_to_dict  # noqa: E402
from areal_adv.trainer.parallel.distributed import (  # noqa: E402
    DistContext,
    assign_groups_to_ranks,
    barrier,
    destroy,
    group_token_counts,
    init_distributed,
    reduce_metrics,
    shard_groups,
)
from areal_adv.trainer.ppo.actor import PPOActor  # noqa: E402
from areal_adv.utils.data import concat_batch  # noqa: E402

COLLECTIVE_TIMEOUT_S = 60.0


def shipped(config: PPOActorConfig) -> PPOActorConfig:
    """The config as a remote worker receives it: serialised to JSON and rebuilt."""
    return actor_config_from_dict(json.loads(json.dumps(config_to_dict(config))))


def run_advantages(ctx: DistContext, out_dir: str) -> None:
    from dist_cases import CASES, OUT_KEYS

    results: dict[str, object] = {}
    tokens = 0
    for name, case in CASES.items():
        groups = case.make_groups()
        mine = shard_groups(groups, ctx.rank, ctx.world_size)
        indices = assign_groups_to_ranks(group_token_counts(groups), ctx.world_size)[ctx.rank]
        batch, meta = concat_batch(mine)
        out = PPOActor(shipped(case.make_config())).compute_advantages(batch, meta)
        results[name] = {"groups": indices, "out": {k: out[k] for k in OUT_KEYS if out.get(k) is not None}}
        tokens += int(batch["attention_mask"].sum())
    # rank r reports metric "loss" = r + 1 with weight = its tokens; "only_rank0" exists on rank 0 only
    metrics = {"loss": float(ctx.rank + 1)}
    if ctx.rank == 0:
        metrics["only_rank0"] = 7.0
    results["_metrics"] = {"tokens": tokens, "reduced": reduce_metrics(metrics, ctx, weights=float(tokens))}
    barrier(ctx)
    torch.save(results, os.path.join(out_dir, f"rank{ctx.rank}.pt"))


def run_plugin() -> None:
    config = PPOActorConfig(advantage={"outcome_reward_shaping": {"implementation": "dist_rank_plugin.halve"}})
    PPOActor(shipped(config))
    print(f"rank {os.environ.get('RANK')}: actor initialised", flush=True)


def main(argv: list[str]) -> int:
    torch.set_num_threads(1)
    ctx = init_distributed(timeout=COLLECTIVE_TIMEOUT_S)
    try:
        if argv[0] == "advantages":
            run_advantages(ctx, argv[1])
        elif argv[0] == "plugin":
            run_plugin()
        else:
            raise SystemExit(f"unknown mode {argv[0]!r}")
    finally:
        destroy(ctx)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
