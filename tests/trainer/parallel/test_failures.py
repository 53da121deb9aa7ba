"""The cross-rank failure protocol (`areal_adv.trainer.parallel.failures`), in one process on a real TCPStore.

Each "rank" is a `FailureWatch` with its own store clients; the torchrun tests in
test_distributed_failures.py run the same protocol across processes.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest
import torch.distributed as dist

from areal_adv.trainer.parallel import failures
from areal_adv.trainer.parallel.failures import (
    FailureReport,
    FailureWatch,
    PeerFailure,
    RankFailure,
    report_for,
    stage,
    staged,
)

#: each wait's bound where a test expects the wait to end early (an acknowledgement, a SIGTERM): generous, so a
#: loaded machine cannot turn a wait that ends early into a timeout (the tests of the bound set their own)
TIMEOUT_S = 10.0


class _Plugin(Exception):
    pass


def _plugin_fn() -> None:
    raise _Plugin("plugin exploded")


def _wrapped_failure() -> BaseException:
    """A stage error wrapping a plugin's exception, raised inside two stages."""
    try:
        with stage("step 3"), stage("advantages"):
            try:
                _plugin_fn()
            except _Plugin as exc:
                raise RuntimeError("advantage stage 'outcome_reward_shaping' (my.plugin): raised _Plugin") from exc
    except RuntimeError as exc:
        return exc
    raise AssertionError("unreachable")


def test_report_names_ranks_stage_cause_and_the_innermost_frame() -> None:
    exc = _wrapped_failure()
    report = report_for(exc, rank=1)
    assert report.ranks == (1,) and report.reporter == 1
    assert report.stage == "step 3 > advantages"
    assert report.error == "RuntimeError: advantage stage 'outcome_reward_shaping' (my.plugin): raised _Plugin"
    assert report.where.endswith("test_failures.py:" + str(_plugin_fn.__code__.co_firstlineno + 1) + " in _plugin_fn")
    assert report.describe() == (f"rank 1 failed in step 3 > advantages: {report.error} (raised at {report.where})")
    assert FailureReport.from_json(report.to_json()) == report


def test_ranks_that_agreed_on_a_failure_are_named_instead_of_the_reporter() -> None:
    exc = FloatingPointError("non-finite loss on rank(s) [2, 3]")
    exc.failed_ranks = [2, 3]
    report = report_for(exc, rank=0)
    assert report.ranks == (2, 3) and report.reporter == 0 and report.stage == "an unnamed stage"
    assert report.describe().startswith("ranks [2, 3] failed in an unnamed stage: FloatingPointError")


def test_staged_decorator_names_the_stage_from_the_arguments() -> None:
    @staged(lambda step: f"step {step}")
    def step(step: int) -> None:
        with stage("rollout"):
            raise KeyError("reward")

    with pytest.raises(KeyError) as info:
        step(7)
    assert report_for(info.value, 0).stage == "step 7 > rollout"


def test_rank_failure_says_how_a_healthy_rank_stopped() -> None:
    report = report_for(_wrapped_failure(), rank=1)
    assert str(RankFailure(report, 1)) == report.describe()
    assert str(RankFailure(report, 0, "after its own error: RuntimeError: Connection closed by peer")) == (
        report.describe()
        + "; rank 0 stopped because of it, after its own error: RuntimeError: Connection closed by peer"
    )


# ---------------------------------------------------------------------------
# the protocol between ranks
# ---------------------------------------------------------------------------


class Job:
    """A TCPStore and one FailureWatch per rank, as torchrun's ranks would have them."""

    def __init__(self, world_size: int, timeout_s: float = TIMEOUT_S, poll_s: float = 0.02) -> None:
        self.server = dist.TCPStore(
            "127.0.0.1",
            0,
            is_master=True,
            wait_for_workers=False,  # 0: the kernel picks a
            timeout=timedelta(seconds=10),
        )  # free port, no race
        port = self.server.port
        self.logs: dict[int, list[str]] = {r: [] for r in range(world_size)}
        self.exits: dict[int, list[int]] = {r: [] for r in range(world_size)}
        self.watches = [self._watch(port, r, world_size, timeout_s, poll_s) for r in range(world_size)]

    def _watch(self, port: int, rank: int, world_size: int, timeout_s: float, poll_s: float) -> FailureWatch:
        clients = [
            dist.TCPStore("127.0.0.1", port, is_master=False, wait_for_workers=False, timeout=timedelta(seconds=10))
            for _ in range(2)
        ]
        return FailureWatch(
            *clients,
            rank,
            world_size,
            timeout_s=timeout_s,
            poll_s=poll_s,
            exit_fn=self.exits[rank].append,
            log=self.logs[rank].append,
        )

    def start(self) -> Job:
        for w in self.watches:
            w._thread.start()  # not start(): one process holds several "ranks", none is the process's watch
        return self

    def close(self) -> None:
        for w in self.watches:
            w.close()


@pytest.fixture
def error_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(tmp_path / "error.json"))
    return tmp_path / "error.json"


def test_failing_rank_waits_until_the_peer_knows_the_root_cause(error_files: Path) -> None:
    job = Job(2).start()
    try:
        start = time.monotonic()
        failure = job.watches[1].fail(_wrapped_failure())
        waited = time.monotonic() - start
        assert waited < TIMEOUT_S  # acknowledged, not timed out
        assert failure.report.reporter == 1 and str(failure) == failure.report.describe()
        peer = job.watches[0]
        assert peer.peer_report == failure.report
        assert job.logs[0] == [f"[areal-adv] rank 0: stopping because {failure.report.describe()}"]
        with pytest.raises(PeerFailure, match="rank 0 stopped because of it, at its next stage boundary"):
            peer.raise_if_peer_failed()
        # the healthy rank's own error then defers to the root cause
        healthy = peer.fail(RuntimeError("Connection closed by peer"))
        assert healthy.report == failure.report
        assert str(healthy).endswith(
            "rank 0 stopped because of it, after its own error: RuntimeError: Connection closed by peer"
        )
        assert job.exits == {0: [], 1: []}
    finally:
        job.close()


def test_a_rank_ends_with_the_same_failure_at_a_stage_boundary_as_in_a_collective(
    error_files: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whether a healthy rank's watcher learns of the report before or after its main thread enters a collective
    is timing (a loaded machine delays either side); the failure it ends with is a `RankFailure` either way.

    Both orders are made explicit: rank 0 learnt it before its next stage boundary (`PeerFailure` there), rank 2
    was already in a collective that then failed.
    """
    job = Job(3).start()
    try:
        root = job.watches[1].fail(_wrapped_failure())
        at_boundary = job.watches[0]
        monkeypatch.setattr(failures, "_ACTIVE", at_boundary)  # rank 0 is this process's rank for `stage()`
        assert at_boundary.peer_report == root.report  # its watcher learnt it (fail waited for every acknowledgement)
        with pytest.raises(PeerFailure) as info:
            with stage("reference log-probs and values"):
                pass
        stopped = at_boundary.fail(info.value)
        in_collective = job.watches[2].fail(RuntimeError("Connection closed by peer"))
        for rank, failure in ((0, stopped), (2, in_collective)):
            assert type(failure) is RankFailure and failure.report == root.report and failure.rank == rank
            failures.write_error_file(failure)
            message = json.loads(error_files.read_text())["message"]["message"]
            assert message.startswith(f"RankFailure: {root.report.describe()}; rank {rank} stopped because of it, ")
        assert str(stopped).endswith("rank 0 stopped because of it, at its next stage boundary")
        assert stopped.__cause__ is info.value
    finally:
        job.close()


def test_the_first_report_is_the_root_cause_on_every_rank() -> None:
    job = Job(3)
    try:
        first = job.watches[2].publish(_wrapped_failure())
        later = [job.watches[r].publish(ValueError(f"consequence on rank {r}")) for r in (0, 1)]
        assert first.reporter == 2 and all(r == first for r in later)
        assert job.watches[2].wait_for_acks()  # ranks 0 and 1 acknowledged by publishing
    finally:
        job.close()


def test_waiting_for_acknowledgements_is_bounded_when_a_peer_is_gone() -> None:
    job = Job(2, timeout_s=0.3)  # rank 0's watcher never runs: it cannot acknowledge
    try:
        start = time.monotonic()
        failure = job.watches[1].fail(KeyError("bad batch"))
        assert 0.3 <= time.monotonic() - start < TIMEOUT_S  # its own bound, not any longer one
        assert "not every rank acknowledged the failure within 0.3 s" in job.logs[1][0]
        assert failure.report.error == "KeyError: 'bad batch'"
    finally:
        job.close()


def test_a_rank_that_does_not_stop_is_ended_by_its_watcher(error_files: Path) -> None:
    job = Job(2, timeout_s=0.3).start()
    try:
        failure = job.watches[1].fail(_wrapped_failure())
        _wait_until(lambda: job.exits[0] != [])
        assert job.exits[0] == [1]  # rank 0's main thread never stopped: its watcher ended it
        assert "ended by its failure watcher: still running 0.3 s after learning of it" in job.logs[0][-1]
        data = json.loads(error_files.read_text())["message"]
        assert data["message"].startswith(f"RankFailure: {failure.report.describe()}; rank 0 stopped")
        assert int(data["extraInfo"]["timestamp"]) >= int(failure.report.time) + 1  # after the root cause
    finally:
        job.close()


def test_closed_watch_never_ends_the_process() -> None:
    job = Job(2, timeout_s=0.2).start()
    job.watches[0].close()
    job.watches[1].fail(ValueError("late failure"))
    time.sleep(0.5)
    assert job.exits[0] == [] and job.logs[0] == []
    job.close()


def test_error_file_stamps_the_root_cause_first(error_files: Path) -> None:
    report = report_for(_wrapped_failure(), rank=1)
    failures.write_error_file(RankFailure(report, 1))
    root = json.loads(error_files.read_text())["message"]
    assert root["extraInfo"]["timestamp"] == str(int(report.time))
    assert root["message"] == f"RankFailure: {report.describe()}"
    failures.write_error_file(RankFailure(report, 0, "at its next stage boundary"))
    peer = json.loads(error_files.read_text())["message"]
    assert int(peer["extraInfo"]["timestamp"]) >= int(report.time) + 1


def test_stage_entry_raises_once_the_process_watch_knows_of_a_peer_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    job = Job(2)
    try:
        monkeypatch.setattr(failures, "_ACTIVE", job.watches[0])
        with stage("rollout"):
            pass
        job.watches[0].peer_report = report_for(ValueError("x"), rank=1)
        with pytest.raises(PeerFailure, match=r"^rank 1 failed"):
            with stage("advantages"):
                pass
    finally:
        job.close()


def test_watcher_stops_quietly_when_the_store_goes_away() -> None:
    job = Job(2).start()
    thread = job.watches[0]._thread
    del job.server  # the store's host exits
    thread.join(timeout=30)  # returns as soon as the watcher has stopped
    assert not thread.is_alive() and job.exits[0] == []
    threading.Thread(target=job.close).start()


# ---------------------------------------------------------------------------
# a collective that failed because of a gone or silent peer (areal_adv.trainer.parallel.peer_progress)
# ---------------------------------------------------------------------------

GLOO_CLOSED = (
    "[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer "
    "[127.0.0.1]:2950. This is typically caused by a remote worker crashing."
)
GLOO_TIMEOUT = (
    "[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting "
    "10000ms for recv operation to complete"
)


def _wait_until(done: Callable[[], bool], bound_s: float = 30.0) -> None:
    """Poll `done` until it holds; the bound only guards a loaded machine (the loop ends when it holds)."""
    deadline = time.monotonic() + bound_s
    while not done() and time.monotonic() < deadline:
        time.sleep(0.02)


def _raised_in(path: tuple[str, ...], exc: BaseException) -> BaseException:
    """`exc` as it leaves the stages `path` (so it carries the stage path)."""
    try:
        with contextlib.ExitStack() as stack:
            for name in path:
                stack.enter_context(stage(name))
            raise exc
    except BaseException as caught:
        return caught
    raise AssertionError("unreachable")


def test_collective_failures_are_told_from_user_errors_that_mention_timeouts() -> None:
    from areal_adv.trainer.parallel.peer_progress import GONE, SILENT, collective_failure

    assert collective_failure(RuntimeError(GLOO_CLOSED)) == GONE
    assert collective_failure(RuntimeError(GLOO_TIMEOUT)) == SILENT
    assert collective_failure(RuntimeError("Application timeout caused pair closure")) == SILENT
    assert collective_failure(dist.DistBackendError("NCCL communicator was aborted")) == SILENT
    try:
        try:
            raise RuntimeError(GLOO_CLOSED)
        except RuntimeError as inner:
            raise ValueError("advantage stage 'estimator' failed") from inner
    except ValueError as wrapped:
        assert collective_failure(wrapped) == GONE
    for user in (
        TimeoutError("the reward server timed out"),
        RuntimeError("HTTP request timed out"),
        ValueError("Connection closed by peer"),
        KeyError("beat"),
    ):
        assert collective_failure(user) is None, user


def test_suspects_are_peers_elsewhere_and_stalled_ones_have_a_still_beat() -> None:
    from areal_adv.trainer.parallel.peer_progress import Stamp, stalled, suspects

    stamps = {
        0: Stamp("step 1 > policy update", 9),
        1: Stamp("step 1 > rollout", 4),
        2: Stamp(None, 0),
        3: Stamp("step 1 > policy update", 7),
    }
    assert suspects(stamps, "step 1 > policy update", rank=0) == [1, 2]
    later = {**stamps, 1: Stamp("step 1 > rollout", 5), 3: Stamp("step 1 > policy update", 7)}
    assert stalled(stamps, later, rank=0) == [2, 3]


def test_stages_stamp_where_the_main_thread_is_and_keep_the_failing_one(monkeypatch: pytest.MonkeyPatch) -> None:
    job = Job(2)
    try:
        watch = job.watches[0]
        monkeypatch.setattr(failures, "_ACTIVE", watch)
        key = f"{watch.stamp_prefix}/0/stage"
        with stage("step 1"):
            with stage("rollout"):
                assert job.server.get(key) == b"step 1 > rollout"
            assert job.server.get(key) == b"step 1"
        assert job.server.get(key) == b""
        _raised_in(("step 2", "policy update"), RuntimeError(GLOO_CLOSED))
        assert job.server.get(key) == b"step 2 > policy update"  # a failed collective freezes the stamp
        with stage("metrics"):
            pass
        assert job.server.get(key) == b"step 2 > policy update"
    finally:
        job.close()


def test_a_peer_gone_in_another_stage_is_the_root_cause_and_the_reporter_waits_for_sigterm(error_files: Path) -> None:
    job = Job(2)
    job.watches[0]._thread.start()  # rank 1's process is gone: no watcher, no beat
    try:
        job.watches[1].mark("step 1 > rollout")
        job.watches[0].mark("step 1 > policy update")
        beat_checks: list[object] = []
        job.watches[0]._stalled_peers = lambda before: beat_checks.append(before) or []
        failure = job.watches[0].fail(_raised_in(("step 1", "policy update"), RuntimeError(GLOO_CLOSED)))
        assert beat_checks == []  # a closed connection needs no beat check
        report = failure.report
        assert (report.ranks, report.reporter, report.stage, report.where) == ((1,), 0, "step 1 > rollout", "")
        assert str(failure) == (
            "rank 1 failed in step 1 > rollout: its process ended without reporting an error (a hard exit, a kill or "
            "a crash; torchrun's summary has its exit code); rank 0 found it gone when its collective in "
            f"step 1 > policy update failed; rank 0 stopped because of it, after its own error: RuntimeError: "
            f"{GLOO_CLOSED}"
        )
        failures.write_error_file(failure)
        assert int(json.loads(error_files.read_text())["message"]["extraInfo"]["timestamp"]) >= int(report.time) + 1
        start = time.monotonic()
        threading.Timer(0.2, setattr, (job.watches[0], "terminated", True)).start()  # torchrun's SIGTERM
        job.watches[0].linger(failure)
        assert 0.15 <= time.monotonic() - start < TIMEOUT_S and job.exits[0] == [1]
    finally:
        job.close()


def test_a_silent_peer_claims_the_root_cause_says_where_it_is_stuck_and_ends(error_files: Path) -> None:
    job = Job(2, poll_s=0.1).start()  # the trainer's poll: rank 1's beat must look alive for 0.5 s, even when loaded
    try:
        job.watches[1].mark("step 1 > rollout")
        failure = job.watches[0].fail(_raised_in(("step 1", "policy update"), RuntimeError(GLOO_TIMEOUT)))
        report = failure.report
        assert (report.ranks, report.reporter, report.stage) == ((1,), 0, "step 1 > rollout")
        assert report.error.startswith(
            "it stopped responding: its process was still running but did not reach the "
            "collective that rank 0 waited in (step 1 > policy update)"
        )
        start = time.monotonic()
        job.watches[0].linger(failure)  # returns on rank 1's acknowledgement, not after the timeout
        assert time.monotonic() - start < TIMEOUT_S
        _wait_until(lambda: job.exits[1] != [])  # rank 1's watcher exits just after it acknowledges
        assert job.exits == {0: [], 1: [1]}
        [line] = job.logs[1]
        assert line.startswith(f"[areal-adv] rank 1: error: {report.describe()}; its main thread is at ")
        root = json.loads(error_files.read_text())["message"]  # rank 1's: rank 0 has not written its own here
        assert root["extraInfo"]["timestamp"] == str(int(report.time))
    finally:
        job.close()


def test_a_timeout_with_a_still_beat_is_a_gone_peer() -> None:
    job = Job(2)
    job.watches[0]._thread.start()
    try:
        job.watches[1].mark("step 1 > policy update")  # in the same stage, but its watcher never beats
        failure = job.watches[0].fail(_raised_in(("step 1", "policy update"), RuntimeError(GLOO_TIMEOUT)))
        assert failure.report.ranks == (1,) and "found it gone" in failure.report.error
    finally:
        job.close()


def test_no_peer_is_blamed_for_a_user_error_or_when_every_peer_is_alive_in_the_same_stage() -> None:
    job = Job(2, poll_s=0.2).start()  # a stall window of 1 s: a loaded machine still beats within it
    try:
        job.watches[1].mark("step 1 > rollout")
        own = job.watches[0].diagnose(_raised_in(("step 1", "policy update"), ValueError("bad reward")))
        assert own is None  # not a collective: this rank's own failure
        job.watches[1].mark("step 1 > policy update")
        time.sleep(0.1)
        assert job.watches[0].diagnose(_raised_in(("step 1", "policy update"), RuntimeError(GLOO_TIMEOUT))) is None
        assert job.exits == {0: [], 1: []}
    finally:
        job.close()


_GRACE_SCRIPT = """
import os, signal, sys, time
from datetime import timedelta
import torch.distributed as dist
from areal_adv.trainer.parallel.failures import FailureWatch
server = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=10))
port = server.port
clients = [dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=10)) for _ in range(2)]
watch = FailureWatch(*clients, 0, 2, timeout_s=5.0).start()
watch.sigterm_grace_s = 3.0  # ample for the 0.3 s below on a loaded machine
start = time.monotonic()
os.kill(os.getpid(), signal.SIGTERM)
print("running after SIGTERM", flush=True)
if {starts_reporting}:
    time.sleep(0.3)  # the collective's error reaches the stage boundary
    watch._failing = True
    time.sleep(4.0)  # past the grace
    print("still reporting after the grace", flush=True)
    watch.close()  # as `main` does before it returns: a watcher still in a store call at exit aborts the process
    sys.exit(7)
time.sleep(60)  # the grace ends the process long before
print("not reached", flush=True)
"""


@pytest.mark.parametrize("starts_reporting", [False, True])
def test_sigterm_before_a_failure_is_known_gives_the_main_thread_a_grace(
    tmp_path: Path, starts_reporting: bool
) -> None:
    """torchrun's SIGTERM can beat the main thread to its failed collective: a rank that then starts
    reporting finishes; one that does not ends after the grace (128 + SIGTERM), not after its work."""
    script = tmp_path / "grace.py"
    script.write_text(_GRACE_SCRIPT.format(starts_reporting=starts_reporting))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=180)
    if starts_reporting:
        assert proc.stdout == "running after SIGTERM\nstill reporting after the grace\n", proc.stderr
        assert proc.returncode == 7
    else:
        assert proc.stdout == "running after SIGTERM\n", proc.stderr
        assert proc.returncode == 128 + signal.SIGTERM  # at the grace: its 60 s sleep did not end ("not reached")


def test_sigterm_lets_a_reporting_rank_finish_and_ends_a_rank_knowing_the_failure_at_once(tmp_path: Path) -> None:
    script = tmp_path / "term.py"
    script.write_text("""
import os, signal, sys, time
from datetime import timedelta
import torch.distributed as dist
from areal_adv.trainer.parallel.failures import FailureReport, FailureWatch
server = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=10))
port = server.port
clients = [dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=10)) for _ in range(2)]
watch = FailureWatch(*clients, 0, 2, timeout_s=5.0).start()
watch._failing = True
os.kill(os.getpid(), signal.SIGTERM)
print("reporting rank still running, terminated =", watch.terminated, flush=True)
watch._failing = False
watch.peer_report = FailureReport((1,), 1, "step 1 > rollout", "ValueError: x", "f.py:1 in f")
os.kill(os.getpid(), signal.SIGTERM)
time.sleep(60)  # the handler ends the process at once
print("not reached", flush=True)
""")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=180)
    assert proc.stdout == "reporting rank still running, terminated = True\n", proc.stderr
    assert proc.returncode == -signal.SIGTERM
    assert proc.stderr.strip().endswith(
        "[areal-adv] rank 0: error: rank 1 failed in step 1 > rollout: ValueError: x "
        "(raised at f.py:1 in f); rank 0 stopped because of it, ended by its "
        "launcher (SIGTERM)"
    )


_CLOSED_SCRIPT = """
import os, signal, sys, time
from datetime import timedelta
import torch.distributed as dist
from areal_adv.trainer.parallel.failures import FailureWatch
server = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=10))
port = server.port
clients = [dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=10)) for _ in range(2)]
watch = FailureWatch(*clients, 1, 2, timeout_s=5.0).start()
watch._failing = {failing}  # fail() sets it: this rank reported a failure (its own or a peer's)
watch.close()  # as `main` does on its way out
print("closed", flush=True)
os.kill(os.getpid(), signal.SIGTERM)  # torchrun, once the other rank has ended first
time.sleep(60)  # the handler ends the process at once
print("not reached", flush=True)
"""


@pytest.mark.parametrize("failing", [True, False])
def test_sigterm_after_close_keeps_a_failed_rank_s_exit_status(tmp_path: Path, failing: bool) -> None:
    """A failing rank that has written its line and error file may still be exiting when a faster peer has
    ended and torchrun sends SIGTERM: it ends with status 1, so torchrun's root cause shows its own status,
    not -15. A rank that finished normally gets its previous handler back (here the default: -15)."""
    script = tmp_path / "closed.py"
    script.write_text(_CLOSED_SCRIPT.format(failing=failing))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=180)
    assert proc.stdout == "closed\n", proc.stderr
    assert proc.returncode == (1 if failing else -signal.SIGTERM), proc.stderr
