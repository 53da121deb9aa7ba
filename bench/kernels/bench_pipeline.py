"""The whole advantage pipeline against its memory floor, side by side in one process.

Usage:
    .venv/bin/python -m bench.kernels.bench_pipeline                       # 256x8192, 1 and 2 threads
    .venv/bin/python -m bench.kernels.bench_pipeline --table               # B in {64,256,1024} x T in {1k,8k,32k}
    .venv/bin/python -m bench.kernels.bench_pipeline --sizes 64x1024 --threads 2 --reps 9

For every size and thread count, interleaved in rounds (so load changes hit
every column alike), it times:

* floor: read every [B, T] input the configuration reads once and write six
  fresh float32 [B, T] outputs once (the faster of a numba kernel and torch ops,
  with outputs from `areal_adv.utils.buffers.empty_cpu`, as the pipeline allocates);
* `PPOActor.compute_advantages` on five configurations: the default (token
  GAE, kl_ctl 0.1) and KL + group reward norm + batch advantage norm, each with
  token GAE on a single-turn batch and turn GAE on a multi-turn batch, and the
  default with the k3 KL estimator; fused path (`AREAL_FUSED_ADVANTAGE=on`) and
  tensor path (`off`);
* the AReaL 1.0.4-style loop pipeline (`reference_loops.reference_pipeline`,
  default config only), fewer repetitions.

It checks fused against tensor outputs (bit for bit) and the default against
the loop reference before timing. Times are medians of the rounds; the table
gives each time as a ratio to the floor of the same size and thread count.
Results and the command go in docs/performance.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import numba
import numpy as np
import torch

from areal_adv.api.cli_args import NormConfig, PPOActorConfig
from areal_adv.trainer.ppo.actor import PPOActor
from areal_adv.trainer.ppo.fused import FUSED_ENV
from areal_adv.trainer.ppo.kernels.numba_cpu import use_parallel
from areal_adv.utils.buffers import empty_cpu
from areal_adv.utils.data import TrajBatchMeta
from bench import bench_rows
from bench.kernels.reference_loops import reference_pipeline

ROOT = Path(__file__).resolve().parents[2]

TABLE_SIZES = [(b, t) for b in (64, 256, 1024) for t in (1024, 8192, 32768)]
GROUP = 8  # rows per prompt for group reward normalisation
FLOAT_INPUTS = ("logprobs", "ref_logp", "values")
INT_INPUTS = ("attention_mask", "loss_mask", "turn_ids")
CONFIGS = {
    "default token": dict(),
    "default turn": dict(gae_timestep_unit="turn"),
    "kl+grn+ban token": dict(reward_norm=NormConfig(mean_level="group", std_level="group"), adv_norm=NormConfig()),
    "kl+grn+ban turn": dict(
        gae_timestep_unit="turn", reward_norm=NormConfig(mean_level="group", std_level="group"), adv_norm=NormConfig()
    ),
    "k3 token": dict(kl_estimator="k3"),  # the default with the k3 KL estimator (its exp is not the default's)
}


# ---------------------------------------------------------------------------
# Batches
# ---------------------------------------------------------------------------


def make_batch(n_rows: int, n_pos: int, *, turns: bool, seed: int = 0) -> dict[str, torch.Tensor]:
    """Ragged right-padded rows (prompt, response); with `turns`, 1-8 turns split by 4 environment tokens."""
    gen = torch.Generator().manual_seed(seed)
    seqlens = torch.randint(n_pos // 2, n_pos + 1, (n_rows,), generator=gen)
    prompt = torch.randint(8, max(n_pos // 8, 9), (n_rows,), generator=gen)
    pos = torch.arange(n_pos)[None]
    attn = (pos < seqlens[:, None]).long()
    generated = (pos >= prompt[:, None]) & (pos < seqlens[:, None])
    batch = {}
    if turns:
        turn_len = torch.clamp((seqlens - prompt) // torch.randint(1, 9, (n_rows,), generator=gen), min=8)[:, None]
        rel = pos - prompt[:, None]
        turn = torch.div(rel, turn_len, rounding_mode="floor")
        generated &= ~((turn >= 1) & (rel % turn_len < 4))  # environment tokens open every later turn
        batch["turn_ids"] = torch.where(generated, turn, torch.full_like(turn, -1))
    loss = generated.long()
    batch.update(
        input_ids=torch.randint(0, 1000, (n_rows, n_pos), generator=gen) * attn,
        attention_mask=attn,
        loss_mask=loss,
        logprobs=-torch.rand(n_rows, n_pos, generator=gen) * loss,
        ref_logp=-torch.rand(n_rows, n_pos, generator=gen),
        values=torch.randn(n_rows, n_pos, generator=gen),
        rewards=(torch.rand(n_rows, generator=gen) < 0.5).float(),
        is_truncated=seqlens == n_pos,
    )
    return batch


# ---------------------------------------------------------------------------
# The floor: read each input once, write six outputs once
# ---------------------------------------------------------------------------


@numba.njit(cache=True)
def _floor_row(b, ints, floats, o0, o1, o2, o3, o4, o5):
    """Row b: one pass over every integer and float input, one write of six outputs."""
    n = o0.shape[1]
    acc = np.int64(0)
    for a in ints:
        row = a[b]
        for t in range(n):
            acc += row[t]
    s = np.float32(acc)
    f0, f1, f2 = floats[0][b], floats[1][b], floats[2][b]
    for t in range(n):
        x = f0[t] + f1[t] + f2[t] + s
        o0[b, t] = x
        o1[b, t] = x
        o2[b, t] = x
        o3[b, t] = x
        o4[b, t] = x
        o5[b, t] = x


@numba.njit(parallel=True, cache=True)
def _floor_parallel(ints, floats, o0, o1, o2, o3, o4, o5):
    for b in numba.prange(o0.shape[0]):
        _floor_row(b, ints, floats, o0, o1, o2, o3, o4, o5)


@numba.njit(cache=True)
def _floor_serial(ints, floats, o0, o1, o2, o3, o4, o5):
    for b in range(o0.shape[0]):
        _floor_row(b, ints, floats, o0, o1, o2, o3, o4, o5)


def floor_numba(batch: dict[str, torch.Tensor]) -> list[torch.Tensor]:
    """The floor kernel, serial or parallel by the pipeline kernels' rule (`use_parallel`)."""
    shape = tuple(batch["loss_mask"].shape)
    outs = [empty_cpu(shape) for _ in range(6)]
    ints = tuple(batch[k].numpy() for k in INT_INPUTS if k in batch)
    kernel = _floor_parallel if use_parallel(shape[0], shape[0] * shape[1]) else _floor_serial
    kernel(ints, tuple(batch[k].numpy() for k in FLOAT_INPUTS), *(o.numpy() for o in outs))
    return outs


def floor_torch(batch: dict[str, torch.Tensor]) -> list[torch.Tensor]:
    for key in (*INT_INPUTS, *FLOAT_INPUTS):
        if key in batch:
            batch[key].sum()
    return [empty_cpu(tuple(batch["loss_mask"].shape)).fill_(1.0) for _ in range(6)]


# ---------------------------------------------------------------------------
# Timing
# ---------------------------------------------------------------------------


def with_mode(mode: str, fn: Callable[[], object]) -> Callable[[], object]:
    def run() -> object:
        old = os.environ.get(FUSED_ENV)
        os.environ[FUSED_ENV] = mode
        try:
            return fn()
        finally:
            if old is None:
                os.environ.pop(FUSED_ENV, None)
            else:
                os.environ[FUSED_ENV] = old

    return run


def set_threads(n: int) -> None:
    """numba first: its first `set_num_threads` starts its OpenMP pool, which resets torch's count."""
    numba.set_num_threads(n)
    torch.set_num_threads(n)


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def check(label: str, got: dict, want: dict, keys: tuple[str, ...], exact: bool) -> None:
    for key in keys:
        a, b = got[key], want[key]
        if exact and not torch.equal(a, b):
            raise AssertionError(f"{label}: {key} differs (max {(a.double() - b.double()).abs().max():.3g})")
        err = float((a.double() - b.double()).abs().max()) / (1.0 + float(b.double().abs().max()))
        if err > 1e-5:
            raise AssertionError(f"{label}: {key} differs from the reference (scaled error {err:.2e})")


def bench_size(n_rows: int, n_pos: int, threads: list[int], reps: int, ref_reps: int, plain_reps: int) -> list[dict]:
    """Rows of the table for one B x T: one per thread count."""
    batches = {False: make_batch(n_rows, n_pos, turns=False), True: make_batch(n_rows, n_pos, turns=True)}
    meta = TrajBatchMeta.from_group_sizes([GROUP] * (n_rows // GROUP))
    actors = {name: PPOActor(PPOActorConfig(**kw)) for name, kw in CONFIGS.items()}
    calls: dict[str, Callable[[], object]] = {}
    for turns, batch in batches.items():
        tag = "turn" if turns else "token"
        calls[f"floor {tag}"] = lambda b=batch: min(timed(lambda: floor_numba(b)), timed(lambda: floor_torch(b)))
    for name, actor in actors.items():
        batch = batches[name.endswith("turn")]
        fast = with_mode("on", lambda a=actor, b=batch: a.compute_advantages(b, meta))
        plain = with_mode("off", lambda a=actor, b=batch: a.compute_advantages(b, meta))
        check(
            name,
            fast(),
            plain(),
            ("advantages", "returns", "loss_mask", "logprobs", "kl_rewards", "tot_rewards"),
            exact=True,
        )
        calls[f"{name} fused"] = fast
        calls[f"{name} tensor"] = plain
    default = batches[False]
    check(
        "default vs 1.0.4 loop",
        calls["default token fused"](),
        reference_pipeline(default, adv_norm=False),
        ("advantages", "returns", "kl_rewards", "tot_rewards"),
        exact=False,
    )
    rows = []
    for n_threads in threads:
        set_threads(n_threads)
        for fn in calls.values():  # warm-up at this thread count
            fn()
        times: dict[str, list[float]] = {k: [] for k in calls}
        times["1.0.4 loop"] = []
        load = []
        for rnd in range(reps):
            load.append(bench_rows.load1())
            for key, fn in calls.items():
                if key.endswith("tensor") and rnd >= plain_reps:
                    continue
                out = fn() if key.startswith("floor") else None
                times[key].append(out if out is not None else timed(fn))
            if rnd < ref_reps:
                times["1.0.4 loop"].append(timed(lambda: reference_pipeline(default, adv_norm=False)))
        rows.append(
            dict(
                size=(n_rows, n_pos),
                threads=n_threads,
                load=statistics.median(load),
                **{k: statistics.median(v) for k, v in times.items()},
            )
        )
        print_row(rows[-1], flush=True)
    return rows


# ---------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------


def print_header() -> None:
    names = [f"{c} fused" for c in CONFIGS]
    print(
        f"{'B x T':>12} {'thr':>3} {'load':>5} {'floor tok':>9} {'floor turn':>10} | "
        + " | ".join(f"{n:>22}" for n in names)
        + f" | {'tensor default':>15} | {'1.0.4 loop':>14}"
    )


def print_row(row: dict, flush: bool = False) -> None:
    b, t = row["size"]
    cells = []
    for config in CONFIGS:
        floor = row["floor turn" if config.endswith("turn") else "floor token"]
        ms = row[f"{config} fused"]
        cells.append(f"{ms * 1e3:9.2f} ms {ms / floor:5.2f}x fl")
    floor = row["floor token"]
    tensor = row["default token tensor"]
    loop = row["1.0.4 loop"]
    fused = row["default token fused"]
    print(
        f"{b:>5} x {t:<5} {row['threads']:>3} {row['load']:5.1f} {floor * 1e3:9.2f} {row['floor turn'] * 1e3:10.2f} | "
        + " | ".join(f"{c:>22}" for c in cells)
        + f" | {tensor / floor:6.2f}x fl {tensor / fused:4.1f}x | {loop * 1e3:8.0f} ms {loop / fused:4.0f}x",
        flush=flush,
    )


def print_summary(rows: list[dict]) -> None:
    print("\nratios to the floor (fused path); tensor = the same config with AREAL_FUSED_ADVANTAGE=off")
    for row in rows:
        b, t = row["size"]
        parts = []
        for config in CONFIGS:
            floor = row["floor turn" if config.endswith("turn") else "floor token"]
            parts.append(
                f"{config}: {row[f'{config} fused'] / floor:.2f}x (tensor {row[f'{config} tensor'] / floor:.2f}x)"
            )
        print(f"{b}x{t} {row['threads']} thr: " + "; ".join(parts))


def parse_sizes(text: str) -> list[tuple[int, int]]:
    return [tuple(int(v) for v in item.lower().split("x")) for item in text.split(",")]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--table", action="store_true", help="all nine sizes of the scaling table")
    parser.add_argument("--sizes", type=parse_sizes, help="comma-separated BxT list")
    parser.add_argument("--threads", type=lambda s: [int(x) for x in s.split(",")], default=[1, 2])
    parser.add_argument("--reps", type=int, default=9, help="rounds (medians are reported)")
    parser.add_argument("--ref-reps", type=int, default=2, help="rounds that also time the 1.0.4 loop pipeline")
    parser.add_argument("--tensor-reps", type=int, default=3, help="rounds that also time the tensor path")
    args = parser.parse_args(argv)
    sizes = args.sizes or (TABLE_SIZES if args.table else [(256, 8192)])
    print(
        f"torch {torch.__version__}, numba {numba.__version__}, {os.cpu_count()} CPUs; medians of {args.reps} rounds "
        f"(tensor path {args.tensor_reps}, 1.0.4 loop {args.ref_reps})"
    )
    print_header()
    rows = []
    for n_rows, n_pos in sizes:
        rows += bench_size(n_rows, n_pos, args.threads, args.reps, args.ref_reps, args.tensor_reps)
    print_summary(rows)


if __name__ == "__main__":
    main()
