"""The cross-rank failure protocol (`areal.trainer.failures`), in one process on a real TCPStore.

Each "rank" is a `FailureWatch` with its own store clients; the torchrun tests in
test_distributed_failures.py run the same protocol across processes.
"""

from __future__ import annotations

import json
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest
import torch.distributed as dist
from dist_launch import free_port

from areal.trainer import failures
from areal.trainer.failures import FailureReport, FailureWatch, PeerFailure, RankFailure, report_for, stage, staged

TIMEOUT_S = 1.0


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
        report.describe() + "; rank 0 stopped because of it, after its own error: RuntimeError: Connection closed by peer")


# ---------------------------------------------------------------------------
# the protocol between ranks
# ---------------------------------------------------------------------------


class Job:
    """A TCPStore and one FailureWatch per rank, as torchrun's ranks would have them."""

    def __init__(self, world_size: int, timeout_s: float = TIMEOUT_S) -> None:
        port = free_port()
        self.server = dist.TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False,
                                    timeout=timedelta(seconds=10))
        self.logs: dict[int, list[str]] = {r: [] for r in range(world_size)}
        self.exits: dict[int, list[int]] = {r: [] for r in range(world_size)}
        self.watches = [self._watch(port, r, world_size, timeout_s) for r in range(world_size)]

    def _watch(self, port: int, rank: int, world_size: int, timeout_s: float) -> FailureWatch:
        clients = [dist.TCPStore("127.0.0.1", port, is_master=False, wait_for_workers=False,
                                 timeout=timedelta(seconds=10)) for _ in range(2)]
        return FailureWatch(*clients, rank, world_size, timeout_s=timeout_s, poll_s=0.02,
                            exit_fn=self.exits[rank].append, log=self.logs[rank].append)

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
        assert job.logs[0] == [f"[areal] rank 0: stopping because {failure.report.describe()}"]
        with pytest.raises(PeerFailure, match="rank 0 stopped because of it, at its next stage boundary"):
            peer.raise_if_peer_failed()
        # the healthy rank's own error then defers to the root cause
        healthy = peer.fail(RuntimeError("Connection closed by peer"))
        assert healthy.report == failure.report
        assert str(healthy).endswith("rank 0 stopped because of it, after its own error: RuntimeError: "
                                     "Connection closed by peer")
        assert job.exits == {0: [], 1: []}
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
        assert 0.3 <= time.monotonic() - start < 2.0
        assert "not every rank acknowledged the failure within 0.3 s" in job.logs[1][0]
        assert failure.report.error == "KeyError: 'bad batch'"
    finally:
        job.close()


def test_a_rank_that_does_not_stop_is_ended_by_its_watcher(error_files: Path) -> None:
    job = Job(2, timeout_s=0.3).start()
    try:
        failure = job.watches[1].fail(_wrapped_failure())
        deadline = time.monotonic() + 5
        while not job.exits[0] and time.monotonic() < deadline:
            time.sleep(0.02)
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
    thread.join(timeout=3)
    assert not thread.is_alive() and job.exits[0] == []
    threading.Thread(target=job.close).start()
