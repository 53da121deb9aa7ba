"""Prepared CUDA check for the Triton GAE kernel (run on a machine with a GPU).

Usage:
    .venv/bin/python bench/bench_gae_cuda.py            # checks + timings, ~1-2 minutes
    .venv/bin/python bench/bench_gae_cuda.py --no-sweep # skip the launch-config sweep

1. Correctness: Triton token GAE (and turn GAE through it) against the
   reference loops on random ragged, gappy batches, several shapes and
   launch configs. Any mismatch exits with status 1.
2. Speed at 1024 x 32768: the Triton kernel against one device-to-device
   copy of the inputs it reads (rewards, values, mask), timed with CUDA
   events; prints the ratio, the effective bandwidths and the GPU name.
   Also the public `token_gae` (includes dtype handling), the pure-torch
   backend, turn GAE and the reference loop, for context.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from reference_loops import reference_token_gae, reference_turn_gae  # noqa: E402

from areal.trainer.ppo.gae import token_gae, turn_gae  # noqa: E402
from areal.trainer.ppo.kernels import BACKEND_ENV, TRITON_AVAILABLE  # noqa: E402
from areal.trainer.ppo.kernels.triton_gae import default_config, token_gae_triton  # noqa: E402

BIG = (1024, 32768)
CONFIGS = [
    dict(block_b=bb, block_t=bt, num_warps=nw)
    for bb in (1, 2, 4)
    for bt in (256, 512, 1024)
    for nw in (4, 8)
]


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


def make_batch(n_rows: int, n_pos: int, seed: int, device: str = "cuda") -> dict[str, torch.Tensor]:
    """Ragged rows with masked gaps, per-row lambdas, some truncated rows, and turn ids."""
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
    return float((got - want).abs().max()) / (1.0 + float(want.abs().max()))


def check_correctness(sweep: bool) -> bool:
    """Triton vs the reference loops; returns True when everything matches."""
    ok = True
    discount = 0.97
    for n_rows, n_pos in [(1, 1), (3, 2), (5, 37), (17, 513), (64, 2048), (33, 5000)]:
        b = make_batch(n_rows, n_pos, seed=n_rows * 1000 + n_pos)
        want_adv, want_ret = reference_token_gae(b["rewards"], b["values"], b["mask"], discount, b["lam"], b["bootstrap"])
        configs = CONFIGS if sweep and n_pos >= 513 else [default_config(n_rows, n_pos)]
        for cfg in configs:
            adv, ret = token_gae_triton(b["rewards"], b["values"], b["mask"], discount * b["lam"], b["bootstrap"],
                                        discount, **cfg)
            err = max(scaled_error(adv, want_adv), scaled_error(ret, want_ret))
            trailing = _trailing(b["mask"])
            exact = bool(torch.equal(adv[trailing], want_adv[trailing]))
            if err > 1e-5 or not exact:
                ok = False
                print(f"MISMATCH token {n_rows}x{n_pos} {cfg}: scaled error {err:.2e}, trailing exact {exact}")
        os.environ[BACKEND_ENV] = "triton"
        adv, ret = turn_gae(b["rewards"], b["values"], b["turn_mask"], b["turn_ids"], discount=discount,
                            lam=b["lam"], bootstrap=b["bootstrap"])
        os.environ.pop(BACKEND_ENV)
        if n_rows * n_pos <= 64 * 2048:
            want_adv, want_ret = reference_turn_gae(b["rewards"], b["values"], b["turn_mask"], b["turn_ids"],
                                                    discount, b["lam"], b["bootstrap"])
            err = max(scaled_error(adv, want_adv), scaled_error(ret, want_ret))
            if err > 1e-5:
                ok = False
                print(f"MISMATCH turn {n_rows}x{n_pos}: scaled error {err:.2e}")
        print(f"checked {n_rows:>4} x {n_pos:<5} ({len(configs)} launch configs): {'ok' if ok else 'FAILED'}", flush=True)
    return ok


def _trailing(mask: torch.Tensor) -> torch.Tensor:
    valid = mask != 0
    valid[:, -1] = False
    return torch.flip(torch.cumsum(torch.flip(valid.long(), [1]), 1), [1]) == 0


def bench_big(sweep: bool) -> None:
    n_rows, n_pos = BIG
    b = make_batch(n_rows, n_pos, seed=7)
    r, v, m, lam, boot = b["rewards"], b["values"], b["mask"], b["lam"], b["bootstrap"]
    coef = 0.99 * lam
    n_bytes = r.numel() * 4
    srcs = (r, v, m)
    dsts = tuple(torch.empty_like(x) for x in srcs)

    def copy_inputs() -> None:
        for src, dst in zip(srcs, dsts):
            dst.copy_(src)

    copy_best, copy_med = cuda_time(copy_inputs)
    print(f"\n== {torch.cuda.get_device_name()} : token GAE at {n_rows} x {n_pos} (ms; best / median of 20) ==")
    print(f"{'D2D copy of rewards, values, mask':<44}{copy_best * 1e3:9.3f} {copy_med * 1e3:9.3f}"
          f"   {6 * n_bytes / copy_best / 1e9:7.0f} GB/s (read+write)")
    results = []
    for cfg in (CONFIGS if sweep else [default_config(n_rows, n_pos)]):
        best, med = cuda_time(lambda: token_gae_triton(r, v, m, coef, boot, 0.99, **cfg))
        results.append((best, med, cfg))
    results.sort(key=lambda x: x[0])
    default = default_config(n_rows, n_pos)
    for best, med, cfg in results[:5] + [x for x in results if x[2] == default and x not in results[:5]]:
        tag = " (default)" if cfg == default else ""
        print(f"{'triton ' + str(cfg) + tag:<44}{best * 1e3:9.3f} {med * 1e3:9.3f}"
              f"   {5 * n_bytes / best / 1e9:7.0f} GB/s   {best / copy_best:5.2f}x copy")
    best_kernel = results[0][0]
    api_best, api_med = cuda_time(lambda: token_gae(r, v, m, discount=0.99, lam=lam, bootstrap=boot))
    print(f"{'public token_gae (auto backend)':<44}{api_best * 1e3:9.3f} {api_med * 1e3:9.3f}"
          f"   {'':>7}         {api_best / copy_best:5.2f}x copy")
    os.environ[BACKEND_ENV] = "torch"
    torch_best, torch_med = cuda_time(lambda: token_gae(r, v, m, discount=0.99, lam=lam, bootstrap=boot), reps=5)
    os.environ.pop(BACKEND_ENV)
    print(f"{'pure-torch backend (log-depth scan)':<44}{torch_best * 1e3:9.3f} {torch_med * 1e3:9.3f}"
          f"   {'':>7}         {torch_best / copy_best:5.2f}x copy")
    turn_best, turn_med = cuda_time(lambda: turn_gae(r, v, b["turn_mask"], b["turn_ids"], discount=0.99, lam=lam,
                                                     bootstrap=boot), reps=5)
    print(f"{'turn_gae (torch scatter/gather + triton)':<44}{turn_best * 1e3:9.3f} {turn_med * 1e3:9.3f}")
    ref_best, _ = cuda_time(lambda: reference_token_gae(r, v, m, 0.99, lam, boot), reps=1, warmup=0)
    print(f"{'reference loop over T (AReaL 1.0.4)':<44}{ref_best * 1e3:9.1f}"
          f"   -> triton is {ref_best / best_kernel:.0f}x faster")
    print(f"\nRATIO triton / D2D copy of its inputs: {best_kernel / copy_best:.2f} "
          f"(GPU: {torch.cuda.get_device_name()})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--no-sweep", action="store_true", help="only the default launch config")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("CUDA is not available: nothing to do")
        return 2
    if not TRITON_AVAILABLE:
        print("triton is not importable: nothing to do")
        return 2
    import triton

    print(f"GPU {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}")
    ok = check_correctness(sweep=not args.no_sweep)
    bench_big(sweep=not args.no_sweep)
    print("\nCORRECTNESS:", "all checks passed" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
