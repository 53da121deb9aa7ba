"""PyTorch's CPU kernels pinned to AVX2, so that a benchmark row reproduces bit for bit on any x86-64 machine.

ATen picks its vectorised CPU kernels by what the processor offers (AVX2, or
AVX-512 where present), and the two round differently in the last bits: the
same seed then samples other tokens after a few updates. The estimator suite's
rows are checked bit for bit (behaviour fingerprints, exact reruns), so its
scripts set `ATEN_CPU_CAPABILITY=avx2` (the kernels a machine without AVX-512
runs) before torch is first imported; a caller's own setting is kept. On an
AVX-512 machine the committed fingerprints matched with the pin and none matched
without it. ATen reads the variable at its first operation, so the pin must
come before torch runs anything, which this module checks.
"""

from __future__ import annotations

import os
import sys

VARIABLE = "ATEN_CPU_CAPABILITY"
LEVEL = "avx2"


def pin_before_torch() -> None:
    """Sets ATEN_CPU_CAPABILITY=avx2 unless already set; an error once torch is imported (too late to take)."""
    if "torch" in sys.modules and VARIABLE not in os.environ:
        raise RuntimeError(f"pinned_kernels: torch is already imported, so {VARIABLE}={LEVEL} would not take effect")
    os.environ.setdefault(VARIABLE, LEVEL)


def capability_note() -> str | None:
    """None when ATen runs the pinned kernels; else a line saying which it runs and what that means for bits."""
    import torch

    got = torch.backends.cpu.get_cpu_capability()
    if got == LEVEL.upper():
        return None
    return (
        f"ATen runs its {got} CPU kernels, not {LEVEL.upper()} (set {VARIABLE}={LEVEL}): fingerprints and "
        "exact reruns of rows recorded with AVX2 kernels may differ in the last bits"
    )
