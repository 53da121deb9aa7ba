"""sha256 of a module's weights: equal iff two replicas (or a module before and after a round trip) are equal."""

from __future__ import annotations

import hashlib

import torch


def module_checksum(module: torch.nn.Module) -> str:
    """sha256 of a module's state dict (names, dtypes, shapes and bytes).

    An FSDP-sharded module is hashed over its full weights, which makes the call
    a collective (every rank must make it).
    """
    from areal_adv.trainer.parallel.engine import full_state_dict

    digest = hashlib.sha256()
    for name, tensor in full_state_dict(module).items():
        t = tensor.detach().to("cpu").contiguous()
        digest.update(f"{name}:{t.dtype}:{tuple(t.shape)};".encode())
        digest.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()
