"""One process of the 2-process AReaLGRPOTrainer run (launched by test_trl.py with rank variables).

argv: model_dir out_dir result_prefix preset [overrides...]. Each rank trains 2 steps and
saves what it saw (gathered rollouts, its own advantages, TRL's own advantages) to
`<result_prefix>.<rank>.pt`.
"""

from __future__ import annotations

import sys
from dataclasses import asdict
from pathlib import Path

import torch
import trl_setup as ts


def main() -> None:
    model_dir, out_dir, prefix, preset, *overrides = sys.argv[1:]
    trainer = ts.make_trainer(
        model_dir,
        Path(out_dir),
        preset,
        overrides=tuple(overrides),
        per_device_train_batch_size=4,
        token_reward_func=ts.per_token_yes,
    )
    trainer.train()
    records = [{"gathered": asdict(r["gathered"]), "ours": r["ours"], "trl": r["trl"]} for r in trainer.records]
    rank = trainer.accelerator.process_index
    torch.save(
        {
            "records": records,
            "world": trainer.accelerator.num_processes,
            "steps": trainer.state.global_step,
            "distributed_type": str(trainer.accelerator.distributed_type),
        },
        f"{prefix}.{rank}.pt",
    )


if __name__ == "__main__":
    main()
