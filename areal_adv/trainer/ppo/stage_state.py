"""State that an advantage stage keeps across training steps, and how ranks agree on it.

A stage function opts in by declaring a keyword-only parameter `state`:

```python
def my_outcome(inputs: OutcomeRewardInputs, *, state: StageState, decay: float = 0.9) -> OutcomeResult:
    mean = state.get("mean", 0.0)
    ...
    state.set("mean", new_mean)
```

Each actor worker binds one `StageState` per such stage when it resolves the
config (`PPOActor.__init__`). The trainer saves `PPOActor.state_dict()` in every
checkpoint and restores it on resume, so a resumed run continues with the state
the interrupted one had. The rules a stateful stage follows:

* values are tensors or plain JSON-like values (numbers, strings, bools, None,
  lists and dicts of them), so a checkpoint loads with `torch.load(weights_only=True)`;
* a value is replaced with `set`, never written in place: the actor snapshots the
  state before each `compute_advantages` call and puts the snapshot back when the
  call fails, so a failed step leaves the state as it was;
* under data parallelism the state must be identical on every rank (rank 0's copy
  is what a checkpoint holds): a stage reduces its per-rank updates explicitly,
  e.g. with `gather_rows`, and applies the same merged update on every rank.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterator, Mapping
from typing import Any

import torch
import torch.distributed as dist

from areal_adv.utils.call_agreement import before_collective
from areal_adv.utils.collectives import collectives_active

__all__ = ["STATE_PARAMETER", "StageState", "StageStateError", "distributed_world", "gather_rows"]

#: The keyword a stage function declares to receive its state object.
STATE_PARAMETER = "state"
_FORMAT = 1


class StageStateError(ValueError):
    """A stage state value or a saved state does not fit; the message names the stage."""


def _check_plain(where: str, value: Any) -> None:
    """Only values `torch.load(weights_only=True)` reads back unchanged."""
    if value is None or isinstance(value, (bool, int, str)):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise StageStateError(f"{where}: got {value!r}, expected a finite number")
        return
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            _check_plain(f"{where}[{i}]", item)
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise StageStateError(f"{where}: key {key!r} is {type(key).__name__}, expected a string")
            _check_plain(f"{where}.{key}", item)
        return
    raise StageStateError(
        f"{where}: got {type(value).__name__}, expected a tensor or a plain value (number, string, bool, None, "
        "list or dict of them)"
    )


class StageState:
    """Named values one stage keeps across steps (see the module docstring for the rules)."""

    def __init__(self, stage: str, implementation: str) -> None:
        self.stage = stage
        self.implementation = implementation
        self._values: dict[str, Any] = {}

    @property
    def where(self) -> str:
        return f"actor.advantage.{self.stage} ({self.implementation}) state"

    # -- values -------------------------------------------------------------------

    def get(self, name: str, default: Any = None) -> Any:
        return self._values.get(name, default)

    def set(self, name: str, value: Any) -> None:
        if not isinstance(name, str) or not name:
            raise StageStateError(f"{self.where}: value names are non-empty strings, got {name!r}")
        if torch.is_tensor(value):
            value = value.detach()
        else:
            _check_plain(f"{self.where}[{name!r}]", value)
        self._values[name] = value

    def __contains__(self, name: object) -> bool:
        return name in self._values

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._values))

    def __len__(self) -> int:
        return len(self._values)

    def clear(self) -> None:
        self._values.clear()

    # -- snapshots (the actor's rollback on a failed call) --------------------------

    def snapshot(self) -> dict[str, Any]:
        """A shallow copy: values are replaced, never modified, so this is enough to roll back."""
        return dict(self._values)

    def restore(self, snapshot: Mapping[str, Any]) -> None:
        self._values = dict(snapshot)

    # -- checkpoints ------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Plain content for a checkpoint: tensors on the CPU, the stage and implementation named."""
        values = {k: (v.cpu().clone() if torch.is_tensor(v) else v) for k, v in self._values.items()}
        return {"format": _FORMAT, "stage": self.stage, "implementation": self.implementation, "values": values}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore `state_dict()` output; it must come from the same stage implementation."""
        if (
            not isinstance(state, Mapping)
            or state.get("format") != _FORMAT
            or not isinstance(state.get("values"), Mapping)
        ):
            raise StageStateError(
                f"{self.where}: got {type(state).__name__} {state!r:.80}, expected the dict of StageState.state_dict()"
            )
        saved = state.get("implementation")
        if saved != self.implementation:
            raise StageStateError(
                f"{self.where}: the checkpoint holds the state of {saved!r}, but the stage is now "
                f"{self.implementation!r}; resume with the configuration that wrote it"
            )
        values = {}
        for name, value in state["values"].items():
            if not torch.is_tensor(value):
                _check_plain(f"{self.where}[{name!r}]", value)
            values[name] = value
        self._values = values

    def fingerprint(self) -> str:
        """sha256 over names, dtypes, shapes and bytes: equal on two ranks iff their states are equal."""
        digest = hashlib.sha256(self.implementation.encode())
        for name in sorted(self._values):
            value = self._values[name]
            digest.update(name.encode() + b"\0")
            if torch.is_tensor(value):
                t = value.detach().cpu().contiguous()
                digest.update(f"{t.dtype}:{tuple(t.shape)};".encode())
                digest.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
            else:
                digest.update(repr(value).encode())
        return digest.hexdigest()

    def __repr__(self) -> str:
        return f"StageState({self.stage!r}, {self.implementation!r}, values={sorted(self._values)})"


# ---------------------------------------------------------------------------
# Agreement across data-parallel ranks
# ---------------------------------------------------------------------------


def distributed_world() -> int:
    """The number of data-parallel ranks (1 without an initialised process group)."""
    if collectives_active():
        return dist.get_world_size()
    return 1


def gather_rows(*tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Concatenate every rank's rows (rank 0's first), for tensors sharing their first dimension.

    Ranks may hold different numbers of rows; each tensor keeps its trailing
    shape and dtype. Without a process group the tensors come back as they are.
    One size exchange plus one `all_gather` per tensor, on the tensors' device
    (gloo on CPU, nccl on CUDA).
    """
    if not tensors:
        return ()
    n = tensors[0].shape[0]
    if any(t.shape[0] != n for t in tensors):
        raise ValueError(f"gather_rows: tensors have {[t.shape[0] for t in tensors]} rows, expected one row count")
    world = distributed_world()
    if world == 1:
        return tensors
    device = tensors[0].device
    sizes = [torch.zeros(1, dtype=torch.long, device=device) for _ in range(world)]
    before_collective()  # the ranks agree on any failure first (areal_adv.utils.call_agreement)
    dist.all_gather(sizes, torch.tensor([n], dtype=torch.long, device=device))
    counts = [int(s.item()) for s in sizes]
    width = max(counts)
    out = []
    for t in tensors:
        padded = torch.zeros((width, *t.shape[1:]), dtype=t.dtype, device=t.device)
        padded[:n] = t
        parts = [torch.empty_like(padded) for _ in range(world)]
        dist.all_gather(parts, padded.contiguous())
        out.append(torch.cat([p[:c] for p, c in zip(parts, counts)], dim=0))
    return tuple(out)
