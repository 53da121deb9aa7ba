"""Time per training step with rollouts from transformers `generate` vs the former private loop.

Usage:
    .venv/bin/python -m bench.peers.bench_sampling                     # default run (examples/grpo_arith.yaml)
    .venv/bin/python -m bench.peers.bench_sampling --config examples/ppo_turn_gae_guess.yaml --steps 40

One `Trainer` per sampler is built from the same config (same seed, so the same
initial weights and prompts); the two then train side by side in this process,
alternating one step each, so machine load hits both alike. The private loop
(bench/peers/reference_sampler.py) is swapped in for the rollout's
`sample_continuations`. Reported: median and best time per whole step and per
rollout, and the ratio loop / generate (> 1: generate is faster). Results go in
docs/performance.md.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch

import areal_adv.trainer.rollout.episodes as rollout_module
from areal_adv.api.cli_args import load_config
from areal_adv.trainer.lm.sampling import sample_continuations
from areal_adv.trainer.run.loop import Trainer
from bench.peers.reference_sampler import loop_sample_continuations

ROOT = Path(__file__).resolve().parents[2]

SAMPLERS = {"generate": sample_continuations, "loop": loop_sample_continuations}


def timed_step(trainer: Trainer, sampler: str, step: int) -> tuple[float, float]:
    """(rollout seconds, whole-step seconds) of one training step with `sampler` behind the rollout."""
    rollout_module.sample_continuations = SAMPLERS[sampler]
    original = trainer.rollout
    spent: list[float] = []

    def rollout():
        start = time.perf_counter()
        out = original()
        spent.append(time.perf_counter() - start)
        return out

    trainer.rollout = rollout
    start = time.perf_counter()
    trainer.step(step)
    total = time.perf_counter() - start
    trainer.rollout = original
    return spent[0], total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", default=str(ROOT / "examples" / "grpo_arith.yaml"))
    parser.add_argument("--steps", type=int, default=60, help="steps per sampler (after --warmup)")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as out:
        cfg = load_config(args.config, ["output.progress_bar=false", f"output.dir={out}", *args.overrides])
        trainers = {name: Trainer(cfg) for name in SAMPLERS}
        times: dict[str, list[tuple[float, float]]] = {name: [] for name in SAMPLERS}
        for step in range(args.warmup + args.steps):
            for name, trainer in trainers.items():
                result = timed_step(trainer, name, step)
                if step >= args.warmup:
                    times[name].append(result)
    print(
        f"config {args.config} {' '.join(args.overrides)} | torch {torch.__version__}, train.num_threads="
        f"{cfg.train.num_threads} (torch reports {torch.get_num_threads()} after the run) | {args.steps} steps "
        f"per sampler after {args.warmup} warm-up"
    )
    medians = {}
    for name, rows in times.items():
        roll, step = [r for r, _ in rows], [s for _, s in rows]
        medians[name] = (statistics.median(roll), statistics.median(step))
        print(
            f"{name:>8}: step median {1e3 * medians[name][1]:7.1f} ms (best {1e3 * min(step):6.1f}) | "
            f"rollout median {1e3 * medians[name][0]:7.1f} ms (best {1e3 * min(roll):6.1f})"
        )
    print(
        f"loop / generate: step {medians['loop'][1] / medians['generate'][1]:.2f}x, "
        f"rollout {medians['loop'][0] / medians['generate'][0]:.2f}x"
    )


if __name__ == "__main__":
    main()
