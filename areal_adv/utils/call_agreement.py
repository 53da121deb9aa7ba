"""Call-time agreement: a failure on one rank inside a library call raises the same error on every rank.

The init-time twin is `PPOActor`'s `WorkerInitError` (the ranks gather their
plugin-resolution errors). At call time a stage may raise on one rank while the
others walk into the call's next collective (a batch-level normalisation
all-reduce, the output guard's maximum): they see gloo's "Connection closed by
peer" once the failing process ends, or, when it catches its error and goes on
to a barrier or a retry, they wait for the whole process-group timeout on
collectives that no longer match.

So, while `agreement()` is active (`PPOActor.compute_advantages` under a process
group of two or more ranks), each collective of the call is preceded by
`before_collective()`: an all-reduce (max) of this rank's status, one int, 0.
A rank whose call raised contributes 1 instead, once, on its way out. The ranks
meet at the first status exchange after the failure (the failing rank has done
every collective before it, the others do none past it), see the 1, gather the
failure reports (`all_gather_object`, on that path only) and all raise one
`CallFailure` naming the failing rank(s), the stage and the cause. A call that
succeeded ends with one more exchange, so a failure after the call's last
collective is agreed too, and the process group stays usable (a retry works).
A plugin stage that runs collectives of its own calls `before_collective()`
before each. In one process nothing is exchanged. torch has no such check
(`monitored_barrier` names late ranks, not their errors), so it is written here.
"""

from __future__ import annotations

import contextlib
import traceback
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass

import torch
import torch.distributed as dist

from areal_adv.utils.collectives import collectives_active

__all__ = ["CallFailure", "FailedRank", "agreement", "before_collective", "one_exchange", "raised_by_collective"]

_DIST_FILES = ("torch/distributed/", "torch/nn/parallel/distributed.py")


@dataclass(frozen=True)
class FailedRank:
    """What one failing rank reports: its stage, its error ("Type: message"), and the innermost frame."""

    rank: int
    stage: str
    error: str
    where: str


class CallFailure(RuntimeError):
    """Raised on every rank of a call in which some rank failed; the message names each failing rank.

    `failed_ranks`, `failed_error` and `failed_where` (the first failing rank's
    error and frame) let a caller report the root cause, not this rank's view.
    """

    def __init__(self, call: str, failed: list[FailedRank]) -> None:
        self.failed = failed
        self.failed_ranks = [f.rank for f in failed]
        self.failed_error, self.failed_where = failed[0].error, failed[0].where
        super().__init__(
            f"{call}: "
            + "; ".join(f"rank {f.rank} failed in {f.stage}: {f.error} (raised at {f.where})" for f in failed)
        )


@dataclass
class _Call:
    name: str
    describe_stage: Callable[[BaseException], str]
    once: str = ""  # "armed" inside `one_exchange()` until its first exchange, then "done"


_ACTIVE: ContextVar[_Call | None] = ContextVar("areal_call_agreement", default=None)


def _innermost_frame(exc: BaseException) -> str:
    while exc.__cause__ is not None or (exc.__context__ is not None and not exc.__suppress_context__):
        exc = exc.__cause__ or exc.__context__
    frames = traceback.extract_tb(exc.__traceback__)
    return f"{frames[-1].filename}:{frames[-1].lineno} in {frames[-1].name}" if frames else "unknown location"


def raised_by_collective(exc: BaseException) -> bool:
    """True for an error a collective raised (the process group's, not the call's own)."""
    if isinstance(exc, dist.DistError):
        return True
    frames = traceback.extract_tb(exc.__traceback__)
    return isinstance(exc, RuntimeError) and any(any(f in fr.filename for f in _DIST_FILES) for fr in frames[-3:])


def _live() -> bool:
    return collectives_active() and dist.get_world_size() > 1


def _exchange(call: _Call, exc: BaseException | None) -> None:
    """One status exchange; raises `CallFailure` on every rank when any rank brings a failure."""
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else None
    status = torch.tensor([0 if exc is None else 1], dtype=torch.int32, device=device)
    dist.all_reduce(status, op=dist.ReduceOp.MAX)
    if int(status.item()) == 0:
        return
    mine = (
        None
        if exc is None
        else FailedRank(
            dist.get_rank(), call.describe_stage(exc), f"{type(exc).__name__}: {exc}", _innermost_frame(exc)
        )
    )
    reports: list[FailedRank | None] = [None] * dist.get_world_size()
    dist.all_gather_object(reports, mine)
    raise CallFailure(call.name, [r for r in reports if r is not None]) from exc


def before_collective() -> None:
    """Exchange statuses before a collective of an agreed call (a no-op outside one)."""
    call = _ACTIVE.get()
    if call is None or call.once == "done":
        return
    _exchange(call, None)
    if call.once == "armed":
        call.once = "done"


@contextlib.contextmanager
def one_exchange() -> Iterator[None]:
    """Within the block only the first `before_collective()` exchanges.

    For back-to-back reductions (a normalisation's mean, then its std) whose
    local steps in between are the same arithmetic on every rank, so they do
    not fail on one rank only: one exchange instead of one per reduction.
    """
    call = _ACTIVE.get()
    if call is None:
        yield
        return
    saved, call.once = call.once, call.once or "armed"
    try:
        yield
    finally:
        call.once = saved


@contextlib.contextmanager
def agreement(name: str, describe_stage: Callable[[BaseException], str]) -> Iterator[None]:
    """Run a call whose failures every rank agrees on (see the module docstring); `name` heads the error.

    `describe_stage(exc)` names where the call failed (e.g. "advantage stage
    'estimator'"). Without a process group of two or more ranks this is a
    plain block: no collective, no cost.
    """
    if not _live() or _ACTIVE.get() is not None:  # one process, or already inside an agreed call
        yield
        return
    call = _Call(name, describe_stage)
    token = _ACTIVE.set(call)
    try:
        try:
            yield
        except CallFailure:
            raise
        except Exception as exc:
            if raised_by_collective(exc):  # the process group itself failed: no exchange can complete
                raise
            _exchange(call, exc)
            raise  # unreachable: the exchange saw this rank's failure
        else:
            _exchange(call, None)
    finally:
        _ACTIVE.reset(token)
