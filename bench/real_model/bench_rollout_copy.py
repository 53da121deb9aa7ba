"""Sampling from the bfloat16 copy (`rollout.weights_dtype`) against float32: time and mismatch on SmolLM2-135M.

Usage:
    .venv/bin/python -m bench.real_model.bench_rollout_copy --model runs/models/SmolLM2-135M-Instruct
    .venv/bin/python -m bench.real_model.bench_rollout_copy --model runs/models/SmolLM2-135M-Instruct --results bench/results/rollout_copy.jsonl

The work of the vs-TRL step's rollout (bench_decode.py's: 16 rows of 46 random
prompt tokens, 16 new tokens each, `sample_continuations`) in three
configurations with 2 threads: the float32 weights, the float32 weights under
bf16 autocast (`model.mixed_precision: bf16`), and the bfloat16 copy the trainer
keeps with `rollout.weights_dtype: bfloat16` (`cast_copy`). Each gets one warm-up
call, then `--reps` rounds time each once, in an order that rotates every round;
the ratios to float32 are medians of the per-round ratios.

With `--int8`, two more: an int8 weight-only copy made by torchao
(`quantize_(copy, Int8WeightOnlyConfig())`, one int8 per weight and a scale per
output channel; torchao is not a dependency: `pip install torchao` into the venv),
its activations in bfloat16 (the dtype torchao's CPU int8 kernel is written for)
and in float32.

With `--profile`, torch.profiler's operators of one float32 call and one call of
the bf16 copy (`bench_decode.profile_ops`): where the copy's time goes.

Then the mismatch: the copy's sampled tokens (temperature 1) are rescored by the
float32 weights (`token_logprobs`, the trainer's log-prob pass) and
`rollout_mismatch/*` are computed as the trainer logs them, with the cap
`--cap` (AReaL's examples use 5).
"""

from __future__ import annotations

import argparse
import copy
import importlib.metadata
import os
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch: idle OpenMP threads sleep

from bench import bench_rows  # noqa: E402
from bench.real_model import bench_decode  # noqa: E402

#: (name, which module samples, autocast)
CONFIGS = (("float32", "full", False), ("bf16 autocast", "full", True), ("bf16 copy", "copy", False))
PROFILED = (("float32", "full"), ("bf16 copy", "copy"))
INT8_CONFIGS = (("int8 copy, bf16 act", "int8_bf16", False), ("int8 copy, f32 act", "int8_f32", False))


def measure(
    models: dict[str, Any], rows: list[list[int]], reps: int, configs: tuple[tuple[str, str, bool], ...]
) -> dict[str, list[float]]:
    """Every configuration's call times: a warm-up each, then `reps` rounds in a rotating order."""
    for _, which, autocast in configs:
        bench_decode.sample(models[which], rows, autocast)
    times: dict[str, list[float]] = {name: [] for name, _, _ in configs}
    for r in range(reps):
        for name, which, autocast in configs[r % len(configs) :] + configs[: r % len(configs)]:
            times[name].append(bench_decode.sample(models[which], rows, autocast)[0])
            print(f"round {r} {name:14s} {times[name][-1]:.3f} s", flush=True)
    return times


def mismatch(models: dict[str, Any], rows: list[list[int]], cap: float) -> dict[str, float]:
    """The copy's samples rescored by the float32 weights: the trainer's `rollout_mismatch/*`."""
    import torch

    from areal_adv.trainer.lm.logprobs import token_logprobs
    from areal_adv.trainer.ppo.training.rollout_mismatch import mismatch_metrics, mismatch_sums

    _, out = bench_decode.sample(models["copy"], rows, False)
    ids = torch.tensor([r + list(c.token_ids) for r, c in zip(rows, out)])
    attention = torch.ones_like(ids)
    behaviour = torch.zeros(ids.shape, dtype=torch.float32)
    wanted = torch.zeros(ids.shape, dtype=torch.float32)
    start = len(rows[0]) - 1  # aligned: position t holds token t+1
    for i, c in enumerate(out):
        n = len(c.token_ids)
        behaviour[i, start : start + n] = torch.tensor(c.logprobs)
        wanted[i, start : start + n] = 1.0
    with torch.no_grad():
        training = token_logprobs(models["full"], ids, attention, 1.0, wanted=wanted)[0]
    return mismatch_metrics(mismatch_sums(behaviour, training, wanted, cap), cap)


def int8_copies(full: Any) -> dict[str, Any]:
    """torchao's int8 weight-only copies of `full`, with bfloat16 and with float32 activations."""
    import torch
    from torchao.quantization import Int8WeightOnlyConfig, quantize_

    from areal_adv.trainer.parallel.engine import cast_copy

    copies = {"int8_bf16": cast_copy(full, torch.bfloat16), "int8_f32": copy.deepcopy(full)}
    for module in copies.values():
        quantize_(module, Int8WeightOnlyConfig())
    return copies


def run(args: argparse.Namespace) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    from areal_adv.trainer.parallel.engine import cast_copy

    origin = bench_rows.provenance("bench.real_model.bench_rollout_copy")
    torch.set_num_threads(args.threads)
    full = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32, attn_implementation="sdpa")
    models = {"full": full, "copy": cast_copy(full, torch.bfloat16)}
    configs = CONFIGS + (INT8_CONFIGS if args.int8 else ())
    if args.int8:
        models.update(int8_copies(full))
    rows = bench_decode.contexts(vocab=full.config.vocab_size)
    times, before, after = bench_rows.under_load(lambda: measure(models, rows, args.reps, configs))
    ratios = {f"{name} / float32": [a / b for a, b in zip(times[name], times["float32"])] for name, _, _ in configs[1:]}
    bench_rows.print_rounds(times, ratios, 14)
    profiles = {}
    if args.profile:
        profiles = {name: bench_decode.profile_ops(models[which], rows) for name, which in PROFILED}
    found = mismatch(models, rows, args.cap)
    for key, value in found.items():
        print(f"{key}: {value:.6g}")
    if args.results is not None:
        bench_rows.append(
            args.results,
            {
                "bench": "rollout_copy",
                **origin,
                "model": Path(args.model).name,
                **({"torchao": importlib.metadata.version("torchao")} if args.int8 else {}),
                "threads": args.threads,
                "reps": args.reps,
                "load": {"before": before, "after": after},
                "times_s": times,
                "ratios": ratios,
                "mismatch": found,
                **({"profiles": profiles} if profiles else {}),
            },
        )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="the converted SmolLM2-135M-Instruct folder")
    parser.add_argument("--reps", type=int, default=5, help="timed rounds (each configuration once per round)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--cap", type=float, default=5.0, help="behaviour-weight cap for capped_frac")
    parser.add_argument("--results", type=Path, default=None, help="append one JSON row (JSONL)")
    parser.add_argument("--profile", action="store_true", help="torch.profiler's operators of float32 and the copy")
    parser.add_argument("--int8", action="store_true", help="also torchao's int8 weight-only copies (needs torchao)")
    run(parser.parse_args(argv))


if __name__ == "__main__":
    main()
