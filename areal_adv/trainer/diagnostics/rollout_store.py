"""Saved rollouts: each step's batch as a safetensors file in the run directory (`output.save_rollouts`).

`rollouts/step_<N>.safetensors` holds every tensor of the step's batch as the
advantage pipeline received it (tokens, masks, log-probs, rewards, values,
prompt keys, ...), plus `sum_pi_squared` (Σπ² of the behaviour policy, at each
token), `group_ids` (each row's prompt group) and `active.advantages` (the run's
own advantages, aligned). The batch layout (`TrajBatchMeta`) and any non-tensor
field go into the file's metadata as JSON. `areal-adv diagnose` reads them back;
the trainer's `SavedRollouts` step observer (`areal_adv.trainer.run.diagnostics_observers`)
writes them.
In a data-parallel run each rank writes its own groups, rank r > 0 to
`step_<N>.rank<r>.safetensors`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from areal_adv.utils.batch_meta import RolloutGroup, TrajBatchMeta
from areal_adv.utils.file_modes import normal_mode

__all__ = [
    "ROLLOUT_DIR",
    "SavedRollout",
    "load_rollout",
    "rollout_path",
    "rollout_steps",
    "save_rollout",
]

ROLLOUT_DIR = "rollouts"
_ACTIVE = "active.advantages"
_NAME = re.compile(r"^step_(\d+)\.safetensors$")


def rollout_path(run_dir: Path, step: int, rank: int = 0) -> Path:
    """The file of `step`'s batch on `rank` (zero-padded steps, so a listing sorts them in order)."""
    suffix = "" if rank == 0 else f".rank{rank}"
    return Path(run_dir) / ROLLOUT_DIR / f"step_{step:06d}{suffix}.safetensors"


def _meta_json(meta: TrajBatchMeta) -> str:
    """The batch layout as JSON: safetensors metadata holds strings only."""
    groups = None
    if meta.rollout_groups is not None:
        groups = [
            None
            if g is None
            else {"row_counts": list(g.row_counts), "rewards": None if g.rewards is None else g.rewards.tolist()}
            for g in meta.rollout_groups
        ]
    return json.dumps(
        {
            "n_trajs": meta.n_trajs,
            "traj_group_sizes": list(meta.traj_group_sizes),
            "traj_seqlens": list(meta.traj_seqlens),
            "rollout_groups": groups,
            "reward_keys": None if meta.reward_keys is None else list(meta.reward_keys),
            "reward_weights": None if meta.reward_weights is None else list(meta.reward_weights),
        }
    )


def _meta_from_json(text: str) -> TrajBatchMeta:
    """The `TrajBatchMeta` that `_meta_json` wrote."""
    d = json.loads(text)
    groups = d["rollout_groups"]
    if groups is not None:
        groups = tuple(
            None
            if g is None
            else RolloutGroup(tuple(g["row_counts"]), None if g["rewards"] is None else torch.tensor(g["rewards"]))
            for g in groups
        )
    return TrajBatchMeta(
        n_trajs=d["n_trajs"],
        traj_group_sizes=tuple(d["traj_group_sizes"]),
        traj_seqlens=tuple(d["traj_seqlens"]),
        rollout_groups=groups,
        reward_keys=None if d["reward_keys"] is None else tuple(d["reward_keys"]),
        reward_weights=None if d["reward_weights"] is None else tuple(d["reward_weights"]),
    )


def save_rollout(
    path: Path,
    batch: Mapping[str, Any],
    meta: TrajBatchMeta,
    *,
    advantages: torch.Tensor,
    sum_pi_squared: torch.Tensor | None,
) -> Path:
    """Write one step's batch (copies on the CPU; the caller's tensors are untouched)."""
    from safetensors.torch import save_file

    tensors = {k: v.detach().to("cpu").contiguous().clone() for k, v in batch.items() if isinstance(v, torch.Tensor)}
    other = {k: v for k, v in batch.items() if not isinstance(v, torch.Tensor)}
    if sum_pi_squared is not None and "sum_pi_squared" not in tensors:
        tensors["sum_pi_squared"] = sum_pi_squared.detach().to("cpu").contiguous().clone()
    sizes = torch.tensor(meta.traj_group_sizes, dtype=torch.long)
    tensors["group_ids"] = torch.repeat_interleave(torch.arange(len(sizes)), sizes)
    tensors[_ACTIVE] = advantages.detach().to("cpu").contiguous().clone()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    save_file(tensors, str(tmp), metadata={"meta": _meta_json(meta), "other": json.dumps(other, default=list)})
    normal_mode(tmp)  # safetensors writes owner-only files; the run's other files follow the umask
    tmp.replace(path)
    return path


@dataclass
class SavedRollout:
    """One saved step: the batch as the pipeline received it, its layout, Σπ² and the run's own advantages."""

    step: int
    batch: dict[str, Any]
    meta: TrajBatchMeta
    sum_pi_squared: torch.Tensor | None
    active_advantages: torch.Tensor


def load_rollout(path: Path) -> SavedRollout:
    """Read a file `save_rollout` wrote."""
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as fh:
        tensors = {k: fh.get_tensor(k) for k in fh.keys()}
        header = fh.metadata() or {}
    match = re.match(r"^step_(\d+)", Path(path).name)
    if match is None or "meta" not in header:
        raise ValueError(f"{path}: not a saved rollout (expected step_<N>.safetensors written by output.save_rollouts)")
    active = tensors.pop(_ACTIVE)
    tensors.pop("group_ids", None)
    batch: dict[str, Any] = {**json.loads(header.get("other", "{}")), **tensors}
    return SavedRollout(
        step=int(match.group(1)),
        batch=batch,
        meta=_meta_from_json(header["meta"]),
        sum_pi_squared=batch.get("sum_pi_squared"),
        active_advantages=active,
    )


def rollout_steps(run_dir: Path) -> dict[int, Path]:
    """{step: file} of rank 0's saved rollouts in `run_dir` (other ranks' files are not listed)."""
    folder = Path(run_dir) / ROLLOUT_DIR
    found = {}
    for path in sorted(folder.glob("step_*.safetensors")) if folder.is_dir() else []:
        match = _NAME.match(path.name)
        if match:
            found[int(match.group(1))] = path
    return found
