"""`areal.trainer.main` with the arithmetic task's reward function raising on rank 0 (at call time).

    torchrun --nproc_per_node=2 tests/trainer/dist_failing_main.py --config examples/grpo_arith.yaml ...

Until reward-function plugins exist, the task's own scorer (`arith_reward`) is
patched here; everything else is the real entry point under torchrun.
"""

from __future__ import annotations

import os
import sys

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

import areal.trainer.tasks.arith as arith  # noqa: E402

_real_reward = arith.arith_reward


def reward_failing_on_rank0(response_tokens, answer, eos):
    if os.environ.get("RANK") == "0":
        raise ZeroDivisionError("simulated reward-function failure on rank 0")
    return _real_reward(response_tokens, answer, eos)


arith.arith_reward = reward_failing_on_rank0

if __name__ == "__main__":
    from torch.distributed.elastic.multiprocessing.errors import record

    from areal.trainer.main import main

    sys.exit(record(main)())
