"""Cost of the call-time agreement (areal_adv/utils/call_agreement.py) per `compute_advantages` call, 2 gloo ranks.

Usage:
    .venv/bin/python -m bench.kernels.bench_call_agreement                       # 64x512 and 256x2048, 25 rounds
    .venv/bin/python -m bench.kernels.bench_call_agreement --sizes 16x128 --rounds 5

The script starts two ranks of itself (gloo on 127.0.0.1, one thread each).
Every round, both ranks time, back to back in the same rotating order,
`compute_advantages` as shipped (agreement on), with the agreement switched off
(`call_agreement._live` returning False, so neither the status exchanges nor
the final one run), and as shipped once more (A/A, the noise yardstick); then
the same three each followed by a barrier (`+sync`: until both ranks are done,
what a step that synchronises anyway, e.g. with the DDP update, pays). The
exchanges make a call wait for the slower rank, so the per-rank time includes
that wait and the `+sync` time shows what is added beyond it. Rank 0 prints,
per config and size, the medians (ms), (on - off) / off of the medians, the
median of each round's paired ratio, the A/A ratio, the status exchanges per
call, and one exchange alone (an all-reduce of one int). Results and the
command go in docs/performance.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

from bench import bench_rows

ROOT = Path(__file__).resolve().parents[2]

CONFIGS = {
    "batch reward_norm + batch adv_norm, kl 0.1": lambda NC: dict(kl_ctl=0.1, reward_norm=NC(), adv_norm=NC()),
    "PPOActorConfig()": lambda NC: dict(),
    "GRPO-like (group reward_norm, kl 0)": lambda NC: dict(
        kl_ctl=0.0, reward_norm=NC(mean_level="group", std_level="group", group_size=8)
    ),
}


def _timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _measure(config: object, n_rows: int, n_pos: int, rounds: int) -> dict[str, float]:
    import torch.distributed as dist

    from areal_adv.trainer.ppo.actor import PPOActor
    from areal_adv.utils import call_agreement
    from bench.kernels.bench_advantage import make_rollout_batch

    batch = make_rollout_batch(n_rows, n_pos, seed=dist.get_rank())
    actor = PPOActor(config)
    actor.compute_advantages(batch)  # warm-up: compiled kernels
    live, exchange = call_agreement._live, call_agreement._exchange
    counted: list[int] = []

    def on() -> None:
        actor.compute_advantages(batch)

    def off() -> None:
        call_agreement._live = lambda: False
        try:
            actor.compute_advantages(batch)
        finally:
            call_agreement._live = live

    def synced(fn: Callable[[], None]) -> Callable[[], None]:
        return lambda: (fn(), dist.barrier())

    call_agreement._exchange = lambda *args: (counted.append(1), exchange(*args))[1]
    on()
    call_agreement._exchange = exchange
    steps = [("on", on), ("off", off), ("on2", on), ("on_s", synced(on)), ("off_s", synced(off)), ("on2_s", synced(on))]
    samples: dict[str, list[float]] = {name: [] for name, _ in steps}
    for r in range(rounds):
        k = r % len(steps)
        for name, fn in steps[k:] + steps[:k]:  # the same rotation on both ranks: their collectives pair up
            dist.barrier()
            samples[name].append(_timed(fn))
    import torch

    flag = torch.zeros(1, dtype=torch.int32)
    one = statistics.median(_timed(lambda: dist.all_reduce(flag, op=dist.ReduceOp.MAX)) for _ in range(200))
    out = {k: statistics.median(v) * 1e3 for k, v in samples.items()}
    for tail in ("", "_s"):
        on_, off_, on2_ = (samples[k + tail] for k in ("on", "off", "on2"))
        out["paired" + tail] = statistics.median((a - b) / b for a, b in zip(on_, off_))
        out["aa" + tail] = statistics.median((a - b) / b for a, b in zip(on_, on2_))
    out["exchanges"], out["one_ms"] = float(len(counted)), one * 1e3
    return out


def _rank_main(args: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist

    from areal_adv.api.cli_args import NormConfig, PPOActorConfig
    from bench.kernels.bench_advantage import parse_sizes, set_threads

    set_threads(1)
    dist.init_process_group("gloo", timeout=timedelta(seconds=300))
    header = (
        "| config | B x T | exchanges | one exchange | on | off | paired | A/A | on +sync | off +sync | "
        "paired +sync | A/A +sync |"
    )
    if dist.get_rank() == 0:
        print(
            f"torch {torch.__version__}, 2 gloo ranks on 127.0.0.1, 1 thread each, {args.rounds} rounds; "
            f"load: {bench_rows.load1():.2f}\n{header}\n" + "| --- " * 12 + "|",
            flush=True,
        )
    for name, make in CONFIGS.items():
        for n_rows, n_pos in parse_sizes(args.sizes):
            r = _measure(PPOActorConfig(**make(NormConfig)), n_rows, n_pos, args.rounds)
            if dist.get_rank() == 0:
                print(
                    f"| {name} | {n_rows} x {n_pos} | {r['exchanges']:.0f} | {r['one_ms']:.3f} ms | "
                    f"{r['on']:.2f} | {r['off']:.2f} | {r['paired']:+.1%} | {r['aa']:+.1%} | {r['on_s']:.2f} | "
                    f"{r['off_s']:.2f} | {r['paired_s']:+.1%} | {r['aa_s']:+.1%} |",
                    flush=True,
                )
    if dist.get_rank() == 0:
        print(f"load after: {bench_rows.load1():.2f}", flush=True)
    dist.destroy_process_group()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="64x512,256x2048", help="comma-separated BxT list (rows per rank)")
    parser.add_argument("--rounds", type=int, default=25)
    args = parser.parse_args()
    if "RANK" in os.environ:
        _rank_main(args)
        return 0
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = str(sock.getsockname()[1])
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "bench.kernels.bench_call_agreement", *sys.argv[1:]],
            cwd=ROOT,
            env={
                **os.environ,
                "RANK": str(r),
                "WORLD_SIZE": "2",
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": port,
                "OMP_NUM_THREADS": "1",
            },
        )
        for r in range(2)
    ]
    return max(p.wait() for p in procs)


if __name__ == "__main__":
    sys.exit(main())
