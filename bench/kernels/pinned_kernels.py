"""PyTorch's CPU kernels pinned to AVX2, so that a benchmark row reproduces bit for bit on any x86-64 machine.

ATen picks its vectorised CPU kernels by what the processor offers (AVX2, or
AVX-512 where present), and the two round differently in the last bits: the
same seed then samples other tokens after a few updates. The estimator suite's
rows are checked bit for bit (behaviour fingerprints, exact reruns), so its
scripts set `ATEN_CPU_CAPABILITY=avx2` (the kernels a machine without AVX-512
runs) before torch is first imported; a caller's own setting is kept. On an
AVX-512 machine the committed fingerprints matched with the pin and none matched
without it. ATen reads the variable when it first picks a kernel (its first
operation), not when torch is imported, so the pin must come before torch runs
anything, which this module checks: an interpreter forked from one that imported
torch without running it (the test suite starts scripts so) can still pin.
"""

from __future__ import annotations

import os
import sys

VARIABLE = "ATEN_CPU_CAPABILITY"
LEVEL = "avx2"


def pin_before_torch() -> None:
    """Sets ATEN_CPU_CAPABILITY=avx2 unless already set; an error if ATen has already picked other kernels.

    Before torch is imported the pin cannot fail to take. After it, ATen is asked which kernels it runs (that
    fixes its choice, with the pin in place): anything but the pinned level means an operation ran first.
    """
    os.environ.setdefault(VARIABLE, LEVEL)
    torch = sys.modules.get("torch")
    if torch is None:
        return
    got, wanted = torch.backends.cpu.get_cpu_capability(), os.environ[VARIABLE].upper()
    if got != wanted:
        raise RuntimeError(
            f"pinned_kernels: ATen runs its {got} CPU kernels, not the pinned {wanted}: it picked them at an "
            f"operation before the pin, or this processor lacks {wanted}"
        )


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
