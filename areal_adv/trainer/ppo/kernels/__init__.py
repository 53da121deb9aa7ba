"""GAE kernels and the internal choice between them.

Backends, all computing the same token-GAE recurrence on float32 [B, T]:

* ``numba``  - compiled CPU kernel (default for CPU tensors);
* ``triton`` - CUDA kernel (default for CUDA tensors when triton imports);
* ``torch``  - vectorised pure-torch path, any device (the fallback).

``AREAL_GAE_BACKEND=numba|torch|triton`` forces one (tests, benchmarks); a
forced backend that cannot run on the given device is an error, never a
silent fallback, so a benchmark cannot measure the wrong kernel.

The bottom of `areal_adv.trainer.ppo`: the kernels take and return tensors and may
import only `areal_adv.utils`.
"""

from __future__ import annotations

import os

import torch

from .numba_cpu import NUMBA_AVAILABLE, token_gae_numba, turn_gae_numba
from .torch_ref import token_gae_torch
from .triton_gae import TRITON_AVAILABLE, token_gae_triton

BACKEND_ENV = "AREAL_GAE_BACKEND"
BACKENDS = ("numba", "torch", "triton")

_KERNELS = {"numba": token_gae_numba, "torch": token_gae_torch, "triton": token_gae_triton}

#: Backends with a dedicated turn-GAE kernel (validate, sum, recur and broadcast
#: in one compiled pass per row); the others run the token kernel over turns.
FUSED_TURN_KERNELS = {"numba": turn_gae_numba}


def available_backends(device: torch.device | str = "cpu") -> list[str]:
    """Backends that can run on `device` in this process."""
    device = torch.device(device)
    found = ["torch"]
    if device.type == "cpu" and NUMBA_AVAILABLE:
        found.insert(0, "numba")
    if device.type == "cuda" and TRITON_AVAILABLE:
        found.insert(0, "triton")
    return found


def select_backend(device: torch.device) -> str:
    """The backend for `device`: the env override, else the fastest available."""
    forced = os.environ.get(BACKEND_ENV, "").strip().lower()
    usable = available_backends(device)
    if not forced:
        return usable[0]
    if forced not in BACKENDS:
        raise ValueError(f"{BACKEND_ENV}={forced!r}: expected one of {list(BACKENDS)} or unset")
    if forced not in usable:
        raise RuntimeError(f"{BACKEND_ENV}={forced!r} cannot run on device {device} here; usable: {usable}")
    return forced


def run_token_gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor,
    coef: torch.Tensor,
    bootstrap: torch.Tensor,
    discount: float,
    backend: str | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Run token GAE on prepared float32 tensors with the chosen backend."""
    name = backend or select_backend(rewards.device)
    return _KERNELS[name](rewards, values, mask, coef, bootstrap, discount)


__all__ = [
    "BACKENDS",
    "BACKEND_ENV",
    "FUSED_TURN_KERNELS",
    "NUMBA_AVAILABLE",
    "TRITON_AVAILABLE",
    "available_backends",
    "run_token_gae",
    "select_backend",
]
