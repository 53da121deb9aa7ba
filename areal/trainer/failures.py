"""Failures under torchrun: one rank's exception stops every rank, and every rank names the root cause.

What torch provides:

* torch elastic's error files (`record`, `ErrorHandler`): the exception a rank
  ends with is in torchrun's failure summary;
* the rendezvous TCPStore (`MASTER_ADDR:MASTER_PORT`), a key-value store every
  rank reaches outside the collectives;
* gloo fails a collective as soon as a peer's process has exited, but only with
  "Connection closed by peer"; nccl keeps waiting until the collective timeout.

What no library does, and is hand-written here, is telling the other ranks *why*
a rank gave up. The protocol, on keys under `areal/failure/<run id>/<restart>/`:

1. A rank whose step raises builds a `FailureReport` (failing rank(s), stage,
   exception, the innermost frame) and publishes it with `compare_set`: the
   first report stored is the root cause, later ones defer to it.
2. A watcher thread on every rank polls for a report. On a peer's report it
   prints the root cause to its rank's log, writes it to the rank's error file,
   acknowledges it, and gives its main thread `timeout_s` to stop by itself (its
   next collective fails once the failing rank has exited; its next `stage()`
   raises `PeerFailure`). After that it ends the process: the bound where a
   collective does not notice a dead peer (nccl) or the main thread is stuck.
3. The failing rank writes its error file, then waits (at most `timeout_s`)
   until every peer has acknowledged, so that the cause is in every log and
   error file before its exit tears the collectives down (and torchrun ends the
   others), then ends with `RankFailure`.

Every rank therefore ends with a `RankFailure` whose message names the failing
rank, the stage, the cause and where it was raised; `areal.trainer.main` writes
it to the rank's error file and log. `stage(name)` marks the parts of a step so
that a report can say where it happened.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import asdict, dataclass
from datetime import timedelta
from typing import Any

__all__ = ["FailureReport", "FailureWatch", "PeerFailure", "RankFailure", "report_for", "stage", "staged",
           "write_error_file"]

_STAGES: ContextVar[tuple[str, ...]] = ContextVar("areal_failure_stages", default=())
_STAGE_ATTR = "_areal_stage"
_ACTIVE: FailureWatch | None = None  # the process's watch, consulted at every stage entry


@dataclass(frozen=True)
class FailureReport:
    """What one rank knows about a failure; the first one published is the job's root cause."""

    ranks: tuple[int, ...]  # the failing rank(s)
    reporter: int  # the rank that published it
    stage: str  # e.g. "step 3 > advantages"
    error: str  # "ExceptionType: message"
    where: str  # innermost frame: "path:line in function"
    time: float = 0.0  # when it was reported (seconds since the epoch)

    def describe(self) -> str:
        who = f"rank {self.ranks[0]}" if len(self.ranks) == 1 else f"ranks {list(self.ranks)}"
        return f"{who} failed in {self.stage}: {self.error} (raised at {self.where})"

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, raw: str | bytes) -> FailureReport:
        data = json.loads(raw)
        return cls(tuple(data["ranks"]), data["reporter"], data["stage"], data["error"], data["where"],
                   float(data.get("time", 0.0)))


class RankFailure(RuntimeError):
    """How a rank ends after a failure anywhere in the job: the message names the root cause.

    `how` says how a rank that is not among the failing ones came to stop (for
    example "after its own error: RuntimeError: ... Connection closed by peer",
    the gloo error it saw once the failing rank had exited).
    """

    def __init__(self, report: FailureReport, rank: int, how: str | None = None) -> None:
        self.report = report
        self.rank = rank
        message = report.describe()
        if how is not None and rank not in report.ranks:
            message += f"; rank {rank} stopped because of it, {how}"
        super().__init__(message)


class PeerFailure(RankFailure):
    """Raised at a stage boundary on a healthy rank once a peer's failure is known."""


def _innermost(exc: BaseException) -> BaseException:
    """The original exception behind wrappers (`raise X from exc` chains, then implicit ones)."""
    seen = {id(exc)}
    while True:
        nxt = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)
        if nxt is None or id(nxt) in seen:
            return exc
        seen.add(id(nxt))
        exc = nxt


def _where(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return "unknown location"
    last = frames[-1]
    return f"{last.filename}:{last.lineno} in {last.name}"


def report_for(exc: BaseException, rank: int) -> FailureReport:
    """This rank's report of `exc` (raised inside `stage()` blocks; `failed_ranks` if ranks agreed on it)."""
    ranks = getattr(exc, "failed_ranks", None) or [rank]
    where_from = _innermost(exc)
    return FailureReport(
        ranks=tuple(int(r) for r in ranks), reporter=rank,
        stage=getattr(exc, _STAGE_ATTR, None) or "an unnamed stage",
        error=f"{type(exc).__name__}: {exc}", where=_where(where_from), time=time.time(),
    )


@contextlib.contextmanager
def stage(name: str) -> Iterator[None]:
    """Mark a part of the work: an exception leaving it records the stage path ("step 3 > rollout").

    Entering a stage first raises `PeerFailure` if this process's watch has
    learnt that another rank failed, so a healthy rank stops at its next stage
    boundary instead of walking into a collective that can no longer complete.
    """
    if _ACTIVE is not None:
        _ACTIVE.raise_if_peer_failed()
    path = (*_STAGES.get(), name)
    token = _STAGES.set(path)
    try:
        yield
    except BaseException as exc:
        if getattr(exc, _STAGE_ATTR, None) is None:
            try:
                setattr(exc, _STAGE_ATTR, " > ".join(path))
            except AttributeError:  # exceptions with __slots__
                pass
        raise
    finally:
        _STAGES.reset(token)


def staged(name: str | Callable[..., str]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator form of `stage`; `name` may be a function of the call's arguments (e.g. the step)."""
    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def inner(*args: Any, **kwargs: Any) -> Any:
            with stage(name(*args, **kwargs) if callable(name) else name):
                return fn(*args, **kwargs)
        return inner
    return wrap


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def write_error_file(failure: RankFailure) -> None:
    """This rank's torch elastic error file (what torchrun's summary prints); a no-op outside torchrun.

    The format is the one `ErrorHandler.record_exception` writes, written here
    because of its `timestamp`: torchrun names the failure with the smallest
    one (whole seconds, ties going to the lowest rank) the job's root cause. The
    reporting rank stamps the report's time; a rank stopped by it stamps at
    least one second later, so the summary's root cause is the failing rank.
    """
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if not path:
        return
    reported = int(failure.report.time)
    stamp = reported if failure.rank == failure.report.reporter else max(int(time.time()), reported + 1)
    data = {"message": {"message": f"{type(failure).__name__}: {failure}", "extraInfo": {
        "py_callstack": "".join(traceback.format_exception(failure)), "timestamp": str(stamp)}}}
    tmp = f"{path}.{threading.get_ident()}.tmp"  # the watcher thread and the main thread may both write
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(data, fh)
    os.replace(tmp, path)


def _store_prefix(env: dict[str, str] | os._Environ) -> str:
    """Keys of this job attempt: torchrun's run id and restart count (a restarted job starts clean)."""
    return f"areal/failure/{env.get('TORCHELASTIC_RUN_ID', 'local')}/{env.get('TORCHELASTIC_RESTART_COUNT', '0')}"


def connect_store(timeout_s: float) -> Any:
    """A client of the rendezvous TCPStore that `init_process_group(init_method="env://")` used."""
    import torch.distributed as dist

    host, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    return dist.TCPStore(host, port, is_master=False, wait_for_workers=False, timeout=timedelta(seconds=timeout_s))


class FailureWatch:
    """One rank's side of the failure protocol (see the module docstring).

    `store` (main thread) and `watch_store` (watcher thread) are two clients of
    the same store; `exit_fn` ends the process when the deadline passes
    (`os._exit`; tests inject a recorder).
    """

    def __init__(self, store: Any, watch_store: Any, rank: int, world_size: int, *, timeout_s: float,
                 poll_s: float = 0.1, prefix: str = "areal/failure/local/0",
                 exit_fn: Callable[[int], None] = os._exit, log: Callable[[str], None] = _stderr) -> None:
        self.store, self.watch_store = store, watch_store
        self.rank, self.world_size = rank, world_size
        self.timeout_s, self.poll_s = timeout_s, poll_s
        self.root_key, self.ack_key = f"{prefix}/root", f"{prefix}/acks"
        self.exit_fn, self.log = exit_fn, log
        self.peer_report: FailureReport | None = None
        self._lock = threading.Lock()
        self._acked = self._announced = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="areal-failure-watch", daemon=True)

    @classmethod
    def for_this_rank(cls, rank: int, world_size: int, timeout_s: float) -> FailureWatch:
        """Connect to the job's store (torchrun's environment) and start watching."""
        clients = [connect_store(max(timeout_s, 5.0)) for _ in range(2)]
        return cls(*clients, rank, world_size, timeout_s=timeout_s, prefix=_store_prefix(os.environ)).start()

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> FailureWatch:
        global _ACTIVE
        _ACTIVE = self
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop watching (a finished or failed rank); no exit is forced afterwards."""
        global _ACTIVE
        self._stop.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=max(1.0, 5 * self.poll_s))
        if _ACTIVE is self:
            _ACTIVE = None

    # -- the watcher thread ------------------------------------------------------------------

    def _poll(self) -> FailureReport | None:
        if not self.watch_store.check([self.root_key]):
            return None
        return FailureReport.from_json(self.watch_store.get(self.root_key))

    def _watch(self) -> None:
        while not self._stop.wait(self.poll_s):
            try:
                report = self._poll()
            except Exception:  # the store is gone (its host exited): nothing more to learn from it
                return
            if report is None:
                continue
            if report.reporter != self.rank:
                self._learn(report)
                self._deadline(report)
            return

    def _learn(self, report: FailureReport) -> None:
        """A peer failed: log it and write this rank's error file (once each), acknowledge, remember it.

        The error file comes first: the failing rank may exit as soon as every
        rank has acknowledged, and torchrun then ends this rank at once.
        """
        with self._lock:
            self.peer_report = report
            announce, self._announced = not self._announced, True
        if announce:
            self.log(f"[areal] rank {self.rank}: stopping because {report.describe()}")
            write_error_file(RankFailure(report, self.rank, "which its failure watcher reported"))
        self._ack(self.watch_store)

    def _ack(self, store: Any) -> None:
        with self._lock:
            if self._acked:
                return
            self._acked = True
        try:
            store.add(self.ack_key, 1)
        except Exception:
            pass

    def _deadline(self, report: FailureReport) -> None:
        """Give the main thread `timeout_s` to stop by itself, then end the process."""
        if self._stop.wait(self.timeout_s):
            return
        failure = RankFailure(report, self.rank, f"ended by its failure watcher: still running {self.timeout_s:g} s "
                                                 "after learning of it")
        self.log(f"[areal] rank {self.rank}: error: {failure}")
        write_error_file(failure)
        sys.stderr.flush()
        self.exit_fn(1)

    # -- the main thread ---------------------------------------------------------------------

    def raise_if_peer_failed(self) -> None:
        report = self.peer_report
        if report is not None:
            raise PeerFailure(report, self.rank, "at its next stage boundary")

    def publish(self, exc: BaseException) -> FailureReport:
        """Report this rank's exception; returns the job's root cause (this report, or an earlier one)."""
        mine = report_for(exc, self.rank)
        root = self.peer_report
        if root is None:
            try:
                root = FailureReport.from_json(self.store.compare_set(self.root_key, "", mine.to_json()))
            except Exception:  # the store is unreachable: what this rank knows is all there is
                root = mine
        if root.reporter != self.rank:
            with self._lock:
                self.peer_report = root
            self._ack(self.store)
        return root

    def wait_for_acks(self) -> bool:
        """Block until every other rank has acknowledged the root cause (False after `timeout_s`)."""
        deadline = time.monotonic() + self.timeout_s
        while time.monotonic() < deadline:
            try:
                if self.store.add(self.ack_key, 0) >= self.world_size - 1:
                    return True
            except Exception:
                return False
            time.sleep(self.poll_s)
        return False

    def fail(self, exc: BaseException) -> RankFailure:
        """Publish `exc`, let the peers learn the root cause, and return the `RankFailure` to end with."""
        if isinstance(exc, RankFailure):  # stopped at a stage boundary: the root cause is known already
            self.close()
            return exc
        root = self.publish(exc)
        own = f"{type(exc).__name__}: {exc}"
        failure = RankFailure(root, self.rank, None if own == root.error else f"after its own error: {own}")
        failure.__cause__ = exc
        if root.reporter == self.rank:
            write_error_file(failure)  # before waiting: torchrun may end this rank once the others are gone
            if not self.wait_for_acks():
                self.log(f"[areal] rank {self.rank}: not every rank acknowledged the failure within "
                         f"{self.timeout_s:g} s (a rank may already be gone); stopping anyway")
        self.close()
        return failure
