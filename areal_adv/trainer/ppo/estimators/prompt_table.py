"""Per-prompt tables for stateful stages: prompt keys from the batch, vectorised lookup and merge.

A stateful baseline (KRPO's Kalman filters, SPO's value tracker) keeps a few
numbers per prompt across steps. The rollout identifies prompts by an integer key
per row, `prompt_keys` [B] (e.g. a hash of the prompt's dataset row; the trainer
adds it), equal on every row of a prompt group. Tables are sorted key tensors plus
a value matrix, so looking up or merging a batch is one `searchsorted` and one
sort, never a Python loop over prompts.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from areal_adv.utils.data import TrajBatchMeta

__all__ = ["PROMPT_KEYS", "group_prompt_keys", "table_lookup", "table_merge"]

#: The batch field holding one integer prompt key per row.
PROMPT_KEYS = "prompt_keys"


def group_prompt_keys(data: Mapping[str, Any], meta: TrajBatchMeta, where: str) -> torch.Tensor:
    """LongTensor[G]: the key of each prompt group, checked to be one key per group."""
    keys = data.get(PROMPT_KEYS)
    n_rows = data["input_ids"].shape[0]
    if keys is None:
        raise ValueError(
            f"{where}: the batch has no {PROMPT_KEYS!r}; a per-prompt state needs one integer key per row "
            f"[B] = [{n_rows}], equal within a prompt group (e.g. a hash of the prompt; the trainer adds it)"
        )
    if not torch.is_tensor(keys) or tuple(keys.shape) != (n_rows,):
        shape = tuple(keys.shape) if torch.is_tensor(keys) else type(keys).__name__
        raise ValueError(f"{where}: {PROMPT_KEYS!r} is {shape}, expected an integer tensor of shape ({n_rows},)")
    if keys.dtype.is_floating_point or keys.is_complex() or keys.dtype == torch.bool:
        raise ValueError(f"{where}: {PROMPT_KEYS!r} has dtype {keys.dtype}, expected an integer tensor")
    keys = keys.long()
    group = meta.row_group_index(keys.device)
    starts = torch.cumsum(torch.as_tensor(meta.traj_group_sizes, device=keys.device), 0) - group.new_tensor(
        meta.traj_group_sizes
    )
    first = keys[starts]
    differs = keys != first[group]
    if bool(differs.any()):
        row = int(differs.nonzero()[0, 0])
        g = int(group[row])
        raise ValueError(
            f"{where}: {PROMPT_KEYS!r} differ within prompt group {g} (row {row}: {int(keys[row])} vs row "
            f"{int(starts[g])}: {int(first[g])}); a prompt group shares one prompt and one key"
        )
    return first


def table_lookup(
    table_keys: torch.Tensor, table_values: torch.Tensor, query: torch.Tensor, default: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(values [N, C], found [N]) for `query` keys; rows not in the table get `default` [C]."""
    query = query.to(table_keys.device)
    if table_keys.numel() == 0:
        return default.expand(query.shape[0], -1).clone(), torch.zeros_like(query, dtype=torch.bool)
    pos = torch.searchsorted(table_keys, query).clamp(max=table_keys.numel() - 1)
    found = table_keys[pos] == query
    values = torch.where(found[:, None], table_values[pos], default.expand(query.shape[0], -1))
    return values, found


def table_merge(
    table_keys: torch.Tensor, table_values: torch.Tensor, keys: torch.Tensor, values: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The table with `values` [N, C] stored under `keys` [N] (unique): new keys added, old ones replaced."""
    keys = keys.to(table_keys.device)
    values = values.to(table_values.device, table_values.dtype)
    if table_keys.numel():
        _, found = table_lookup(table_keys, table_values, keys, values.new_zeros(values.shape[1]))
        pos = torch.searchsorted(table_keys, keys).clamp(max=table_keys.numel() - 1)
        replaced = torch.zeros_like(table_keys, dtype=torch.bool)
        replaced[pos[found]] = True
        table_keys, table_values = table_keys[~replaced], table_values[~replaced]
    merged_keys = torch.cat([table_keys, keys])
    order = torch.argsort(merged_keys, stable=True)
    return merged_keys[order], torch.cat([table_values, values])[order]
