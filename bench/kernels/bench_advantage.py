"""Advantage-computation benchmarks, side by side in one process.

Usage:
    .venv/bin/python -m bench.kernels.bench_advantage            # default sizes (a few minutes on 2 cores)
    .venv/bin/python -m bench.kernels.bench_advantage --quick    # 64x1024 and 256x8192 only
    .venv/bin/python -m bench.kernels.bench_advantage --sizes 256x8192,1024x32768

Sections:
1. numba first-call cost (cold compile into an empty cache, then a cached load),
   each in a fresh subprocess;
2. token GAE and turn GAE (ours, per backend) against the reference loops in
   bench/kernels/reference_loops.py, on ragged multi-turn batches; best of several runs;
3. group normalisation (areal_adv.utils.data.Normalization) against a per-group loop;
4. the whole pipeline (`bench_pipeline`), skipped until its imports exist.

Results and the command that produced them go in docs/performance.md.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

from areal_adv.trainer.ppo.gae import token_gae_tensors, turn_gae_tensors
from areal_adv.trainer.ppo.kernels import BACKEND_ENV, available_backends
from bench.kernels.reference_loops import (
    reference_group_norm,
    reference_token_gae,
    reference_turn_gae,
)

ROOT = Path(__file__).resolve().parents[2]

DEFAULT_SIZES = [(b, t) for b in (64, 256, 1024) for t in (1024, 8192, 32768)]
QUICK_SIZES = [(64, 1024), (256, 8192)]
MANDATORY = (256, 8192)
MAX_BYTES = 2 * 2**30  # skip sizes whose [B, T] tensors exceed ~2 GiB in total
TENSORS_PER_SIZE = 8  # rewards, values, mask, turn ids (8 B), two outputs, slack (float32 units)


# ---------------------------------------------------------------------------
# Timing helpers
# ---------------------------------------------------------------------------


def best_time(fn: Callable[[], object], reps: int, budget_s: float = 20.0) -> float:
    """Best wall time of `reps` calls (fewer when one call eats the budget)."""
    best = float("inf")
    spent = 0.0
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        elapsed = time.perf_counter() - start
        best = min(best, elapsed)
        spent += elapsed
        if spent > budget_s:
            break
    return best


def with_backend(name: str, fn: Callable[[], object]) -> Callable[[], object]:
    """Run `fn` with AREAL_GAE_BACKEND forced to `name`."""

    def run() -> object:
        old = os.environ.get(BACKEND_ENV)
        os.environ[BACKEND_ENV] = name
        try:
            return fn()
        finally:
            if old is None:
                os.environ.pop(BACKEND_ENV, None)
            else:
                os.environ[BACKEND_ENV] = old

    return run


def fmt_ms(seconds: float) -> str:
    return f"{seconds * 1e3:10.2f}"


# ---------------------------------------------------------------------------
# Batches
# ---------------------------------------------------------------------------


def make_batch(n_rows: int, n_pos: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """Ragged multi-turn rows: prompt, 1-8 turns with tool/env gaps, right padding.

    Turn ids sometimes skip values. The aligned loss mask is `turn_ids >= 0`.
    Rewards: small KL-like terms on generated tokens plus an outcome reward.
    """
    gen = torch.Generator().manual_seed(seed)
    ids = torch.full((n_rows, n_pos), -1, dtype=torch.long)
    lengths = torch.randint(n_pos // 2, n_pos, (n_rows,), generator=gen)
    n_turns = torch.randint(1, 9, (n_rows,), generator=gen)
    for b in range(n_rows):
        end = int(lengths[b])
        prompt = int(torch.randint(n_pos // 20 + 1, n_pos // 8 + 2, (1,), generator=gen))
        span = max(end - prompt, 1)
        bounds = torch.sort(torch.randint(prompt, prompt + span, (2 * int(n_turns[b]),), generator=gen)).values
        turn = 0
        for k in range(int(n_turns[b])):
            lo, hi = int(bounds[2 * k]), int(bounds[2 * k + 1])
            ids[b, lo : hi + 1] = turn
            turn += 1 + int(torch.rand((), generator=gen) < 0.2)  # occasionally skip an id
    ids[:, -1] = -1
    mask = (ids >= 0).float()
    rewards = 0.01 * torch.randn(n_rows, n_pos, generator=gen) * mask
    last = (mask * torch.arange(n_pos)).argmax(dim=1)
    rewards[torch.arange(n_rows), last] += torch.randn(n_rows, generator=gen)
    return dict(
        rewards=rewards,
        values=torch.randn(n_rows, n_pos, generator=gen),
        mask=mask,
        turn_ids=ids,
        lam=0.9 + 0.1 * torch.rand(n_rows, generator=gen),
        bootstrap=torch.randn(n_rows, generator=gen) * (torch.rand(n_rows, generator=gen) < 0.2),
    )


# ---------------------------------------------------------------------------
# Sections
# ---------------------------------------------------------------------------

_FIRST_CALL = """
import time
t0 = time.perf_counter()
import torch
t1 = time.perf_counter()
from areal_adv.trainer.ppo.gae import token_gae_tensors, turn_gae_tensors
from areal_adv.trainer.ppo.kernels.numba_cpu import PARALLEL_MIN_ELEMENTS
times = [time.perf_counter() - t1]
for n_rows, n_pos in ((2, 8), (64, PARALLEL_MIN_ELEMENTS // 64)):  # serial, then parallel kernels
    x = torch.ones(n_rows, n_pos)
    ids = torch.full((n_rows, n_pos), -1)
    ids[:, 1:3] = 0
    ids[:, 4:6] = 1
    lam, boot = torch.ones(n_rows), torch.zeros(n_rows)
    t0 = time.perf_counter()
    token_gae_tensors(x, x, x, discount=0.9, lam=lam, bootstrap=boot)
    times.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    turn_gae_tensors(x, x, (ids >= 0).float(), ids, discount=0.9, lam=lam, bootstrap=boot)
    times.append(time.perf_counter() - t0)
print(" ".join(f"{t:.3f}" for t in times))
"""


def bench_first_call() -> None:
    """numba compile cost: cold (empty cache dir) and warm (cache present), fresh processes."""
    print("\n== numba first call (fresh processes; seconds) ==")
    if "numba" not in available_backends("cpu"):
        print("numba not available: skipped")
        return
    cols = ("import gae", "token", "turn", "token par", "turn par")
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, NUMBA_CACHE_DIR=cache, AREAL_GAE_BACKEND="numba")
        print(f"{'first call of each kernel':<28}" + "".join(f"{c:>11}" for c in cols))
        for label in ("cold (compile, empty cache)", "warm (cache present)"):
            out = subprocess.run(
                [sys.executable, "-c", _FIRST_CALL], env=env, cwd=ROOT, capture_output=True, text=True, check=True
            ).stdout.split()
            print(f"{label:<28}" + "".join(f"{x:>11}" for x in out))
    print("(serial kernels serve batches under PARALLEL_MIN_ELEMENTS elements, parallel ones the rest;")
    print(" each is compiled on its first use, then loaded from the cache by later processes)")


def bench_gae(sizes: list[tuple[int, int]], reps: int, ref_reps: int) -> list[dict]:
    """Token and turn GAE: our backends against the reference loops."""
    backends = available_backends("cpu")
    print(f"\n== GAE on CPU ({_threads()}; best of {reps}, reference best of <= {ref_reps}; ms) ==")
    head = f"{'B x T':>12} |{'copy':>8} |{'ref token':>10}" + "".join(f"{b + ' tok':>11}{'x':>8}" for b in backends)
    head += f" |{'ref turn':>10}" + "".join(f"{b + ' turn':>11}{'x':>8}" for b in backends)
    print(head)
    rows = []
    for n_rows, n_pos in sizes:
        if n_rows * n_pos * 4 * TENSORS_PER_SIZE > MAX_BYTES:
            print(f"{n_rows:>5} x {n_pos:<5} | skipped (over {MAX_BYTES / 2**30:.0f} GiB)")
            continue
        batch = make_batch(n_rows, n_pos)
        r, v, m, ids, lam, boot = (batch[k] for k in ("rewards", "values", "mask", "turn_ids", "lam", "bootstrap"))
        copy = best_time(lambda: (r.clone(), v.clone(), m.clone()), reps)  # memory-speed yardstick
        ref_tok = best_time(lambda: reference_token_gae(r, v, m, 0.99, lam, boot), ref_reps)
        ref_turn = best_time(lambda: reference_turn_gae(r, v, m, ids, 0.99, lam, boot), ref_reps)
        want_tok = reference_token_gae(r, v, m, 0.99, lam, boot)[0]
        want_turn = reference_turn_gae(r, v, m, ids, 0.99, lam, boot)[0]
        result = dict(size=(n_rows, n_pos), copy=copy, ref_token=ref_tok, ref_turn=ref_turn)
        line_tok, line_turn = "", ""
        for backend in backends:
            tok = with_backend(backend, lambda: token_gae_tensors(r, v, m, discount=0.99, lam=lam, bootstrap=boot))
            trn = with_backend(backend, lambda: turn_gae_tensors(r, v, m, ids, discount=0.99, lam=lam, bootstrap=boot))
            _check_close(f"{backend} token", tok()[0], want_tok)
            _check_close(f"{backend} turn", trn()[0], want_turn)
            n = reps if backend != "torch" else min(reps, 3)  # the fallback is slow on CPU
            t_tok, t_turn = best_time(tok, n), best_time(trn, n)
            result[f"{backend}_token"], result[f"{backend}_turn"] = t_tok, t_turn
            line_tok += f"{fmt_ms(t_tok):>11}{ref_tok / t_tok:>7.1f}x"
            line_turn += f"{fmt_ms(t_turn):>11}{ref_turn / t_turn:>7.1f}x"
        print(
            f"{n_rows:>5} x {n_pos:<5} |{copy * 1e3:8.2f} |{fmt_ms(ref_tok)}{line_tok} |{fmt_ms(ref_turn)}{line_turn}",
            flush=True,
        )
        rows.append(result)
    return rows


def _threads() -> str:
    text = f"{torch.get_num_threads()} torch threads"
    if "numba" in available_backends("cpu"):
        import numba

        text += f", {numba.get_num_threads()} numba threads"
    return text


def _check_close(label: str, got: torch.Tensor, want: torch.Tensor) -> None:
    """Benchmarks only count when the answer is right."""
    scale = 1.0 + float(want.abs().max())
    err = float((got - want).abs().max()) / scale
    if err > 1e-5:
        raise AssertionError(f"{label}: differs from the reference loop (max scaled error {err:.2e})")


def report_targets(rows: list[dict]) -> None:
    """The acceptance targets at the mandatory size (token >= 50x, turn >= 20x)."""
    for row in rows:
        if row["size"] != MANDATORY:
            continue
        best = available_backends("cpu")[0]
        tok = row["ref_token"] / row[f"{best}_token"]
        trn = row["ref_turn"] / row[f"{best}_turn"]
        print(
            f"\n{best} at {MANDATORY[0]}x{MANDATORY[1]}: token {row[f'{best}_token'] / row['copy']:.1f}x, "
            f"turn {row[f'{best}_turn'] / row['copy']:.1f}x the time of copying rewards, values and mask"
        )
        print(
            f"\ntargets at {MANDATORY[0]}x{MANDATORY[1]} (default CPU backend '{best}'): "
            f"token {tok:.0f}x (target 50x: {'met' if tok >= 50 else 'NOT met'}), "
            f"turn {trn:.0f}x (target 20x: {'met' if trn >= 20 else 'NOT met'})"
        )


def bench_group_norm(n_pos: int, reps: int) -> None:
    """Normalization at group level (1024 rows, groups of 8) against a per-group loop.

    Two shapes: [1024] (reward normalisation, where the per-group Python overhead
    dominates) and [1024, n_pos] (token-level advantage normalisation, memory-bound).
    """
    try:
        from areal_adv.api.cli_args import NormConfig
        from areal_adv.utils.data import Normalization
    except ImportError as exc:
        print(f"skipped: {exc}")
        return
    gen = torch.Generator().manual_seed(1)
    groups = [8] * 128
    norm = Normalization(NormConfig(mean_level="group", std_level="group"))
    for shape in ((1024,), (1024, n_pos)):
        print(f"\n== group normalisation: {' x '.join(map(str, shape))}, groups of 8 (ms) ==")
        x = torch.randn(*shape, generator=gen)
        if len(shape) == 1:
            mask = torch.ones_like(x)
        else:
            lengths = torch.randint(n_pos // 4, n_pos, (1024,), generator=gen)
            mask = (torch.arange(n_pos)[None] < lengths[:, None]).float()
        ours = best_time(lambda: norm(x, loss_mask=mask, group_sizes=groups), reps)
        ref = best_time(lambda: reference_group_norm(x, mask, groups), reps)
        diff = float((norm(x, loss_mask=mask, group_sizes=groups) - reference_group_norm(x, mask, groups)).abs().max())
        print(
            f"{'per-group loop':>16}{fmt_ms(ref)}\n{'Normalization':>16}{fmt_ms(ours)}   {ref / ours:.1f}x"
            f"   (max |diff| {diff:.1e})"
        )


def make_rollout_batch(n_rows: int, n_pos: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """A padded rollout batch in the raw (unshifted) layout compute_advantages takes."""
    gen = torch.Generator().manual_seed(seed)
    seqlens = torch.randint(n_pos // 2, n_pos + 1, (n_rows,), generator=gen)
    prompt = torch.randint(8, max(n_pos // 8, 9), (n_rows,), generator=gen)
    pos = torch.arange(n_pos)[None]
    attn = (pos < seqlens[:, None]).long()
    loss = ((pos >= prompt[:, None]) & (pos < seqlens[:, None])).long()
    return {
        "input_ids": torch.randint(0, 1000, (n_rows, n_pos), generator=gen) * attn,
        "attention_mask": attn,
        "loss_mask": loss,
        "logprobs": -torch.rand(n_rows, n_pos, generator=gen) * loss,
        "ref_logp": -torch.rand(n_rows, n_pos, generator=gen),
        "values": torch.randn(n_rows, n_pos, generator=gen),
        "rewards": (torch.rand(n_rows, generator=gen) < 0.5).float(),
        "is_truncated": seqlens == n_pos,
    }


_PEAK_MEMORY = """
import ctypes, sys
ctypes.CDLL("libc.so.6").mallopt(-3, 65536)  # M_MMAP_THRESHOLD fixed: big buffers go back to the OS on free
import torch
torch.set_num_threads({threads})
from bench.kernels.bench_advantage import make_rollout_batch
from areal_adv.api.cli_args import NormConfig, PPOActorConfig
from areal_adv.trainer.ppo.actor import PPOActor

def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) * 1024

actor = PPOActor(PPOActorConfig(kl_ctl=0.1, adv_norm=NormConfig()))
batch = make_rollout_batch({rows}, {pos})
actor.compute_advantages(batch)  # warm-up: imports, compiled kernels
open("/proc/self/clear_refs", "w").write("5")  # reset the peak-RSS counter
before = status("VmRSS:")
out = actor.compute_advantages(batch)
print((status("VmHWM:") - before) / ({rows} * {pos} * 4))
"""


def peak_extra_memory(n_rows: int, n_pos: int) -> float:
    """Peak RSS growth during one compute_advantages call, in [B, T] float32 tensors.

    Measured in a fresh process after a warm-up call (imports and compiled kernels
    are not counted; the returned tensors are). Large buffers are forced onto
    mmap, so RSS follows live memory; the kernel's peak-RSS counter is reset
    just before the call.
    """
    code = _PEAK_MEMORY.format(threads=torch.get_num_threads(), rows=n_rows, pos=n_pos)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-2000:])
    return float(proc.stdout.strip().splitlines()[-1])


def bench_pipeline(n_rows: int = 256, n_pos: int = 8192, reps: int = 3) -> None:
    """Whole default pipeline (kl_ctl 0.1, token GAE, batch adv_norm) against the 1.0.4 loop pipeline."""
    print(f"\n== whole pipeline: {n_rows} x {n_pos}, kl_ctl 0.1, token GAE, batch adv_norm (ms) ==")
    from areal_adv.api.cli_args import NormConfig, PPOActorConfig
    from areal_adv.trainer.ppo.actor import PPOActor
    from bench.kernels.reference_loops import reference_pipeline

    batch = make_rollout_batch(n_rows, n_pos)
    actor = PPOActor(PPOActorConfig(kl_ctl=0.1, adv_norm=NormConfig()))
    out = actor.compute_advantages(batch)
    ref = reference_pipeline(batch)
    for key in ("advantages", "returns", "kl_rewards", "tot_rewards"):
        _check_close(f"pipeline {key}", out[key], ref[key])
    ours = best_time(lambda: actor.compute_advantages(batch), reps=max(reps, 5))
    theirs = best_time(lambda: reference_pipeline(batch), reps=reps)
    print(
        f"{'1.0.4 loop pipeline':>22}{fmt_ms(theirs)}\n{'compute_advantages':>22}{fmt_ms(ours)}   {theirs / ours:.1f}x"
        f"   (target 15x: {'met' if theirs / ours >= 15 else 'NOT met'})"
    )
    peak = peak_extra_memory(n_rows, n_pos)
    print(
        f"peak extra memory of compute_advantages: {peak:.1f} x one [B, T] float32 tensor "
        f"(target <= 8: {'met' if peak <= 8 else 'NOT met'})"
    )


def set_threads(n: int) -> None:
    """Same thread count for torch ops and numba parallel kernels (numba first: its first
    `set_num_threads` starts its OpenMP pool, which resets torch's count)."""
    if "numba" in available_backends("cpu"):
        import numba

        numba.set_num_threads(n)
    torch.set_num_threads(n)


def parse_sizes(text: str) -> list[tuple[int, int]]:
    sizes = []
    for item in text.split(","):
        b, t = item.lower().split("x")
        sizes.append((int(b), int(t)))
    return sizes


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="two sizes, fewer repetitions")
    parser.add_argument("--sizes", type=parse_sizes, help="comma-separated BxT list, e.g. 256x8192,64x1024")
    parser.add_argument("--reps", type=int, default=None, help="repetitions for our kernels (best of)")
    parser.add_argument("--skip-first-call", action="store_true", help="skip the numba compile-cost section")
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch and numba threads (default: all cores); 1 avoids waiting on busy cores",
    )
    args = parser.parse_args(argv)
    if args.threads:
        set_threads(args.threads)
    sizes = args.sizes or (QUICK_SIZES if args.quick else DEFAULT_SIZES)
    reps = args.reps or (5 if args.quick else 10)
    ref_reps = 2 if args.quick else 3
    print(
        f"torch {torch.__version__}, python {sys.version.split()[0]}, {os.cpu_count()} CPUs, "
        f"backends: {available_backends('cpu')}"
    )
    if not args.skip_first_call:
        bench_first_call()
    rows = bench_gae(sizes, reps, ref_reps)
    report_targets(rows)
    bench_group_norm(1024 if args.quick else 4096, reps=3 if args.quick else 5)
    bench_pipeline()


if __name__ == "__main__":
    main()
