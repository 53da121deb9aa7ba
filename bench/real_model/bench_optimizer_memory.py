"""Peak memory and time of AdamW steps on SmolLM2-135M's parameters: float32 state against low-bit libraries.

Usage (one optimiser per process, so each peak is its own):
    for k in torch torchao8 torchao4 bnb8; do .venv/bin/python -m bench.real_model.bench_optimizer_memory $k; done

`torch`: torch's AdamW (float32 moments); `torchao8` / `torchao4`: torchao's `AdamW8bit` /
`AdamW4bit` (block-quantised moments); `bnb8`: bitsandbytes' `AdamW8bit` on its CPU backend.
The libraries are not dependencies of areal-adv: install them beside it to run those
(`pip install torchao bitsandbytes`). The model is built from the converted folder's
config (random weights: the optimiser's memory depends on the shapes only) with a random
gradient on every parameter; three `step()` calls are timed, and the process's peak RSS
(`ru_maxrss`) is printed before the optimiser is built and after its steps.
"""

from __future__ import annotations

import resource
import sys
import time

import torch


def _rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def _optimizer(kind: str, params: list[torch.nn.Parameter]) -> torch.optim.Optimizer:
    if kind == "torch":
        return torch.optim.AdamW(params, lr=1e-6, foreach=False)
    if kind in ("torchao8", "torchao4"):
        from torchao.optim import AdamW4bit, AdamW8bit

        return (AdamW8bit if kind == "torchao8" else AdamW4bit)(params, lr=1e-6)
    if kind == "bnb8":
        import bitsandbytes as bnb

        return bnb.optim.AdamW8bit(params, lr=1e-6)
    raise SystemExit(f"optimizer: got {kind!r}, expected one of torch, torchao8, torchao4, bnb8")


def main(argv: list[str]) -> None:
    from transformers import AutoConfig, AutoModelForCausalLM

    kind = argv[0] if argv else "torch"
    folder = argv[1] if len(argv) > 1 else "runs/models/SmolLM2-135M-Instruct"
    torch.set_num_threads(1)
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(folder))
    params = list(model.parameters())
    for p in params:
        p.grad = torch.randn_like(p) * 1e-3
    before = _rss_gib()
    opt = _optimizer(kind, params)
    seconds = []
    for _ in range(3):
        began = time.perf_counter()
        opt.step()
        seconds.append(round(time.perf_counter() - began, 2))
    n = sum(p.numel() for p in params) / 1e6
    print(
        f"{kind}: params {n:.1f} M, peak RSS before the optimizer {before:.3f} GiB, "
        f"after 3 steps {_rss_gib():.3f} GiB, step seconds {seconds}",
        flush=True,
    )


if __name__ == "__main__":
    main(sys.argv[1:])
