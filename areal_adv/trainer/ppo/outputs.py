"""The output dict never shares memory with the caller's batch for the fields the pipeline emits.

Some emitted fields would otherwise be the caller's tensors themselves: the
identity outcome stage returns `rewards` as it came, `is_truncated` is already
bool, and with `use_decoupled_loss` `prox_logp` passes through. Editing such an
output in place would edit the caller's batch. `unalias` copies exactly those
fields (storage comparison, no pass over the data), so the common case costs
nothing. Fields the pipeline does not emit (`input_ids`, `attention_mask`,
`values`, ...) are passed through as the caller's own tensors, by design.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

__all__ = ["unalias"]


def _storage(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


def unalias(fields: Mapping[str, Any], data: Mapping[str, Any]) -> dict[str, Any]:
    """`fields` with every tensor that shares storage with a tensor of `data` replaced by a copy."""
    owned = {_storage(v) for v in data.values() if torch.is_tensor(v) and v.numel() > 0}
    return {
        k: v.clone() if torch.is_tensor(v) and v.numel() > 0 and _storage(v) in owned else v for k, v in fields.items()
    }
