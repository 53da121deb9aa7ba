"""Engines' weights and AdamW states as `torch.distributed.checkpoint` (DCP) shards, at any world size.

A checkpoint's model and optimiser states are written with `torch.distributed.checkpoint.save`: every rank
writes its own file (`__<rank>_0.distcp`) and the coordinator a `.metadata` file describing every tensor's
pieces. The states come from `get_state_dict` (torch's distributed state-dict API), which names every tensor
by its parameter name whatever wraps the module, so the same checkpoint loads

* under FSDP2 (`DTensor` shards: each rank writes and reads its 1/N),
* under DDP (full replicas: DCP writes each tensor once, spread over the ranks, and every rank reads it all),
* in one process (plain tensors),

at any number of ranks: on load DCP reads, for every tensor this rank holds, the pieces it overlaps.
Nothing is gathered on one rank. Frozen parameters (a LoRA policy's base) are left out: they are rebuilt
from `model.path` and the seed, as at the start of the run.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from torch import nn

from areal_adv.trainer.parallel.distributed import DistContext

#: Optimiser settings that choose an implementation, not a trajectory: each engine keeps its own
#: (a DDP run's fused AdamW, FSDP2's foreach form), whatever engine wrote the checkpoint.
_IMPLEMENTATION_KEYS = ("fused", "foreach", "capturable", "differentiable")


def _options(model: nn.Module) -> Any:
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    frozen = any(not p.requires_grad for p in model.parameters())
    return StateDictOptions(ignore_frozen_params=True, strict=not frozen)


def engine_state(engine: Any) -> dict[str, Any]:
    """{"model": ..., "optimizer": ...} of an engine in the form DCP saves and fills (a collective under FSDP2).

    A freshly built optimiser gets its (zero) AdamW state first, so the dict is also the template that
    `load_state` fills in place.
    """
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model, optim = get_state_dict(engine.train_module, engine.optimizer, options=_options(engine.train_module))
    return {"model": model, "optimizer": optim}


def load_engine_state(engine: Any, state: dict[str, Any]) -> None:
    """Push a state that `load_state` filled into the engine's module and optimiser (FSDP2: also its sampling copy)."""
    from torch.distributed.checkpoint.state_dict import set_state_dict

    groups = engine.optimizer.param_groups
    own = [{k: group[k] for k in _IMPLEMENTATION_KEYS if k in group} for group in groups]
    set_state_dict(
        engine.train_module,
        engine.optimizer,
        model_state_dict=state["model"],
        optim_state_dict=state["optimizer"],
        options=_options(engine.train_module),
    )
    for group, keys in zip(engine.optimizer.param_groups, own):
        group.update(keys)
    sync = getattr(engine, "sync_copies", None)
    if callable(sync):
        sync()


@contextlib.contextmanager
def _one_process_quietly(ctx: DistContext) -> Iterator[None]:
    """DCP warns that it assumes one process when there is no process group; here that is the plan."""
    with warnings.catch_warnings():
        if not ctx.is_distributed:
            warnings.filterwarnings("ignore", message="torch.distributed is disabled", category=UserWarning)
        yield


def save_state(states: dict[str, Any], folder: Path, ctx: DistContext) -> None:
    """Write `states` as a DCP folder; a collective: every rank writes its shard into the same `folder`."""
    import torch.distributed.checkpoint as dcp

    with _one_process_quietly(ctx):
        dcp.save(states, checkpoint_id=str(folder), no_dist=not ctx.is_distributed)


def load_state(states: dict[str, Any], folder: Path, ctx: DistContext) -> None:
    """Fill `states` (a template from `engine_state`) in place from the DCP folder `folder`; a collective.

    Raises ValueError in one line when the folder does not hold a tensor of the template, or holds it with
    another shape (a different model or optimiser).
    """
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import CheckpointException

    try:
        with _one_process_quietly(ctx):
            dcp.load(states, checkpoint_id=str(folder), no_dist=not ctx.is_distributed)
    except (CheckpointException, RuntimeError, KeyError, ValueError) as exc:
        raise ValueError(f"{folder}: cannot load the model and optimiser states ({_cause(exc)})") from exc


def _cause(exc: BaseException) -> str:
    """The first line of what went wrong: DCP wraps each rank's exception in a CheckpointException."""
    failures = getattr(exc, "failures", None)
    if isinstance(failures, dict) and failures:
        exc = next(iter(failures.values()))
    text = str(exc).strip()
    first = text.splitlines()[0] if text else ""
    return f"{type(exc).__name__}: {first[:300]}"
