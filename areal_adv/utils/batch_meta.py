"""Batch metadata: how the rows of a padded batch group into prompts and logical rollouts.

Rows are grouped by prompt (a *trajectory group*), and a prompt's rows may be
split further into *logical rollouts* (one sampled episode exported as several
rows, e.g. one per turn). `TrajBatchMeta` records that layout so group
statistics never have to be guessed from a fixed group size; `RolloutGroup`
describes one prompt's split and its optional explicit reference rewards.
Everything is immutable and validated on construction, with errors naming the field.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from areal_adv.utils.indices import as_int, index_from_counts, int_tuple
from areal_adv.utils.numbers import is_number

__all__ = ["RolloutGroup", "TrajBatchMeta"]


@dataclass(frozen=True, eq=False)
class RolloutGroup:
    """How one prompt's rows split into logical rollouts (sampled episodes).

    `row_counts[k]` is the number of consecutive tensor rows of logical rollout k.
    `rewards`, when given, holds one explicit reference reward per logical rollout;
    reward normalisation uses it instead of the rows' values (e.g. to bypass a
    per-row length penalty). It is stored as a detached copy so later edits of the
    caller's tensor cannot change the metadata.
    """

    row_counts: tuple[int, ...]
    rewards: torch.Tensor | None = None

    def __post_init__(self) -> None:
        counts = int_tuple("RolloutGroup.row_counts", self.row_counts, minimum=1)
        object.__setattr__(self, "row_counts", counts)
        object.__setattr__(self, "rewards", _check_reference_rewards(self.rewards, len(counts)))

    @property
    def n_rows(self) -> int:
        return sum(self.row_counts)

    @property
    def n_logical(self) -> int:
        return len(self.row_counts)

    def row_to_rollout(self, device: torch.device | str | None = None) -> torch.Tensor:
        """LongTensor[n_rows]: the logical rollout of each row."""
        return index_from_counts(self.row_counts, device)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RolloutGroup):
            return NotImplemented
        if self.row_counts != other.row_counts:
            return False
        if self.rewards is None or other.rewards is None:
            return self.rewards is None and other.rewards is None
        return self.rewards.dtype == other.rewards.dtype and torch.equal(self.rewards.cpu(), other.rewards.cpu())

    def __hash__(self) -> int:
        return hash(self.row_counts)

    def __repr__(self) -> str:
        rewards = None if self.rewards is None else self.rewards.tolist()
        return f"RolloutGroup(row_counts={self.row_counts}, rewards={rewards})"


def _check_reference_rewards(rewards: Any, n_logical: int) -> torch.Tensor | None:
    """Explicit references: finite floats, one per logical rollout (lists become float64)."""
    if rewards is None:
        return None
    field = "RolloutGroup.rewards"
    if isinstance(rewards, torch.Tensor):
        tensor = rewards.detach().clone()
    else:
        try:
            tensor = torch.as_tensor(rewards, dtype=torch.float64)
        except (TypeError, ValueError, RuntimeError) as exc:
            raise ValueError(
                f"{field}: got {rewards!r} ({type(rewards).__name__}), expected a float tensor or a "
                f"sequence of {n_logical} numbers ({exc})"
            ) from None
    if tensor.device.type == "meta":
        raise ValueError(
            f"{field}: on device meta (a tensor without data), expected {n_logical} finite numbers "
            "with values (on the CPU or the batch's device)"
        )
    if tensor.dtype == torch.bool or tensor.is_complex():
        raise ValueError(f"{field}: got dtype {tensor.dtype}, expected a real (float) tensor")
    if not tensor.dtype.is_floating_point:
        tensor = tensor.to(torch.float64)
    if tuple(tensor.shape) != (n_logical,):
        raise ValueError(
            f"{field}: got shape {tuple(tensor.shape)}, expected ({n_logical},) "
            "(one reference per logical rollout, len(row_counts))"
        )
    finite = torch.isfinite(tensor)
    if not bool(finite.all()):
        bad = int((~finite).nonzero()[0, 0])
        raise ValueError(f"{field}[{bad}]: got {tensor[bad].item()!r}, expected a finite number")
    return tensor


def _check_reward_names(keys: Any, weights: Any) -> tuple[tuple[str, ...] | None, tuple[float, ...] | None]:
    """Reward component names (unique, non-empty strings) and their finite weights."""
    if keys is None:
        if weights is not None:
            raise ValueError("TrajBatchMeta.reward_weights: given without reward_keys; name the components too")
        return None, None
    if isinstance(keys, (str, bytes)) or not isinstance(keys, Sequence) or not keys:
        raise ValueError(f"TrajBatchMeta.reward_keys: got {keys!r}, expected a non-empty sequence of component names")
    keys = tuple(keys)
    for i, key in enumerate(keys):
        if not isinstance(key, str) or not key:
            raise ValueError(f"TrajBatchMeta.reward_keys[{i}]: got {key!r}, expected a non-empty string")
    if len(set(keys)) != len(keys):
        raise ValueError(f"TrajBatchMeta.reward_keys: names must be unique, got {list(keys)}")
    if weights is None:
        return keys, None
    if isinstance(weights, (str, bytes)) or not isinstance(weights, Sequence) or len(weights) != len(keys):
        raise ValueError(
            f"TrajBatchMeta.reward_weights: got {weights!r}, expected {len(keys)} numbers (one per "
            f"reward key {list(keys)})"
        )
    out = []
    for i, w in enumerate(weights):
        if not is_number(w):
            raise ValueError(f"TrajBatchMeta.reward_weights[{i}]: got {w!r}, expected a finite number")
        out.append(float(w))
    return keys, tuple(out)


@dataclass(frozen=True)
class TrajBatchMeta:
    """Layout of a concatenated batch: rows per prompt and their logical rollouts.

    `traj_seqlens` are each input group's own padded length before concatenation
    (empty when unknown, e.g. from `from_group_sizes`). `rollout_groups` is None
    when no prompt has split rollouts; otherwise one entry per prompt, None for a
    prompt whose every row is its own rollout. `reward_keys` names the K
    components of an [B, K] `rewards` tensor and `reward_weights` their weights
    in the scalar reward (None: ones); both are None for a [B] reward. `complete`
    is False for the metadata the advantage pipeline makes up for a bare batch
    (a fixed group size, no logical rollouts): group statistics then fall back to
    the legacy layout, and shaped references are refused.
    """

    n_trajs: int
    traj_group_sizes: tuple[int, ...]
    traj_seqlens: tuple[int, ...] = ()
    rollout_groups: tuple[RolloutGroup | None, ...] | None = None
    reward_keys: tuple[str, ...] | None = None
    reward_weights: tuple[float, ...] | None = None
    complete: bool = field(default=True, compare=False, repr=False)

    def __post_init__(self) -> None:
        n_trajs = as_int(self.n_trajs)
        if n_trajs is not None:
            object.__setattr__(self, "n_trajs", n_trajs)
        object.__setattr__(
            self, "traj_group_sizes", int_tuple("TrajBatchMeta.traj_group_sizes", self.traj_group_sizes, minimum=1)
        )
        object.__setattr__(
            self,
            "traj_seqlens",
            int_tuple("TrajBatchMeta.traj_seqlens", self.traj_seqlens, minimum=1, allow_empty=True),
        )
        groups = self.rollout_groups
        if groups is not None:
            if isinstance(groups, (str, bytes)) or not isinstance(groups, Sequence):
                raise ValueError(
                    f"TrajBatchMeta.rollout_groups: got {type(groups).__name__}, expected None or a "
                    "sequence with one RolloutGroup or None per trajectory group"
                )
            object.__setattr__(self, "rollout_groups", tuple(groups))
        self._check_structure("TrajBatchMeta")
        keys, weights = _check_reward_names(self.reward_keys, self.reward_weights)
        object.__setattr__(self, "reward_keys", keys)
        object.__setattr__(self, "reward_weights", weights)
        if self.rollout_groups is not None and all(g is None for g in self.rollout_groups):
            object.__setattr__(self, "rollout_groups", None)  # one canonical form for "no split rollouts"

    # -- construction ------------------------------------------------------

    @classmethod
    def from_group_sizes(cls, sizes: Sequence[int], seqlens: Sequence[int] = ()) -> TrajBatchMeta:
        """Metadata for a batch without split rollouts: each row is its own rollout."""
        sizes = int_tuple("TrajBatchMeta.traj_group_sizes", sizes, minimum=1)
        return cls(n_trajs=len(sizes), traj_group_sizes=sizes, traj_seqlens=tuple(seqlens))

    # -- validation --------------------------------------------------------

    def _check_structure(self, prefix: str) -> None:
        n = as_int(self.n_trajs)
        if n is None or n < 1:
            raise ValueError(f"{prefix}.n_trajs: got {self.n_trajs!r}, expected an integer >= 1")
        int_tuple(f"{prefix}.traj_group_sizes", self.traj_group_sizes, minimum=1)
        if len(self.traj_group_sizes) != n:
            raise ValueError(
                f"{prefix}.traj_group_sizes: got {len(self.traj_group_sizes)} sizes, expected "
                f"n_trajs={n} (one per trajectory group)"
            )
        int_tuple(f"{prefix}.traj_seqlens", self.traj_seqlens, minimum=1, allow_empty=True)
        if self.traj_seqlens and len(self.traj_seqlens) != n:
            raise ValueError(
                f"{prefix}.traj_seqlens: got {len(self.traj_seqlens)} lengths, expected n_trajs={n} "
                "(or none when unknown)"
            )
        if self.rollout_groups is None:
            return
        if len(self.rollout_groups) != n:
            raise ValueError(f"{prefix}.rollout_groups: got {len(self.rollout_groups)} entries, expected n_trajs={n}")
        for i, (group, rows) in enumerate(zip(self.rollout_groups, self.traj_group_sizes)):
            if group is None:
                continue
            if not isinstance(group, RolloutGroup):
                raise ValueError(
                    f"{prefix}.rollout_groups[{i}]: got {type(group).__name__}, expected a RolloutGroup or None"
                )
            if group.n_rows != rows:
                raise ValueError(
                    f"{prefix}.rollout_groups[{i}].row_counts: {list(group.row_counts)} sum to "
                    f"{group.n_rows} rows, expected traj_group_sizes[{i}]={rows}"
                )

    def validate(self, batch_size: int, *, field_prefix: str = "meta") -> None:
        """Check the metadata describes a batch of `batch_size` rows; errors name the field."""
        self._check_structure(field_prefix)
        self._check_references(field_prefix)
        total = sum(self.traj_group_sizes)
        if total != batch_size:
            raise ValueError(
                f"{field_prefix}.traj_group_sizes: sizes sum to {total} rows, expected the batch size {batch_size}"
            )

    def _check_references(self, prefix: str) -> None:
        """Explicit references again, at use: a tensor can be written after construction."""
        for i, group in enumerate(self.rollout_groups or ()):
            if group is None or group.rewards is None:
                continue
            field = f"{prefix}.rollout_groups[{i}].rewards"
            rewards = group.rewards
            if not isinstance(rewards, torch.Tensor) or tuple(rewards.shape) != (group.n_logical,):
                shape = tuple(rewards.shape) if isinstance(rewards, torch.Tensor) else type(rewards).__name__
                raise ValueError(f"{field}: got {shape}, expected a tensor of shape ({group.n_logical},)")
            if rewards.device.type == "meta":
                raise ValueError(f"{field}: on device meta (a tensor without data), expected real values")
            if not rewards.dtype.is_floating_point:
                raise ValueError(f"{field}: got dtype {rewards.dtype}, expected a float tensor")
            finite = torch.isfinite(rewards)
            if not bool(finite.all()):
                bad = int((~finite).nonzero()[0, 0])
                raise ValueError(
                    f"{field}[{bad}]: got {rewards[bad].item()!r}, expected a finite number (the reference "
                    "was changed after the RolloutGroup was built)"
                )

    # -- derived layout ----------------------------------------------------

    @property
    def n_rows(self) -> int:
        return sum(self.traj_group_sizes)

    @property
    def logical_group_sizes(self) -> tuple[int, ...]:
        """Logical rollouts per prompt (a prompt without a RolloutGroup: one per row)."""
        if self.rollout_groups is None:
            return self.traj_group_sizes
        return tuple(
            rows if group is None else group.n_logical
            for group, rows in zip(self.rollout_groups, self.traj_group_sizes)
        )

    @property
    def n_logical(self) -> int:
        return sum(self.logical_group_sizes)

    def _logical_row_counts(self) -> list[int]:
        """Rows of every logical rollout, in batch order (loops over prompts, not rows)."""
        if self.rollout_groups is None:
            return [1] * self.n_rows
        counts: list[int] = []
        for group, rows in zip(self.rollout_groups, self.traj_group_sizes):
            counts.extend([1] * rows if group is None else group.row_counts)
        return counts

    def row_group_index(self, device: torch.device | str | None = None) -> torch.Tensor:
        """LongTensor[B]: the prompt (trajectory group) index of each row."""
        return index_from_counts(self.traj_group_sizes, device)

    def logical_row_index(self, device: torch.device | str | None = None) -> torch.Tensor:
        """LongTensor[B]: the global logical-rollout index of each row, counted across prompts."""
        if self.rollout_groups is None:
            return torch.arange(self.n_rows, device=device)
        return index_from_counts(self._logical_row_counts(), device)

    def logical_group_index(self, device: torch.device | str | None = None) -> torch.Tensor:
        """LongTensor[n_logical]: the prompt index of each logical rollout."""
        return index_from_counts(self.logical_group_sizes, device)

    def reference_rewards(self) -> torch.Tensor | None:
        """Explicit per-logical-rollout references for the whole batch (float64), or None.

        References are all-or-nothing: once one prompt supplies them, every prompt
        must (through a RolloutGroup with rewards), so that entry k is logical rollout k.
        """
        if self.rollout_groups is None:
            return None
        given = [g is not None and g.rewards is not None for g in self.rollout_groups]
        if not any(given):
            return None
        if not all(given):
            missing = [i for i, ok in enumerate(given) if not ok]
            supplied = [i for i, ok in enumerate(given) if ok]
            raise ValueError(
                f"meta.rollout_groups: trajectory groups {supplied} give explicit reference rewards "
                f"(RolloutGroup.rewards) but groups {missing} do not; expected every trajectory group "
                "to have a RolloutGroup with rewards (one per logical rollout) or none of them"
            )
        device = self.rollout_groups[0].rewards.device  # type: ignore[union-attr]
        return torch.cat([g.rewards.to(device, torch.float64) for g in self.rollout_groups])  # type: ignore[union-attr]
