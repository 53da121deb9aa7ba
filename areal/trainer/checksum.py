"""sha256 of a module's weights: equal iff two replicas (or a module before and after a round trip) are equal."""

from __future__ import annotations

import hashlib

import torch


def module_checksum(module: torch.nn.Module) -> str:
    """sha256 of a module's state dict (names, dtypes, shapes and bytes)."""
    digest = hashlib.sha256()
    for name, tensor in module.state_dict().items():
        t = tensor.detach().to("cpu").contiguous()
        digest.update(f"{name}:{t.dtype}:{tuple(t.shape)};".encode())
        digest.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()
