"""One-command GPU check: the Triton kernels against the CPU kernels, and their speed against a copy.

Usage:
    .venv/bin/python -m bench.kernels.bench_gae_cuda              # on a CUDA machine with triton (about 1-3 minutes)
    .venv/bin/python -m bench.kernels.bench_gae_cuda --quick      # fewer shapes and launch configs
    TRITON_INTERPRET=1 PYTHONPATH=<unpacked triton wheel> .venv/bin/python -m bench.kernels.bench_gae_cuda --interpret
                                                          # the token-kernel checks in Triton's CPU interpreter

On CUDA:
1. Token GAE: the Triton kernel (every launch config of the sweep) against the
   numba CPU kernel on random ragged, gappy batches (per-row lambda, truncated
   rows); bit-level agreement is not expected (the Triton scan reassociates),
   so the check is a scaled error <= 1e-5 plus exact carry-through on trailing
   masked positions.
2. Turn GAE on CUDA (torch scatter + the Triton token kernel over turns)
   against the numba CPU turn kernel.
3. The whole pipeline (`PPOActor.compute_advantages`, tensor path with Triton
   GAE on the GPU) against the fused CPU pipeline, four configurations.
4. Speed at 1024 x 32768: the Triton kernel against one device-to-device copy
   of the inputs it reads (rewards, values, mask), with CUDA events; prints
   RATIO, the bandwidths and the GPU name; the public `token_gae_tensors`, turn GAE and
   the pure-torch scan for context.

Exit status: 0 all checks passed, 1 a check failed, 2 nothing could run (no
CUDA / no triton / no interpreter), with the reason printed.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]

BIG = (1024, 32768)
SHAPES = [(1, 1), (3, 2), (5, 37), (17, 513), (64, 2048), (33, 5000)]
INTERPRET_SHAPES = [(1, 1), (3, 2), (5, 37), (4, 70)]
SWEEP = [dict(block_b=bb, block_t=bt, num_warps=nw) for bb in (1, 2, 4) for bt in (256, 512, 1024) for nw in (4, 8)]
INTERPRET_SWEEP = [dict(block_b=bb, block_t=bt, num_warps=4) for bb in (1, 2) for bt in (16, 32)]


def make_batch(n_rows: int, n_pos: int, seed: int, device: str) -> dict[str, torch.Tensor]:
    """Ragged rows with masked gaps, per-row lambdas, some truncated rows, and turn ids (built on CPU)."""
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, n_pos + 1, (n_rows,), generator=gen)
    pos = torch.arange(n_pos)[None]
    mask = (torch.rand(n_rows, n_pos, generator=gen) < 0.8) & (pos < lengths[:, None])
    new_turn = torch.rand(n_rows, n_pos, generator=gen) < 0.01
    ids = torch.where(mask, torch.cumsum(new_turn.long(), dim=1), torch.full_like(pos, -1))
    ids[:, -1] = -1
    batch = dict(
        rewards=torch.randn(n_rows, n_pos, generator=gen),
        values=torch.randn(n_rows, n_pos, generator=gen),
        mask=mask.float(),
        turn_mask=(ids >= 0).float(),
        turn_ids=ids,
        lam=torch.rand(n_rows, generator=gen),
        bootstrap=torch.randn(n_rows, generator=gen) * (torch.rand(n_rows, generator=gen) < 0.3),
    )
    return {k: v.to(device) for k, v in batch.items()}


def scaled_error(got: torch.Tensor, want: torch.Tensor) -> float:
    got, want = got.detach().cpu().double(), want.detach().cpu().double()
    if got.numel() == 0:
        return 0.0
    return float((got - want).abs().max()) / (1.0 + float(want.abs().max()))


def trailing(mask: torch.Tensor) -> torch.Tensor:
    """Positions after a row's last GAE step (they carry nothing: advantage exactly 0)."""
    valid = mask != 0
    valid[:, -1] = False
    return torch.flip(torch.cumsum(torch.flip(valid.long(), [1]), 1), [1]) == 0


def cpu_token(b: dict[str, torch.Tensor], discount: float) -> tuple[torch.Tensor, torch.Tensor]:
    from areal_adv.trainer.ppo.kernels.numba_cpu import token_gae_numba

    cpu = {k: v.cpu() for k, v in b.items()}
    return token_gae_numba(
        cpu["rewards"], cpu["values"], cpu["mask"], discount * cpu["lam"], cpu["bootstrap"], discount
    )


def check_token(device: str, shapes: list, sweep: list, report: Callable[[str, bool], None]) -> None:
    """Triton token GAE against the numba CPU kernel, every launch config of the sweep."""
    from areal_adv.trainer.ppo.kernels.triton_gae import default_config, token_gae_triton

    discount = 0.97
    for n_rows, n_pos in shapes:
        b = make_batch(n_rows, n_pos, seed=n_rows * 1000 + n_pos, device=device)
        want_adv, want_ret = cpu_token(b, discount)
        configs = sweep if n_pos >= 37 else [default_config(n_rows, n_pos)]
        ok = True
        for cfg in configs:
            adv, ret = token_gae_triton(
                b["rewards"], b["values"], b["mask"], discount * b["lam"], b["bootstrap"], discount, **cfg
            )
            err = max(scaled_error(adv, want_adv), scaled_error(ret, want_ret))
            tail = trailing(b["mask"].cpu())
            exact = bool(torch.equal(adv.cpu()[tail], want_adv[tail]))
            if err > 1e-5 or not exact:
                ok = False
                print(f"  MISMATCH token {n_rows}x{n_pos} {cfg}: scaled error {err:.2e}, trailing exact {exact}")
        report(f"token GAE {n_rows:>4} x {n_pos:<5} ({len(configs)} launch configs) vs numba", ok)


def check_turn(shapes: list, report: Callable[[str, bool], None], device: str = "cuda") -> None:
    """CUDA turn GAE (scatter + Triton over turns) against the numba CPU turn kernel."""
    from areal_adv.trainer.ppo.gae import turn_gae_tensors

    for n_rows, n_pos in shapes:
        b = make_batch(n_rows, n_pos, seed=7 * n_rows + n_pos, device=device)
        kw = dict(discount=0.97, lam=b["lam"], bootstrap=b["bootstrap"])
        adv, ret = turn_gae_tensors(b["rewards"], b["values"], b["turn_mask"], b["turn_ids"], **kw)
        cpu = {k: v.cpu() for k, v in b.items()}
        want_adv, want_ret = turn_gae_tensors(
            cpu["rewards"],
            cpu["values"],
            cpu["turn_mask"],
            cpu["turn_ids"],
            discount=0.97,
            lam=cpu["lam"],
            bootstrap=cpu["bootstrap"],
        )
        err = max(scaled_error(adv, want_adv), scaled_error(ret, want_ret))
        report(f"turn GAE  {n_rows:>4} x {n_pos:<5} {device} vs numba (scaled error {err:.1e})", err <= 1e-5)


def check_pipeline(report: Callable[[str, bool], None], device: str = "cuda") -> None:
    """The pipeline on CUDA (tensor path, Triton GAE) against the fused CPU pipeline."""
    from areal_adv.api.cli_args import PPOActorConfig
    from areal_adv.trainer.ppo.actor import PPOActor
    from areal_adv.utils.data import TrajBatchMeta
    from bench.kernels.bench_pipeline import CONFIGS
    from bench.kernels.bench_pipeline import make_batch as rollout_batch

    for name, kw in CONFIGS.items():
        batch = rollout_batch(64, 2048, turns=name.endswith("turn"), seed=3)
        meta = TrajBatchMeta.from_group_sizes([8] * 8)
        actor = PPOActor(PPOActorConfig(**kw))
        want = actor.compute_advantages(batch, meta)
        got = actor.compute_advantages({k: v.to(device) for k, v in batch.items()}, meta)
        err = max(
            scaled_error(got[k], want[k])
            for k in ("advantages", "returns", "kl_rewards", "tot_rewards", "loss_mask", "logprobs")
        )
        report(f"pipeline  {name:<17} {device} vs fused CPU (scaled error {err:.1e})", err <= 1e-5)


def cuda_time(fn: Callable[[], object], reps: int = 20, warmup: int = 3) -> tuple[float, float]:
    """(best, median) seconds per call, measured with CUDA events."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    times.sort()
    return times[0], times[len(times) // 2]


def bench_big(sweep: list) -> None:
    """Triton token GAE at 1024 x 32768 against a device-to-device copy of its inputs."""
    from areal_adv.trainer.ppo.gae import token_gae_tensors, turn_gae_tensors
    from areal_adv.trainer.ppo.kernels import BACKEND_ENV
    from areal_adv.trainer.ppo.kernels.triton_gae import default_config, token_gae_triton

    n_rows, n_pos = BIG
    b = make_batch(n_rows, n_pos, seed=7, device="cuda")
    r, v, m, lam, boot = b["rewards"], b["values"], b["mask"], b["lam"], b["bootstrap"]
    coef, n_bytes = 0.99 * lam, r.numel() * 4
    dsts = tuple(torch.empty_like(x) for x in (r, v, m))
    copy_best, copy_med = cuda_time(lambda: [d.copy_(s) for s, d in zip((r, v, m), dsts)])
    print(f"\n== {torch.cuda.get_device_name()}: token GAE at {n_rows} x {n_pos} (ms; best / median of 20) ==")
    print(
        f"{'D2D copy of rewards, values, mask':<46}{copy_best * 1e3:9.3f} {copy_med * 1e3:9.3f}"
        f"   {6 * n_bytes / copy_best / 1e9:7.0f} GB/s (read+write)"
    )
    results = sorted(
        (cuda_time(lambda c=cfg: token_gae_triton(r, v, m, coef, boot, 0.99, **c)) + (cfg,) for cfg in sweep),
        key=lambda x: x[0],
    )
    default = default_config(n_rows, n_pos)
    for best, med, cfg in results[:5] + [x for x in results[5:] if x[2] == default]:
        tag = " (default)" if cfg == default else ""
        print(
            f"{'triton ' + str(cfg) + tag:<46}{best * 1e3:9.3f} {med * 1e3:9.3f}"
            f"   {5 * n_bytes / best / 1e9:7.0f} GB/s   {best / copy_best:5.2f}x copy"
        )
    api_best, _ = cuda_time(lambda: token_gae_tensors(r, v, m, discount=0.99, lam=lam, bootstrap=boot))
    turn_best, _ = cuda_time(
        lambda: turn_gae_tensors(r, v, b["turn_mask"], b["turn_ids"], discount=0.99, lam=lam, bootstrap=boot), reps=5
    )
    os.environ[BACKEND_ENV] = "torch"
    scan_best, _ = cuda_time(lambda: token_gae_tensors(r, v, m, discount=0.99, lam=lam, bootstrap=boot), reps=5)
    os.environ.pop(BACKEND_ENV)
    for label, t in (
        ("public token_gae_tensors (auto backend)", api_best),
        ("turn_gae_tensors (scatter + triton)", turn_best),
        ("pure-torch backend (log-depth scan)", scan_best),
    ):
        print(f"{label:<46}{t * 1e3:9.3f}   {t / copy_best:5.2f}x copy")
    print(
        f"\nRATIO triton token GAE / D2D copy of its inputs: {results[0][0] / copy_best:.2f} "
        f"(default launch config {next(x for x in results if x[2] == default)[0] / copy_best:.2f}; "
        f"GPU {torch.cuda.get_device_name()})"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer shapes, the default launch config only")
    parser.add_argument(
        "--interpret",
        action="store_true",
        help="no GPU: run the token-kernel checks in Triton's CPU interpreter (TRITON_INTERPRET=1)",
    )
    args = parser.parse_args()
    from areal_adv.trainer.ppo.kernels import TRITON_AVAILABLE

    if not TRITON_AVAILABLE:
        print(
            "triton is not importable: nothing to check (install it on the GPU machine, or point PYTHONPATH at an "
            "unpacked triton wheel for --interpret)"
        )
        return 2
    import triton

    failures: list[str] = []

    def report(label: str, ok: bool) -> None:
        print(f"{'ok    ' if ok else 'FAILED'} {label}", flush=True)
        if not ok:
            failures.append(label)

    if args.interpret:
        if os.environ.get("TRITON_INTERPRET") != "1":
            print("--interpret needs TRITON_INTERPRET=1 in the environment (set before triton is imported)")
            return 2
        print(f"Triton {triton.__version__} CPU interpreter, torch {torch.__version__}: checks only, no timing")
        check_token("cpu", INTERPRET_SHAPES, INTERPRET_SWEEP, report)
    else:
        if not torch.cuda.is_available():
            print("CUDA is not available: nothing to check (use --interpret for the CPU-interpreter checks)")
            return 2
        print(f"GPU {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}")
        shapes = SHAPES[:4] if args.quick else SHAPES
        from areal_adv.trainer.ppo.kernels.triton_gae import default_config

        check_token("cuda", shapes, [default_config(1024, 2048)] if args.quick else SWEEP, report)
        check_turn(shapes, report)
        check_pipeline(report)
        bench_big([default_config(*BIG)] if args.quick else SWEEP)
    print("\nCORRECTNESS:", "all checks passed" if not failures else f"FAILED ({len(failures)}): {failures}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
