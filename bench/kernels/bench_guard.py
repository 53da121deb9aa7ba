"""Cost of the non-finite output guard (areal_adv/trainer/ppo/output_guard.py), as ratios in one process.

Usage:
    .venv/bin/python -m bench.kernels.bench_guard                  # 256 x 8192, 1 thread, 15 rounds
    .venv/bin/python -m bench.kernels.bench_guard --sizes 64x1024,256x8192 --rounds 25 --threads 2

For each config, every round times, back to back and in a rotating order:
  * `compute_advantages` as shipped (guard on);
  * `compute_advantages` with the guard replaced by a no-op (guard off);
  * `compute_advantages` as shipped once more (A/A: how far two identical runs differ);
  * the guard alone on the outputs of the last call (what it costs in place);
  * a naive guard that scans every guarded [B, T] output (the cost the bounds avoid);
  * what collecting the magnitudes adds (`extra`): on the fused path (the
    default for these configs), the fused kernels with their per-row max |values|
    pass against the same kernels without it (`fused_cpu.FusedOptions.magnitudes`);
    on the tensor path, max |values| by `aminmax` instead of the finiteness sum
    it replaces in the batch checks;
  * `aminmax` alone on the cold values (the alternative to the kernel pass: one
    torch pass for the magnitudes when fused).
The machine is shared, so it reports medians over the rounds, and the ratios
(on - off) / off (of the medians, and the median of each round's paired ratio) and
guard / pipeline. Results and the command go in docs/performance.md.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch

from areal_adv.api.cli_args import (
    AdvantageShaping,
    NormConfig,
    PPOActorConfig,
)
from areal_adv.trainer.ppo import advantage as advantage_module
from areal_adv.trainer.ppo.actor import PPOActor
from areal_adv.trainer.ppo.checks.batch_checks import all_finite, check_batch, finite_magnitude
from areal_adv.trainer.ppo.fused import use_fused
from areal_adv.trainer.ppo.kernels import fused_cpu
from areal_adv.trainer.ppo.output_guard import GUARDED_FIELDS, GuardContext, guard_outputs
from bench.kernels.bench_advantage import make_rollout_batch, parse_sizes, set_threads

ROOT = Path(__file__).resolve().parents[2]

CONFIGS: dict[str, Callable[[], PPOActorConfig]] = {
    "bench default (kl 0.1, token GAE, batch adv_norm)": lambda: PPOActorConfig(kl_ctl=0.1, adv_norm=NormConfig()),
    "PPOActorConfig()": PPOActorConfig,
    "GRPO-like (group reward_norm, kl 0)": lambda: PPOActorConfig(
        kl_ctl=0.0, reward_norm=NormConfig(mean_level="group", std_level="group", group_size=8)
    ),
}


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def measure(cfg: PPOActorConfig, n_rows: int, n_pos: int, rounds: int) -> dict[str, float]:
    batch = make_rollout_batch(n_rows, n_pos)
    actor = PPOActor(cfg)
    actor.compute_advantages(batch)  # warm-up: compiled kernels
    stats = check_batch(batch, recompute_prox=False)
    meta = advantage_module.synthesise_meta(cfg, n_rows)
    ctx = GuardContext(
        config=cfg, resolved=actor.resolved, options=AdvantageShaping(), stats=stats, meta=meta, has_token_rewards=False
    )
    real_guard = advantage_module.guard_outputs
    holder: dict[str, float] = {}

    # No variant keeps its outputs past its own step, so all of them allocate alike.
    def on() -> None:
        actor.compute_advantages(batch)

    def off() -> None:
        advantage_module.guard_outputs = lambda fields, ctx: None
        try:
            actor.compute_advantages(batch)
        finally:
            advantage_module.guard_outputs = real_guard

    def guard_alone() -> None:
        out = actor.compute_advantages(batch)  # fresh outputs, as the guard sees them in place (just written)
        holder["guard"] = timed(lambda: guard_outputs(out, ctx))

    def naive_alone() -> None:
        out = actor.compute_advantages(batch)
        holder["naive"] = timed(lambda: [all_finite(out[k]) for k in GUARDED_FIELDS])

    fused = use_fused(batch, cfg, actor.resolved)
    kernel_inputs = fused_cpu.FusedInputs(
        batch["attention_mask"],
        batch["loss_mask"],
        batch["logprobs"],
        batch["ref_logp"],
        batch["values"],
        None,
        None,
        batch["rewards"],
        batch["is_truncated"],
    )

    def kernels(magnitudes: bool) -> float:
        options = fused_cpu.FusedOptions(
            "token",
            False,
            cfg.mask_no_eos_with_zero,
            cfg.kl_estimator,
            cfg.kl_ctl,
            cfg.discount,
            torch.full((n_rows,), cfg.discount * cfg.gae_lambda),
            row_moments=cfg.adv_norm is not None,
            magnitudes=magnitudes,
        )
        return timed(lambda: fused_cpu.run_fused(kernel_inputs, options))

    def extra() -> None:
        if fused:  # paired, alternating which goes first
            first = len(samples["extra"]) % 2 == 0
            a = kernels(first)
            b = kernels(not first)
            holder["extra"] = (a - b) if first else (b - a)
            return
        actor.compute_advantages(batch)  # the batch is cold again, as in a real call
        values = batch["values"]
        magnitude = timed(lambda: finite_magnitude("values", values))
        actor.compute_advantages(batch)
        holder["extra"] = magnitude - timed(lambda: all_finite(values))

    def aminmax() -> None:
        actor.compute_advantages(batch)  # the values are cold again, as after a real call's other work
        values = batch["values"]
        holder["aminmax"] = timed(lambda: torch.aminmax(values))

    samples: dict[str, list[float]] = {
        "on": [],
        "off": [],
        "on2": [],
        "guard": [],
        "naive": [],
        "extra": [],
        "aminmax": [],
    }
    steps = [
        ("on", on),
        ("off", off),
        ("on2", on),
        ("guard", guard_alone),
        ("naive", naive_alone),
        ("extra", extra),
        ("aminmax", aminmax),
    ]
    for r in range(rounds):
        k = r % len(steps)
        for name, fn in steps[k:] + steps[:k]:  # rotate the order against drift
            elapsed = timed(fn)
            samples[name].append(holder.pop(name) if name in holder else elapsed)
    result = {k: statistics.median(v) for k, v in samples.items()}
    # on and off of the same round ran back to back: their paired ratio cancels slow drifts of the load
    paired = [(a - b) / b for a, b in zip(samples["on"], samples["off"])]
    same = [(a - b) / b for a, b in zip(samples["on"], samples["on2"])]  # A/A: the noise yardstick
    result["paired"], result["aa"] = statistics.median(paired), statistics.median(same)
    result["aa_iqr"] = _iqr(same)
    result["fused"] = fused
    return result


def _iqr(values: list[float]) -> float:
    q1, _, q3 = statistics.quantiles(values, n=4)
    return q3 - q1


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=parse_sizes, default=[(256, 8192)])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    set_threads(args.threads)
    print(f"torch {torch.__version__}, {args.threads} thread(s), medians of {args.rounds} rounds (ms)")
    print(
        f"{'config':<52}{'B x T':>12}{'on':>9}{'off':>9}{'(on-off)/off':>14}{'paired':>8}{'A/A':>7}{'A/A IQR':>9}{'guard':>8}"
        f"{'guard/on':>10}{'path':>7}{'extra':>8}{'extra/on':>10}{'aminmax':>9}{'amm/on':>8}{'naive':>8}{'naive/on':>10}"
    )
    for n_rows, n_pos in args.sizes:
        for label, make in CONFIGS.items():
            m = measure(make(), n_rows, n_pos, args.rounds)
            print(
                f"{label:<52}{f'{n_rows}x{n_pos}':>12}{m['on'] * 1e3:9.2f}{m['off'] * 1e3:9.2f}"
                f"{(m['on'] - m['off']) / m['off']:14.1%}{m['paired']:8.1%}{m['aa']:7.1%}{m['aa_iqr']:9.1%}{m['guard'] * 1e3:8.3f}{m['guard'] / m['on']:10.2%}"
                f"{'fused' if m['fused'] else 'tensor':>7}{m['extra'] * 1e3:8.3f}{m['extra'] / m['on']:10.2%}"
                f"{m['aminmax'] * 1e3:9.3f}{m['aminmax'] / m['on']:8.1%}"
                f"{m['naive'] * 1e3:8.2f}{m['naive'] / m['on']:10.1%}",
                flush=True,
            )


if __name__ == "__main__":
    main()
