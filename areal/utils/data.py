"""Batch metadata, batch concatenation, normalisation and KL estimators.

The advantage pipeline works on one padded batch of B rows. Rows are grouped by
prompt (a *trajectory group*), and a prompt's rows may be split further into
*logical rollouts* (one sampled episode exported as several rows, e.g. one per
turn). `TrajBatchMeta` records that layout so group statistics never have to be
guessed from a fixed group size; `concat_batch` builds it while concatenating
per-prompt trajectory groups.

Everything here is pure: inputs are never modified in place, and index
construction / group statistics are vectorised (no Python loop over rows or
groups in the numeric paths).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from areal.api.cli_args import NormConfig
from areal.utils import norm_kernels

__all__ = [
    "RolloutGroup",
    "TrajBatchMeta",
    "concat_batch",
    "Normalization",
    "KLEstimator",
    "KL_ESTIMATORS",
]

#: Padding value of 2-D tensors by key when groups of different lengths are concatenated.
_PAD_VALUES: dict[str, int] = {"turn_ids": -1}
_REQUIRED_KEYS: tuple[str, ...] = ("input_ids", "attention_mask")
_ROLLOUT_GROUP_KEY = "rollout_group"


# ---------------------------------------------------------------------------
# Small validation helpers
# ---------------------------------------------------------------------------


def _as_int(value: Any) -> int | None:
    """An integer value as a Python int (bools excluded), or None when it is not one."""
    if isinstance(value, bool):
        return None
    if isinstance(value, torch.Tensor):
        if value.numel() != 1 or value.dtype.is_floating_point or value.dtype == torch.bool:
            return None
        return int(value.item())
    try:
        return operator.index(value)
    except TypeError:
        return None


def _int_tuple(field: str, values: Any, *, minimum: int, allow_empty: bool = False) -> tuple[int, ...]:
    """Convert a sequence (list, tuple, 1-D integer tensor) of ints, each >= minimum, to a tuple."""
    if isinstance(values, (tuple, list)) and values and all(type(v) is int for v in values) \
            and min(values) >= minimum:
        return tuple(values)  # fast path: already plain ints
    if isinstance(values, torch.Tensor):
        if values.ndim != 1 or values.dtype.is_floating_point or values.dtype == torch.bool:
            raise ValueError(
                f"{field}: got a tensor of shape {tuple(values.shape)} and dtype {values.dtype}, "
                "expected a sequence of integers"
            )
        values = values.tolist()
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise ValueError(f"{field}: got {values!r} ({type(values).__name__}), expected a sequence of integers")
    out = []
    for i, v in enumerate(values):
        iv = _as_int(v)
        if iv is None:
            raise ValueError(f"{field}[{i}]: got {v!r} ({type(v).__name__}), expected an integer >= {minimum}")
        if iv < minimum:
            raise ValueError(f"{field}[{i}]: got {iv}, expected an integer >= {minimum}")
        out.append(iv)
    if not out and not allow_empty:
        raise ValueError(f"{field}: got an empty sequence, expected at least one entry")
    return tuple(out)


def _index_from_counts(counts: Sequence[int], device: torch.device | str | None) -> torch.Tensor:
    """Index i repeated counts[i] times: maps each member to its segment, vectorised."""
    counts = list(counts)
    repeats = torch.as_tensor(counts, dtype=torch.long, device=device)
    # output_size spares an accelerator a device->host sync to size the result
    return torch.repeat_interleave(torch.arange(len(counts), device=device), repeats, output_size=sum(counts))


# ---------------------------------------------------------------------------
# Batch metadata
# ---------------------------------------------------------------------------


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
        counts = _int_tuple("RolloutGroup.row_counts", self.row_counts, minimum=1)
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
        return _index_from_counts(self.row_counts, device)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RolloutGroup):
            return NotImplemented
        if self.row_counts != other.row_counts:
            return False
        if self.rewards is None or other.rewards is None:
            return self.rewards is None and other.rewards is None
        return self.rewards.dtype == other.rewards.dtype and torch.equal(
            self.rewards.cpu(), other.rewards.cpu()
        )

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


@dataclass(frozen=True)
class TrajBatchMeta:
    """Layout of a concatenated batch: rows per prompt and their logical rollouts.

    `traj_seqlens` are each input group's own padded length before concatenation
    (empty when unknown, e.g. from `from_group_sizes`). `rollout_groups` is None
    when no prompt has split rollouts; otherwise one entry per prompt, None for a
    prompt whose every row is its own rollout.
    """

    n_trajs: int
    traj_group_sizes: tuple[int, ...]
    traj_seqlens: tuple[int, ...] = ()
    rollout_groups: tuple[RolloutGroup | None, ...] | None = None

    def __post_init__(self) -> None:
        n_trajs = _as_int(self.n_trajs)
        if n_trajs is not None:
            object.__setattr__(self, "n_trajs", n_trajs)
        object.__setattr__(self, "traj_group_sizes", _int_tuple(
            "TrajBatchMeta.traj_group_sizes", self.traj_group_sizes, minimum=1))
        object.__setattr__(self, "traj_seqlens", _int_tuple(
            "TrajBatchMeta.traj_seqlens", self.traj_seqlens, minimum=1, allow_empty=True))
        groups = self.rollout_groups
        if groups is not None:
            if isinstance(groups, (str, bytes)) or not isinstance(groups, Sequence):
                raise ValueError(
                    f"TrajBatchMeta.rollout_groups: got {type(groups).__name__}, expected None or a "
                    "sequence with one RolloutGroup or None per trajectory group"
                )
            object.__setattr__(self, "rollout_groups", tuple(groups))
        self._check_structure("TrajBatchMeta")
        if self.rollout_groups is not None and all(g is None for g in self.rollout_groups):
            object.__setattr__(self, "rollout_groups", None)  # one canonical form for "no split rollouts"

    # -- construction ------------------------------------------------------

    @classmethod
    def from_group_sizes(cls, sizes: Sequence[int], seqlens: Sequence[int] = ()) -> TrajBatchMeta:
        """Metadata for a batch without split rollouts: each row is its own rollout."""
        sizes = _int_tuple("TrajBatchMeta.traj_group_sizes", sizes, minimum=1)
        return cls(n_trajs=len(sizes), traj_group_sizes=sizes, traj_seqlens=tuple(seqlens))

    # -- validation --------------------------------------------------------

    def _check_structure(self, prefix: str) -> None:
        n = _as_int(self.n_trajs)
        if n is None or n < 1:
            raise ValueError(f"{prefix}.n_trajs: got {self.n_trajs!r}, expected an integer >= 1")
        _int_tuple(f"{prefix}.traj_group_sizes", self.traj_group_sizes, minimum=1)
        if len(self.traj_group_sizes) != n:
            raise ValueError(
                f"{prefix}.traj_group_sizes: got {len(self.traj_group_sizes)} sizes, expected "
                f"n_trajs={n} (one per trajectory group)"
            )
        _int_tuple(f"{prefix}.traj_seqlens", self.traj_seqlens, minimum=1, allow_empty=True)
        if self.traj_seqlens and len(self.traj_seqlens) != n:
            raise ValueError(
                f"{prefix}.traj_seqlens: got {len(self.traj_seqlens)} lengths, expected n_trajs={n} "
                "(or none when unknown)"
            )
        if self.rollout_groups is None:
            return
        if len(self.rollout_groups) != n:
            raise ValueError(
                f"{prefix}.rollout_groups: got {len(self.rollout_groups)} entries, expected n_trajs={n}"
            )
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
        total = sum(self.traj_group_sizes)
        if total != batch_size:
            raise ValueError(
                f"{field_prefix}.traj_group_sizes: sizes sum to {total} rows, expected the batch size "
                f"{batch_size}"
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
        return _index_from_counts(self.traj_group_sizes, device)

    def logical_row_index(self, device: torch.device | str | None = None) -> torch.Tensor:
        """LongTensor[B]: the global logical-rollout index of each row, counted across prompts."""
        if self.rollout_groups is None:
            return torch.arange(self.n_rows, device=device)
        return _index_from_counts(self._logical_row_counts(), device)

    def logical_group_index(self, device: torch.device | str | None = None) -> torch.Tensor:
        """LongTensor[n_logical]: the prompt index of each logical rollout."""
        return _index_from_counts(self.logical_group_sizes, device)

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


# ---------------------------------------------------------------------------
# Concatenation
# ---------------------------------------------------------------------------


def _split_trajectory(i: int, traj: Any) -> tuple[dict[str, torch.Tensor], RolloutGroup | None]:
    """Separate one trajectory group's tensors from its RolloutGroup, checking types."""
    if not isinstance(traj, Mapping):
        raise ValueError(
            f"concat_batch: trajectory {i} is {type(traj).__name__}, expected a mapping of tensors"
        )
    tensors: dict[str, torch.Tensor] = {}
    group = None
    for key, value in traj.items():
        if key == _ROLLOUT_GROUP_KEY:
            if value is not None and not isinstance(value, RolloutGroup):
                raise ValueError(
                    f"concat_batch: trajectory {i} key {key!r} is {type(value).__name__}, "
                    "expected a RolloutGroup or None"
                )
            group = value
        elif isinstance(value, torch.Tensor):
            tensors[key] = value
        else:
            raise ValueError(
                f"concat_batch: trajectory {i} key {key!r} is {type(value).__name__}, expected a "
                f"torch.Tensor (only {_ROLLOUT_GROUP_KEY!r} may be a non-tensor)"
            )
    return tensors, group


def _check_trajectory(i: int, tensors: dict[str, torch.Tensor], group: RolloutGroup | None) -> tuple[int, int]:
    """Shape checks within one trajectory group; returns (rows, T)."""
    for key in _REQUIRED_KEYS:
        if key not in tensors:
            raise ValueError(f"concat_batch: trajectory {i} lacks required key {key!r}")
        if tensors[key].ndim != 2:
            raise ValueError(
                f"concat_batch: trajectory {i} key {key!r} has shape {tuple(tensors[key].shape)}, "
                "expected [rows, T]"
            )
    rows, seqlen = tensors["input_ids"].shape
    if rows < 1 or seqlen < 1:
        raise ValueError(
            f"concat_batch: trajectory {i} key 'input_ids' has shape {(rows, seqlen)}, "
            "expected at least one row and one position"
        )
    for key, t in tensors.items():
        if t.ndim not in (1, 2):
            raise ValueError(
                f"concat_batch: trajectory {i} key {key!r} has shape {tuple(t.shape)}, expected "
                f"[rows] or [rows, T] with rows={rows}, T={seqlen}"
            )
        if t.shape[0] != rows:
            raise ValueError(
                f"concat_batch: trajectory {i} key {key!r} has {t.shape[0]} rows (shape "
                f"{tuple(t.shape)}), expected {rows} rows like 'input_ids'"
            )
        if t.ndim == 2 and t.shape[1] != seqlen:
            raise ValueError(
                f"concat_batch: trajectory {i} key {key!r} has length {t.shape[1]}, expected "
                f"T={seqlen} like 'input_ids'"
            )
    if group is not None and group.n_rows != rows:
        raise ValueError(
            f"concat_batch: trajectory {i} key {_ROLLOUT_GROUP_KEY!r}: row_counts "
            f"{list(group.row_counts)} sum to {group.n_rows}, expected the group's {rows} rows"
        )
    return rows, seqlen


def _check_consistent(i: int, tensors: dict[str, torch.Tensor], first: dict[str, torch.Tensor],
                      device: torch.device) -> None:
    """Same keys, ranks, dtypes and device as trajectory 0."""
    if tensors.keys() != first.keys():
        missing = sorted(first.keys() - tensors.keys())
        extra = sorted(tensors.keys() - first.keys())
        raise ValueError(
            f"concat_batch: trajectory {i} has different tensor keys from trajectory 0: "
            f"missing {missing}, unexpected {extra}"
        )
    for key, t in tensors.items():
        ref = first[key]
        if t.ndim != ref.ndim:
            raise ValueError(
                f"concat_batch: trajectory {i} key {key!r} is {t.ndim}-D, expected {ref.ndim}-D "
                "like trajectory 0"
            )
        if t.dtype != ref.dtype:
            raise ValueError(
                f"concat_batch: trajectory {i} key {key!r} has dtype {t.dtype}, expected {ref.dtype} "
                "like trajectory 0"
            )
        if t.device != device:
            raise ValueError(
                f"concat_batch: trajectory {i} key {key!r} is on {t.device}, expected every tensor on "
                f"{device} like trajectory 0 key 'input_ids'"
            )


def concat_batch(trajs: Sequence[Mapping[str, Any]]) -> tuple[dict[str, torch.Tensor], TrajBatchMeta]:
    """Concatenate per-prompt trajectory groups into one right-padded batch plus its layout.

    2-D tensors are right-padded to the longest group (0, or -1 for `turn_ids`);
    1-D tensors are concatenated. The optional `"rollout_group"` entry of each group
    goes into the metadata. The result is a new dict of new tensors; the inputs are
    left untouched.
    """
    if isinstance(trajs, Mapping) or not isinstance(trajs, Sequence) or len(trajs) == 0:
        raise ValueError(
            f"concat_batch: got {type(trajs).__name__}"
            f"{' of length 0' if isinstance(trajs, Sequence) and not isinstance(trajs, Mapping) else ''}, "
            "expected a non-empty sequence of trajectory-group mappings"
        )
    parts = [_split_trajectory(i, t) for i, t in enumerate(trajs)]
    layout = [_check_trajectory(i, tensors, group) for i, (tensors, group) in enumerate(parts)]
    first = parts[0][0]
    device = first["input_ids"].device
    for i, (tensors, _) in enumerate(parts):
        _check_consistent(i, tensors, first, device)

    sizes = [rows for rows, _ in layout]
    seqlens = [seqlen for _, seqlen in layout]
    max_len = max(seqlens)
    batch_size = sum(sizes)
    out: dict[str, torch.Tensor] = {}
    for key, ref in first.items():
        pieces = [tensors[key] for tensors, _ in parts]
        if ref.ndim == 1:
            out[key] = torch.cat(pieces, dim=0)
            continue
        padded = torch.full((batch_size, max_len), _PAD_VALUES.get(key, 0), dtype=ref.dtype, device=device)
        start = 0
        for piece in pieces:  # one copy per trajectory group, not per row
            padded[start:start + piece.shape[0], : piece.shape[1]] = piece
            start += piece.shape[0]
        out[key] = padded
    meta = TrajBatchMeta(
        n_trajs=len(parts),
        traj_group_sizes=tuple(sizes),
        traj_seqlens=tuple(seqlens),
        rollout_groups=tuple(group for _, group in parts),
    )
    return out, meta


# ---------------------------------------------------------------------------
# Normalisation
# ---------------------------------------------------------------------------


def _dist_active() -> bool:
    return dist.is_available() and dist.is_initialized()


@dataclass(frozen=True)
class _GroupLayout:
    """Row -> group index and which groups have a single logical member."""

    row_group: torch.Tensor  # LongTensor[B]
    n_groups: int
    singleton: torch.Tensor | None  # BoolTensor[n_groups], None when no group is a singleton


class Normalization:
    """Mean/std normalisation at batch, group or no level (AReaL's `Normalization`).

    Statistics are float64 and token-weighted by the loss mask. Groups are slices of
    consecutive rows of variable size (from the batch metadata); batch-level
    statistics are all-reduced across data-parallel ranks. One deliberate change from
    AReaL 1.0.4: a group with a single logical member uses the row itself as its
    leave-one-out baseline (normalising to 0) and std 1 when the std is unbiased.
    """

    def __init__(self, config: NormConfig):
        if not isinstance(config, NormConfig):
            raise ValueError(f"Normalization: got {type(config).__name__}, expected a NormConfig")
        self.config = config
        self.mean_level = config.mean_level
        self.std_level = config.std_level
        self.mean_leave1out = config.mean_leave1out
        self.std_unbiased = config.std_unbiased
        self.eps = float(config.eps)
        self.group_size = config.group_size

    # -- public API ----------------------------------------------------------

    @torch.no_grad()
    def __call__(
        self,
        x: torch.Tensor,
        loss_mask: torch.Tensor | None = None,
        *,
        group_sizes: Sequence[int] | torch.Tensor | None = None,
        logical_group_sizes: Sequence[int] | torch.Tensor | None = None,
        reduce_group: Any = None,
    ) -> torch.Tensor:
        """Normalised float32 copy of x: ((x - mean) * mask) / denom.

        A mask without any active element returns x as float32, unchanged; in batch mode
        the rank still joins the all-reduce so the other ranks do not hang.
        """
        _check_norm_inputs(x, loss_mask)
        layout = self._layout(x, group_sizes, logical_group_sizes)
        inactive = loss_mask is not None and loss_mask.sum().item() == 0
        if inactive and not (_dist_active() and "batch" in (self.mean_level, self.std_level)):
            return x.to(torch.float32, copy=True)  # a copy: the caller may edit the result in place
        if norm_kernels.fused_available(x) and (loss_mask is None or loss_mask.device.type == "cpu"):
            out = self._fused(x, loss_mask, layout, reduce_group)
        else:
            _, denom, centered = self._compute(x, loss_mask, layout, reduce_group)
            out = (centered / denom).float()
        if inactive:
            return x.to(torch.float32, copy=True)
        return out

    @torch.no_grad()
    def statistics(
        self,
        x: torch.Tensor,
        loss_mask: torch.Tensor | None = None,
        *,
        group_sizes: Sequence[int] | torch.Tensor | None = None,
        logical_group_sizes: Sequence[int] | torch.Tensor | None = None,
        reduce_group: Any = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(mean, denom), float64 with x's shape, such that __call__ = ((x - mean) * mask) / denom.

        `denom` is std + eps (1 when std_level is None). Exposed so callers can normalise
        per-logical-rollout references and map the statistics back to rows. Unlike
        __call__, an all-masked input still gets statistics (mean 0, std 1).
        """
        _check_norm_inputs(x, loss_mask)
        layout = self._layout(x, group_sizes, logical_group_sizes)
        mean, denom, _ = self._compute(x, loss_mask, layout, reduce_group)
        return (torch.broadcast_to(mean, x.shape).contiguous(),
                torch.broadcast_to(denom, x.shape).contiguous())

    # -- internals -----------------------------------------------------------

    def _layout(
        self,
        x: torch.Tensor,
        group_sizes: Sequence[int] | torch.Tensor | None,
        logical_group_sizes: Sequence[int] | torch.Tensor | None,
    ) -> _GroupLayout | None:
        """Validated row->group layout; None when no level needs groups."""
        batch = x.shape[0]
        sizes = None
        if group_sizes is not None:
            sizes = _int_tuple("Normalization group_sizes", group_sizes, minimum=1, allow_empty=True)
            if sum(sizes) != batch:
                raise ValueError(
                    f"Normalization group_sizes: sizes sum to {sum(sizes)} rows, expected the batch "
                    f"size {batch} (x has shape {tuple(x.shape)})"
                )
        logical = None
        if logical_group_sizes is not None:
            logical = _int_tuple("Normalization logical_group_sizes", logical_group_sizes, minimum=1,
                                 allow_empty=True)
        if sizes is None and "group" in (self.mean_level, self.std_level) and batch % self.group_size:
            raise ValueError(
                f"NormConfig.group_size: batch size {batch} is not divisible by group_size="
                f"{self.group_size}; pass group_sizes from the batch metadata (TrajBatchMeta) "
                "for variable-size groups"
            )
        if sizes is None:
            sizes = (self.group_size,) * (batch // self.group_size)
        if logical is not None:
            if len(logical) != len(sizes):
                raise ValueError(
                    f"Normalization logical_group_sizes: got {len(logical)} sizes, expected one per "
                    f"group ({len(sizes)})"
                )
            for g, (members, rows) in enumerate(zip(logical, sizes)):
                if members > rows:
                    raise ValueError(
                        f"Normalization logical_group_sizes[{g}]: got {members}, expected at most the "
                        f"group's {rows} rows (each logical rollout has at least one row)"
                    )
        if "group" not in (self.mean_level, self.std_level):
            return None
        device = x.device
        if len(set(sizes)) == 1:  # uniform groups: no repeat_interleave needed
            row_group = torch.arange(batch, device=device) // sizes[0]
        else:
            row_group = _index_from_counts(sizes, device)
        members = logical if logical is not None else sizes
        singleton = None
        if 1 in members:
            singleton = torch.tensor([m == 1 for m in members], dtype=torch.bool, device=device)
        return _GroupLayout(row_group=row_group, n_groups=len(sizes), singleton=singleton)

    def _fused(
        self, x: torch.Tensor, loss_mask: torch.Tensor | None, layout: _GroupLayout | None, reduce_group: Any
    ) -> torch.Tensor:
        """`_compute` for [B, T] CPU tensors with fused numba passes and no [B, T] temporaries.

        Same float64 formulas, element by element; only [B]-sized statistics are
        reduced (and all-reduced) here.
        """
        n_rows = x.shape[0]

        def spread(value: torch.Tensor) -> torch.Tensor:
            return value if value.ndim == 0 else value.index_select(0, layout.row_group)

        zero = torch.zeros((), dtype=torch.float64)
        row_self = torch.zeros((), dtype=torch.bool)
        weight, row_total = norm_kernels.row_sums(x, loss_mask)
        counts: dict[str, torch.Tensor] = {}
        if self.mean_level is None:
            stats = norm_kernels.RowStats(n_rows, False, zero, zero, zero, row_self)
        else:
            count, total = self._reduce(self.mean_level, [weight, row_total], layout, reduce_group)
            counts[self.mean_level] = count
            if self.mean_leave1out:
                if self.mean_level == "group" and layout.singleton is not None:
                    row_self = spread(layout.singleton)  # a singleton's baseline is itself
                stats = norm_kernels.RowStats(n_rows, True, zero, spread(total), spread(count), row_self)
            else:
                mean = (total / count).masked_fill_(count == 0, 0.0)
                stats = norm_kernels.RowStats(n_rows, False, spread(mean), zero, zero, row_self)
        if self.std_level is None:
            return norm_kernels.normalise(x, loss_mask, stats, torch.ones((), dtype=torch.float64))
        squares = norm_kernels.row_squares(x, loss_mask, stats)
        if self.std_level in counts:
            count = counts[self.std_level]
            (sq_total,) = self._reduce(self.std_level, [squares], layout, reduce_group)
        else:
            count, sq_total = self._reduce(self.std_level, [weight, squares], layout, reduce_group)
        return norm_kernels.normalise(x, loss_mask, stats, spread(self._std(count, sq_total, layout) + self.eps))

    def _std(self, count: torch.Tensor, sq_total: torch.Tensor, layout: _GroupLayout | None) -> torch.Tensor:
        """Std from pooled counts and squared deviations, with AReaL's fallbacks to 1."""
        if self.std_unbiased:
            std = torch.sqrt(sq_total / (count - 1))
            fallback = count <= 1
            if self.std_level == "group" and layout.singleton is not None:
                fallback = fallback | layout.singleton
        else:
            std = torch.sqrt(sq_total / count)
            fallback = count == 0
        return std.masked_fill_(fallback, 1.0)

    @staticmethod
    def _reduce(level: str, rows: list[torch.Tensor], layout: _GroupLayout | None,
                reduce_group: Any) -> list[torch.Tensor]:
        """Sum per-row quantities over the batch (all-reduced, 0-d) or into groups ([n_groups])."""
        if level == "batch":
            totals = torch.stack([r.sum() for r in rows])
            if _dist_active():
                dist.all_reduce(totals, op=dist.ReduceOp.SUM, group=reduce_group)
            return list(totals.unbind(0))
        assert layout is not None
        return [
            torch.zeros(layout.n_groups, dtype=r.dtype, device=r.device).index_add_(0, layout.row_group, r)
            for r in rows
        ]

    def _compute(
        self,
        x: torch.Tensor,
        loss_mask: torch.Tensor | None,
        layout: _GroupLayout | None,
        reduce_group: Any,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(mean, denom, centered): mean/denom broadcastable to x, centered = (x - mean) * mask.

        Statistics are formed per group ([n_groups]) or per batch (0-d) and spread to
        rows once, so the cost is a fixed number of tensor ops whatever the layout.
        """
        x64 = x.to(torch.float64)
        mask = None if loss_mask is None else loss_mask.to(torch.float64)
        x_masked = x64 if mask is None else x64 * mask
        if mask is None:
            row_weight = torch.full((x.shape[0],), float(x[0].numel()) if x.shape[0] else 0.0,
                                    dtype=torch.float64, device=x.device)
        else:
            row_weight = _row_sums(mask)

        def spread(value: torch.Tensor) -> torch.Tensor:
            """A batch (0-d) or per-group ([n_groups]) statistic, broadcastable to x."""
            if value.ndim == 0:
                return value
            value = value.index_select(0, layout.row_group)
            return value if x.ndim == 1 else value.unsqueeze(1)

        counts: dict[str, torch.Tensor] = {}
        if self.mean_level is None:
            mean = torch.zeros((), dtype=torch.float64, device=x.device)
        else:
            count, total = self._reduce(self.mean_level, [row_weight, _row_sums(x_masked)], layout, reduce_group)
            counts[self.mean_level] = count
            if self.mean_leave1out:
                mean = _leave_one_out_mean(x_masked, mask, count, total, spread)
                if self.mean_level == "group" and layout.singleton is not None:
                    mean = torch.where(spread(layout.singleton), x64, mean)  # a singleton's baseline is itself
            else:
                mean = spread((total / count).masked_fill_(count == 0, 0.0))

        # AReaL 1.0.4 squares x*m - mean*m for the std; (x - mean)*m is the same for 0/1 masks
        # and lets the std and the output share one centred tensor.
        centered = x64 - mean
        if mask is not None:
            centered = centered * mask
        if self.std_level is None:
            return mean, torch.ones((), dtype=torch.float64, device=x.device), centered

        squares = _row_sums(centered * centered)
        if self.std_level in counts:
            count = counts[self.std_level]
            (sq_total,) = self._reduce(self.std_level, [squares], layout, reduce_group)
        else:
            count, sq_total = self._reduce(self.std_level, [row_weight, squares], layout, reduce_group)
        return mean, spread(self._std(count, sq_total, layout) + self.eps), centered


def _check_norm_inputs(x: torch.Tensor, loss_mask: torch.Tensor | None) -> None:
    if not isinstance(x, torch.Tensor) or x.ndim not in (1, 2):
        shape = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
        raise ValueError(f"Normalization: x has shape {shape}, expected a tensor [B] or [B, T]")
    if x.is_complex():
        raise ValueError(f"Normalization: x has dtype {x.dtype}, expected a real tensor")
    if loss_mask is None:
        return
    if not isinstance(loss_mask, torch.Tensor) or tuple(loss_mask.shape) != tuple(x.shape):
        shape = tuple(loss_mask.shape) if isinstance(loss_mask, torch.Tensor) else type(loss_mask).__name__
        raise ValueError(f"Normalization: loss_mask has shape {shape}, expected x's shape {tuple(x.shape)}")
    if loss_mask.device != x.device:
        raise ValueError(f"Normalization: loss_mask is on {loss_mask.device}, expected x's device {x.device}")


def _row_sums(values: torch.Tensor) -> torch.Tensor:
    """[B] or [B, T] -> [B]: each row's total."""
    return values if values.ndim == 1 else values.sum(dim=1)


def _leave_one_out_mean(
    x_masked: torch.Tensor,
    mask: torch.Tensor | None,
    count: torch.Tensor,
    total: torch.Tensor,
    spread: Callable[[torch.Tensor], torch.Tensor],
) -> torch.Tensor:
    """Baseline of each active element excluding itself; masked elements get the plain mean.

    A pool with at most one active element gets baseline 0 (as AReaL 1.0.4). For a
    masked element (mask 0) the leave-one-out formula reduces to total / count
    whenever count > 1, so one expression serves both cases.
    """
    if mask is None:
        loo = (spread(total) - x_masked) / spread(torch.clamp(count - 1, min=1.0))
    else:
        loo = (spread(total) - x_masked) / torch.clamp(spread(count) - mask, min=1.0)
    return loo.masked_fill_(spread(count <= 1), 0.0)


# ---------------------------------------------------------------------------
# KL estimators
# ---------------------------------------------------------------------------

KL_ESTIMATORS: tuple[str, ...] = ("k1", "k2", "k3")


class KLEstimator:
    """Per-token KL(policy || reference) estimates from log-probabilities (Schulman's k1/k2/k3)."""

    def __init__(self, kind: str = "k1", apply_clamp: bool = True):
        if kind not in KL_ESTIMATORS:
            raise ValueError(f"actor.kl_estimator: got {kind!r}, expected one of {list(KL_ESTIMATORS)}")
        self.kind = kind
        self.apply_clamp = bool(apply_clamp)

    def __call__(self, logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
        """float32 estimate, clamped to [-10, 10] when apply_clamp (guards against outliers)."""
        log_ratio = logp.float() - ref_logp.float()
        if self.kind == "k1":
            kl = log_ratio
        elif self.kind == "k2":
            kl = log_ratio**2 / 2.0
        else:
            neg = -log_ratio
            kl = neg.exp() - 1 - neg
        if self.apply_clamp:
            kl.clamp_(min=-10, max=10)  # kl is always a fresh tensor here
        return kl

    def __repr__(self) -> str:
        return f"KLEstimator(kind={self.kind!r}, apply_clamp={self.apply_clamp})"
