"""Whether the advantage pipeline's statistics all-reduce over the default process group.

The pipeline reduces batch-level statistics (normalisation moments, GPG's batch
factor, stateful baselines' rows, the output guard's verdict) across data-parallel
ranks whenever `torch.distributed` has a process group. A caller that has already
gathered the whole batch on every rank (TRL's GRPOTrainer does) computes what one
process would by running the pipeline inside `single_process_collectives()`: the
switch is a context variable, so it covers exactly that call and that thread, and
torch.distributed itself is left untouched.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

import torch.distributed as dist

__all__ = ["collectives_active", "single_process_collectives"]

_SINGLE_PROCESS: contextvars.ContextVar[bool] = contextvars.ContextVar("areal_single_process", default=False)


def collectives_active() -> bool:
    """True when the pipeline reduces across ranks: a process group exists and no caller turned that off."""
    return not _SINGLE_PROCESS.get() and dist.is_available() and dist.is_initialized()


@contextlib.contextmanager
def single_process_collectives() -> Iterator[None]:
    """Within the block the pipeline computes as one process would, on this rank's batch alone."""
    token = _SINGLE_PROCESS.set(True)
    try:
        yield
    finally:
        _SINGLE_PROCESS.reset(token)
