"""The rollout's sampling alone: SmolLM2-135M, 4 prompts x 4 samples x 16 tokens, as the vs-TRL step samples.

Usage:
    .venv/bin/python bench/bench_decode.py --model runs/models/SmolLM2-135M-Instruct
    .venv/bin/python bench/bench_decode.py --model runs/models/SmolLM2-135M-Instruct --profile

`sample_continuations` (transformers `generate` with the shared-prefix cache) on 16
rows of 46 random prompt tokens, 16 new tokens each (no stop token among them), in
float32 with 1 and 2 threads and under bfloat16 autocast with 2 threads. Each
configuration gets one warm-up and `--reps` timed calls in this process. `--profile`
adds torch.profiler's table of the float32 2-thread call (self CPU time by operator).
Results and the command go in docs/performance.md.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch: idle OpenMP threads sleep

import torch
from bench_threads import pressure  # the first line of /proc/pressure/cpu
from transformers import AutoModelForCausalLM

from areal_adv.trainer.lm.sampling import sample_continuations


def contexts(n_prompts: int = 4, n_samples: int = 4, length: int = 46) -> list[list[int]]:
    gen = torch.Generator().manual_seed(0)
    prompts = [[int(t) for t in torch.randint(10, 40000, (length,), generator=gen)] for _ in range(n_prompts)]
    return [p for p in prompts for _ in range(n_samples)]


def timed(model: torch.nn.Module, rows: list[list[int]], autocast: bool) -> float:
    scope = torch.autocast("cpu", dtype=torch.bfloat16) if autocast else contextlib.nullcontext()
    began = time.perf_counter()
    with scope:
        out = sample_continuations(
            model,
            rows,
            [16] * len(rows),
            frozenset(),
            temperature=1.0,
            pad_id=0,
            generator=torch.Generator().manual_seed(1),
        )
    assert all(len(c.token_ids) == 16 for c in out)
    return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="the converted SmolLM2-135M-Instruct folder")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32, attn_implementation="sdpa")
    rows = contexts()
    print(f"cpu pressure before: {pressure()}")
    for threads, autocast in ((1, False), (2, False), (2, True)):
        torch.set_num_threads(threads)
        timed(model, rows, autocast)
        times = [timed(model, rows, autocast) for _ in range(args.reps)]
        name = "bf16 autocast" if autocast else "float32"
        print(f"{name:13s} {threads} thread(s): " + " ".join(f"{t:.3f}" for t in times) + " s per call")
    print(f"cpu pressure after:  {pressure()}")
    if args.profile:
        from torch.profiler import ProfilerActivity, profile

        torch.set_num_threads(2)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            timed(model, rows, False)
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=8))


if __name__ == "__main__":
    main()
