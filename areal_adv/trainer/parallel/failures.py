"""Failures under torchrun: one rank's exception stops every rank, and every rank names the root cause.

What torch provides:

* torch elastic's error files (`record`, `ErrorHandler`): the exception a rank
  ends with is in torchrun's failure summary;
* the rendezvous TCPStore (`MASTER_ADDR:MASTER_PORT`), a key-value store every
  rank reaches outside the collectives;
* gloo fails a collective as soon as a peer's process has exited, but only with
  "Connection closed by peer"; nccl keeps waiting until the collective timeout.

What no library does, and is hand-written here, is telling the other ranks *why*
a rank gave up. The protocol, on keys under `areal_adv/failure/<run id>/<attempt id>/` (the id the
attempt's ranks agreed on, `areal_adv.trainer.parallel.job_attempt`):

1. A rank whose step raises builds a `FailureReport` (failing rank(s), stage,
   exception, the innermost frame) and publishes it with `compare_set`: the
   first report stored is the root cause, later ones defer to it.
2. A watcher thread on every rank polls for a report. On a peer's report it
   prints the root cause to its rank's log, writes it to the rank's error file,
   acknowledges it, and gives its main thread `timeout_s` to stop by itself (its
   next collective fails once the failing rank has exited; its next `stage()`
   raises `PeerFailure`). After that it ends the process: the bound where a
   collective does not notice a dead peer (nccl) or the main thread is stuck.
   Which of the two stops the main thread depends on timing (where it is when
   the watcher learns of the report); either way the rank ends with the same
   `RankFailure`, only its "stopped because of it, ..." clause differs.
3. The failing rank writes its error file, then waits (at most `timeout_s`)
   until every peer has acknowledged, so that the cause is in every log and
   error file before its exit tears the collectives down (and torchrun ends the
   others), then ends with `RankFailure`.

A rank that dies hard (os._exit, a kill, a crash) or hangs publishes nothing.
Its peers' next collective fails ("Connection closed by peer", or the
process-group timeout), and the rank that sees it is not at fault. So:

4. Every rank stamps the stage its main thread is in, and its watcher a beat,
   in the store (`areal_adv.trainer.parallel.peer_progress`). A rank whose collective failed
   reads the stamps and publishes a report *for* the peer(s) it waited for:
   gone (the gloo error says so, or the beat stopped) or silent (still
   beating, but in another stage). It never names itself.
5. A silent rank's watcher sees that report, writes its error file with the
   report's time (the root cause), prints where its main thread is stuck,
   acknowledges and ends the process. The reporting rank prints its line,
   writes its error file stamped later, and waits (`linger`) for that
   acknowledgement, or, for a gone peer, until torchrun has seen the peer end
   and sends SIGTERM, so that torchrun's "Root Cause" is the peer.
6. A rank reporting a failure handles SIGTERM by finishing its line first
   (its main thread is in Python then); a rank that knows of no failure gets a
   few seconds to start reporting one (its collective may just have failed),
   then ends; a rank that knows of a peer's failure ends at once. A rank whose
   report is done (line and error file written, watch closed) ends with status
   1 at SIGTERM, so torchrun's summary shows the failing rank's own status even
   when a faster peer ended first; from the end of `main` on, through Python's
   shutdown (which drops signal handlers), it ignores SIGTERM for the same reason.

Every rank therefore ends with a `RankFailure` whose message names the failing
rank, the stage, the cause and where it was raised; `areal_adv.trainer.main` writes
it to the rank's error file and log. `stage(name)` marks the parts of a step so
that a report can say where it happened.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import asdict, dataclass
from datetime import timedelta
from typing import Any

from areal_adv.trainer.parallel.peer_progress import (
    GONE,
    SILENT,
    Stamp,
    collective_failure,
    peer_error,
    stalled,
    suspects,
)

__all__ = [
    "FailureReport",
    "FailureWatch",
    "PeerFailure",
    "RankFailure",
    "report_for",
    "stage",
    "staged",
    "write_error_file",
]

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
        where = f" (raised at {self.where})" if self.where else ""  # none for a rank that ended without a report
        return f"{who} failed in {self.stage}: {self.error}{where}"

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, raw: str | bytes) -> FailureReport:
        data = json.loads(raw)
        return cls(
            tuple(data["ranks"]),
            data["reporter"],
            data["stage"],
            data["error"],
            data["where"],
            float(data.get("time", 0.0)),
        )


class RankFailure(RuntimeError):
    """How a rank ends after a failure anywhere in the job: the message names the root cause.

    `how` says how a rank that is not among the failing ones came to stop (for
    example "after its own error: RuntimeError: ... Connection closed by peer",
    the gloo error it saw once the failing rank had exited).
    """

    def __init__(self, report: FailureReport, rank: int, how: str | None = None) -> None:
        self.report = report
        self.rank = rank
        self.how = how
        message = report.describe()
        if how is not None and rank not in report.ranks:
            message += f"; rank {rank} stopped because of it, {how}"
        super().__init__(message)


class PeerFailure(RankFailure):
    """Raised at a stage boundary on a healthy rank once a peer's failure is known.

    It only unwinds the rank's work: `FailureWatch.fail` turns it into the plain
    `RankFailure` the rank ends with, so a rank's last line and error file read
    the same whether it stopped at a stage boundary or in a collective (which of
    the two comes first is a matter of timing).
    """


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
    """This rank's report of `exc` (raised inside `stage()` blocks).

    Ranks that agreed on a failure (`failed_ranks`; a `CallFailure` also brings
    the failing rank's `failed_error` and `failed_where`) are reported as that
    failure, whichever rank publishes it.
    """
    ranks = getattr(exc, "failed_ranks", None) or [rank]
    return FailureReport(
        ranks=tuple(int(r) for r in ranks),
        reporter=rank,
        stage=getattr(exc, _STAGE_ATTR, None) or "an unnamed stage",
        error=getattr(exc, "failed_error", None) or f"{type(exc).__name__}: {exc}",
        where=getattr(exc, "failed_where", None) or _where(_innermost(exc)),
        time=time.time(),
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
    if _ACTIVE is not None:
        _ACTIVE.mark(" > ".join(path))
    try:
        yield
    except BaseException as exc:
        if getattr(exc, _STAGE_ATTR, None) is None:
            try:
                setattr(exc, _STAGE_ATTR, " > ".join(path))
            except AttributeError:  # exceptions with __slots__
                pass
        if _ACTIVE is not None:
            _ACTIVE.note_exception(exc)  # the stamp stays where it failed
        raise
    else:
        if _ACTIVE is not None:
            _ACTIVE.mark(" > ".join(path[:-1]))
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


def _main_thread_at() -> str:
    """The innermost Python frame the main thread is running (where a silent rank is stuck)."""
    frame = sys._current_frames().get(threading.main_thread().ident or -1)
    if frame is None:
        return "an unknown location"
    return f"{frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}"


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def write_error_file(failure: RankFailure) -> None:
    """This rank's torch elastic error file (what torchrun's summary prints); a no-op outside torchrun.

    The format is the one `ErrorHandler.record_exception` writes, written here
    because of its `timestamp`: torchrun names the failure with the smallest
    one (whole seconds; on a tie, the rank it saw end first) the job's root
    cause. A failing rank (one the report names) stamps the report's time; a
    rank stopped by it, the reporter for a gone or silent peer included, stamps
    at least one second later and never before now, so the summary's root cause
    is the failing rank.
    """
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if not path:
        return
    reported = int(failure.report.time)
    stamp = reported if failure.rank in failure.report.ranks else max(int(time.time()), reported + 1)
    data = {
        "message": {
            "message": f"{type(failure).__name__}: {failure}",
            "extraInfo": {"py_callstack": "".join(traceback.format_exception(failure)), "timestamp": str(stamp)},
        }
    }
    tmp = f"{path}.{threading.get_ident()}.tmp"  # the watcher thread and the main thread may both write
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(data, fh)
    os.replace(tmp, path)


def _exit_reported(signum: int, frame: Any) -> None:
    """SIGTERM after this rank's failure is reported (line, error file): end with the failure's status."""
    with contextlib.suppress(Exception):  # the handler may interrupt a write in progress
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(1)


def keep_exit_status_through_shutdown() -> None:
    """Ignore SIGTERM from now on: a rank that has reported its failure ends with its own exit status.

    Python's finalisation puts back the default action of every signal it had
    a handler for, so a SIGTERM that arrives while the interpreter shuts down
    (freeing a model can take seconds on a loaded machine) would kill the rank
    by the signal, and torchrun's summary would show -15 instead of the
    failing rank's status. An ignored signal stays ignored through it; the
    launcher's SIGKILL after its grace period still ends a rank that hangs.
    """
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, signal.SIG_IGN)


def _store_prefix(env: dict[str, str] | os._Environ, attempt: str | None = None) -> str:
    """Keys of this job attempt: torchrun's run id and the attempt's id (a restarted job starts clean).

    `attempt` is the id the ranks agreed on (`areal_adv.trainer.parallel.job_attempt`); without one, torchrun's
    restart count stands in, which tells attempts apart only when every agent counted every restart.
    """
    run = env.get("TORCHELASTIC_RUN_ID", "local")
    return f"areal_adv/failure/{run}/{attempt if attempt is not None else env.get('TORCHELASTIC_RESTART_COUNT', '0')}"


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

    def __init__(
        self,
        store: Any,
        watch_store: Any,
        rank: int,
        world_size: int,
        *,
        timeout_s: float,
        poll_s: float = 0.1,
        prefix: str = "areal_adv/failure/local/0",
        exit_fn: Callable[[int], None] = os._exit,
        log: Callable[[str], None] = _stderr,
    ) -> None:
        self.store, self.watch_store = store, watch_store
        self.rank, self.world_size = rank, world_size
        self.timeout_s, self.poll_s = timeout_s, poll_s
        self.root_key, self.ack_key, self.stamp_prefix = f"{prefix}/root", f"{prefix}/acks", f"{prefix}/stamp"
        self.exit_fn, self.log = exit_fn, log
        self.peer_report: FailureReport | None = None
        self.terminated = False  # the launcher sent SIGTERM while this rank was reporting a failure
        #: after a SIGTERM with no failure known, how long the main thread may take to start reporting one
        self.sigterm_grace_s = max(3.0, 20 * poll_s)
        self._stage, self._failing, self._reported_gone = "", False, False
        self._lock = threading.Lock()
        self._acked = self._announced = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="areal-failure-watch", daemon=True)
        self._previous_sigterm: Any = None

    @classmethod
    def for_this_rank(cls, rank: int, world_size: int, timeout_s: float, attempt: str | None = None) -> FailureWatch:
        """Connect to the job's store (torchrun's environment) and start watching this attempt's keys."""
        clients = [connect_store(max(timeout_s, 5.0)) for _ in range(2)]
        prefix = _store_prefix(os.environ, attempt)
        return cls(*clients, rank, world_size, timeout_s=timeout_s, prefix=prefix).start()

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> FailureWatch:
        global _ACTIVE
        _ACTIVE = self
        if threading.current_thread() is threading.main_thread():
            self._previous_sigterm = signal.signal(signal.SIGTERM, self._on_sigterm)
        self._thread.start()
        return self

    def _stop_watching(self) -> None:
        global _ACTIVE
        self._stop.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=max(1.0, 5 * self.poll_s))
        if _ACTIVE is self:
            _ACTIVE = None

    def close(self) -> None:
        """Stop watching (a finished or failed rank); no exit is forced afterwards.

        A rank that reported a failure keeps its exit status: the launcher's
        SIGTERM (sent once another rank has ended, which may be before this one
        is through its exit) then ends it with status 1 rather than killing it
        by the signal, so torchrun's summary shows the failing rank's own status.
        """
        self._stop_watching()
        if self._previous_sigterm is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, _exit_reported if self._failing else self._previous_sigterm)
            self._previous_sigterm = None

    def _on_sigterm(self, signum: int, frame: Any) -> None:
        """torchrun ends the ranks once one has ended: a rank reporting a failure first finishes its line.

        With a peer's failure known, SIGTERM does what it does by default after
        saying why. With nothing known yet the main thread may be between a
        collective that just failed (the peer is gone) and the stage boundary
        where it starts reporting (`note_exception`): a loaded machine makes
        that gap longer than torchrun's reaction to the peer's exit. It gets
        `sigterm_grace_s` to start reporting; a rank that does not is then ended
        (exit status 128 + SIGTERM), so a healthy rank is not kept alive.
        """
        self.terminated = True
        if self._failing:
            return
        report = self.peer_report
        if report is None:
            threading.Thread(target=self._end_unless_reporting, name="areal-sigterm-grace", daemon=True).start()
            return
        self._say_ended_by_launcher(report)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)

    def _say_ended_by_launcher(self, report: FailureReport) -> None:
        failure = RankFailure(report, self.rank, "ended by its launcher (SIGTERM)")
        with contextlib.suppress(Exception):  # a handler may interrupt a write to stderr
            self.log(f"[areal-adv] rank {self.rank}: error: {failure}")
            write_error_file(failure)
            sys.stderr.flush()

    def _end_unless_reporting(self) -> None:
        """After SIGTERM with no failure known: end the process unless the main thread starts reporting."""
        deadline = time.monotonic() + self.sigterm_grace_s
        while time.monotonic() < deadline:
            if self._failing:
                return  # the main thread reports and ends the process itself (`linger`)
            time.sleep(min(self.poll_s, 0.05))
        if self._failing:
            return
        report = self.peer_report
        if report is not None:
            self._say_ended_by_launcher(report)
        os._exit(128 + signal.SIGTERM)

    # -- progress stamps (areal_adv.trainer.parallel.peer_progress) ----------------------------------------

    def mark(self, path: str) -> None:
        """Stamp the stage the main thread is in now (one store write, tens of microseconds)."""
        if self._failing:
            return
        self._stage = path
        try:
            self.store.set(f"{self.stamp_prefix}/{self.rank}/stage", path)
        except Exception:  # the store is gone: the stamp is only needed while it is there
            pass

    def note_exception(self, exc: BaseException) -> None:
        """A collective failed in a stage: from now on this rank is reporting a failure (see `_on_sigterm`)."""
        if collective_failure(exc) is not None:
            self._failing = True

    def _beat_once(self) -> None:
        self.watch_store.add(f"{self.stamp_prefix}/{self.rank}/beat", 1)

    def _read_stamps(self) -> dict[int, Stamp]:
        """Every rank's stamp: its stage (written by its main thread) and beat (by its watcher)."""
        stamps: dict[int, Stamp] = {}
        for r in range(self.world_size):
            key = f"{self.stamp_prefix}/{r}/stage"
            beat = int(self.store.add(f"{self.stamp_prefix}/{r}/beat", 0))
            stamps[r] = Stamp(self.store.get(key).decode() if self.store.check([key]) else None, beat)
        return stamps

    def _stalled_peers(self, before: dict[int, Stamp]) -> list[int]:
        """Peers whose beat stays still for 5 polls (stops early once the launcher ends this rank)."""
        deadline = time.monotonic() + 5 * self.poll_s
        while time.monotonic() < deadline and not self.terminated:
            time.sleep(self.poll_s)
        return stalled(before, self._read_stamps(), self.rank)

    def diagnose(self, exc: BaseException) -> FailureReport | None:
        """A report for the peer(s) a failed collective waited for, or None (not a collective, or no culprit).

        The peers not in this rank's stage are the ones it waited for; when
        every peer is in it, a stalled beat names the one that is gone. A
        timeout is checked against the beats too: a stalled beat means gone.
        """
        kind = collective_failure(exc)
        if kind is None:
            return None
        mine = getattr(exc, _STAGE_ATTR, None) or self._stage
        try:
            stamps = self._read_stamps()
            ranks = suspects(stamps, mine, self.rank)
            if not ranks or kind == SILENT:
                stopped = self._stalled_peers(stamps)
                ranks, kind = (ranks, kind) if not stopped else ([r for r in ranks if r in stopped] or stopped, GONE)
        except Exception:  # the store is unreachable: nothing to tell the peers apart with
            return None
        if not ranks:
            return None
        self._reported_gone = kind == GONE
        first = stamps[ranks[0]].stage
        return FailureReport(
            ranks=tuple(ranks),
            reporter=self.rank,
            stage=first or "its start-up",
            error=peer_error(kind, self.rank, mine),
            where="",
            time=time.time(),
        )

    # -- the watcher thread ------------------------------------------------------------------

    def _poll(self) -> FailureReport | None:
        if not self.watch_store.check([self.root_key]):
            return None
        return FailureReport.from_json(self.watch_store.get(self.root_key))

    def _watch(self) -> None:
        while True:
            try:
                self._beat_once()
                report = self._poll()
            except Exception:  # the store is gone (its host exited): nothing more to learn from it
                return
            if report is not None:
                if self.rank in report.ranks and report.reporter != self.rank:
                    self._accused(report)
                elif report.reporter != self.rank:
                    self._learn(report)
                    self._deadline(report)
                return
            if self._stop.wait(self.poll_s):
                return

    def _learn(self, report: FailureReport) -> None:
        """A peer failed: log it and write this rank's error file (once each), acknowledge, remember it.

        The error file comes first: the failing rank may exit as soon as every
        rank has acknowledged, and torchrun then ends this rank at once.
        """
        with self._lock:
            self.peer_report = report
            # a main thread already failing (an agreed failure reaches every rank at once) says it itself
            announce, self._announced = not self._announced and not self._failing, True
        if announce:
            self.log(f"[areal-adv] rank {self.rank}: stopping because {report.describe()}")
            write_error_file(RankFailure(report, self.rank, "which its failure watcher reported"))
        self._ack(self.watch_store)

    def _accused(self, report: FailureReport) -> None:
        """A peer found this rank silent: say where its main thread is, claim the root cause, end the process.

        The main thread is stuck (or too slow for the peers' timeout), so the
        watcher does it: error file (the report's time), the line, the
        acknowledgement the reporter waits for, then the exit. A main thread
        already reporting an error of its own finishes that instead.
        """
        with self._lock:
            self.peer_report = report
            reporting = self._failing
        if not reporting:
            failure = RankFailure(report, self.rank)
            write_error_file(failure)
            self.log(f"[areal-adv] rank {self.rank}: error: {failure}; its main thread is at {_main_thread_at()}")
            sys.stderr.flush()
        self._ack(self.watch_store)
        if not reporting:
            self.exit_fn(1)

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
        failure = RankFailure(
            report, self.rank, f"ended by its failure watcher: still running {self.timeout_s:g} s after learning of it"
        )
        self.log(f"[areal-adv] rank {self.rank}: error: {failure}")
        write_error_file(failure)
        sys.stderr.flush()
        self.exit_fn(1)

    # -- the main thread ---------------------------------------------------------------------

    def raise_if_peer_failed(self) -> None:
        report = self.peer_report
        if report is not None:
            raise PeerFailure(report, self.rank, "at its next stage boundary")

    def publish(self, exc: BaseException, report: FailureReport | None = None) -> FailureReport:
        """Report this rank's exception (or `report`); returns the job's root cause (it, or an earlier one)."""
        mine = report or report_for(exc, self.rank)
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

    def _acks(self) -> int:
        return int(self.store.add(self.ack_key, 0))

    def wait_for_acks(self, until: Callable[[], bool] = lambda: False) -> bool:
        """Block until every other rank has acknowledged the root cause (False after `timeout_s` or `until()`)."""
        deadline = time.monotonic() + self.timeout_s
        while time.monotonic() < deadline and not until():
            try:
                if self._acks() >= self.world_size - 1:
                    return True
            except Exception:
                return False
            time.sleep(self.poll_s)
        return False

    def fail(self, exc: BaseException) -> RankFailure:
        """Publish `exc`, let the peers learn the root cause, and return the `RankFailure` to end with.

        A collective that failed for a gone or silent peer is reported as that
        peer's failure (`diagnose`); the reporting rank then waits in `linger`.
        """
        self._failing = True
        if isinstance(exc, RankFailure):  # stopped at a stage boundary: the root cause is known already
            self._stop_watching()
            if type(exc) is RankFailure:
                return exc
            failure = RankFailure(exc.report, exc.rank, exc.how)  # the same type whichever way the rank stopped
            failure.__cause__ = exc
            return failure
        root = self.publish(exc, None if self.peer_report is not None else self.diagnose(exc))
        own = f"{type(exc).__name__}: {exc}"
        if getattr(exc, "failed_error", None) == root.error:  # a CallFailure: the ranks agreed on it
            how = "when the ranks exchanged their status in that call"
        else:
            how = None if own == root.error else f"after its own error: {own}"
        failure = RankFailure(root, self.rank, how)
        failure.__cause__ = exc
        if root.reporter == self.rank and self.rank in root.ranks:
            write_error_file(failure)  # before waiting: torchrun may end this rank once the others are gone
            if not self.wait_for_acks():
                self.log(
                    f"[areal-adv] rank {self.rank}: not every rank acknowledged the failure within "
                    f"{self.timeout_s:g} s (a rank may already be gone); stopping anyway"
                )
        self._stop_watching()
        return failure

    def linger(self, failure: RankFailure) -> None:
        """After its line: a rank that reported for a gone or silent peer waits, so the peer is the root cause.

        A silent peer's watcher writes its error file before it acknowledges, so
        this rank waits for the acknowledgements. A gone peer acknowledges
        nothing: this rank waits for torchrun to see that peer end and send
        SIGTERM (so torchrun records the peer first). Both waits end after
        `timeout_s`. Any rank the launcher asked to end while it reported ends
        here, its error file rewritten (stamped no earlier than that request).
        """
        report = failure.report
        if report.reporter == self.rank and self.rank not in report.ranks:
            if self._reported_gone:
                deadline = time.monotonic() + self.timeout_s
                while not self.terminated and time.monotonic() < deadline:
                    time.sleep(self.poll_s)
            else:
                self.wait_for_acks(until=lambda: self.terminated)
        if self.terminated:
            write_error_file(failure)
            sys.stderr.flush()
            self.exit_fn(1)
