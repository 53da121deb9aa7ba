"""Reading a checkpoint's `state/` (torch.distributed.checkpoint) in a test: every tensor, by flat name."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import torch


def _flatten(data: Any, prefix: str, out: dict[str, Any]) -> None:
    if isinstance(data, dict):
        for key, value in data.items():
            _flatten(value, f"{prefix}{key}.", out)
    else:
        out[prefix[:-1]] = data


def state_tensors(checkpoint: Path) -> dict[str, torch.Tensor]:
    """{"policy.model.<param>": ..., "policy.optimizer.state.<param>.exp_avg": ..., "critic...."}: full tensors."""
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    with tempfile.TemporaryDirectory() as tmp:
        dcp_to_torch_save(checkpoint / "state", Path(tmp) / "state.pt")
        nested = torch.load(Path(tmp) / "state.pt", weights_only=True)
    flat: dict[str, Any] = {}
    _flatten(nested, "", flat)
    return {k: v for k, v in flat.items() if isinstance(v, torch.Tensor)}


def engine_tensors(engine: Any, name: str) -> dict[str, torch.Tensor]:
    """An engine's live weights and AdamW states under the names `state_tensors` gives them (one process)."""
    from areal_adv.trainer.parallel.sharded_state import engine_state

    flat: dict[str, Any] = {}
    _flatten(engine_state(engine), f"{name}.", flat)
    return {k: v for k, v in flat.items() if isinstance(v, torch.Tensor)}
