"""The job attempt's id: every rank gets the same one, and a store holding an earlier attempt's keys cannot mislead a rank."""

from __future__ import annotations

import threading
import time

import pytest
import torch.distributed as dist

from areal_adv.trainer.parallel.job_attempt import ATTEMPT_KEYS, agree_on_attempt


def _agree(store: dist.Store, world_size: int, *, rank0_delay_s: float = 0.0, timeout_s: float = 30.0) -> list[str]:
    """Every rank's id, each rank a thread on the one store; rank 0 starts `rank0_delay_s` after the others."""
    out: list[str | BaseException | None] = [None] * world_size

    def rank(r: int) -> None:
        if r == 0:
            time.sleep(rank0_delay_s)
        try:
            out[r] = agree_on_attempt(store, r, world_size, timeout_s=timeout_s, poll_s=0.005)
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            out[r] = exc

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(world_size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=timeout_s + 10)
    for value in out:
        if isinstance(value, BaseException):
            raise value
    assert all(isinstance(v, str) for v in out), out
    return out  # type: ignore[return-value]


def test_every_rank_gets_the_same_id_and_a_restart_a_new_one() -> None:
    store = dist.HashStore()
    first = _agree(store, 3)
    assert len(set(first)) == 1
    second = _agree(store, 3)
    assert len(set(second)) == 1 and second[0] != first[0]


def test_an_earlier_attempts_id_does_not_mislead_ranks_that_start_before_rank_0() -> None:
    """The other ranks read (and answer) the dead attempt's id first; they end with the live rank 0's."""
    store = dist.HashStore()
    earlier = _agree(store, 3)[0]
    later = _agree(store, 3, rank0_delay_s=0.3)
    assert len(set(later)) == 1 and later[0] != earlier
    assert store.check([f"{ATTEMPT_KEYS}/{earlier}/join/1"])  # the stale id was answered, to no effect


def test_a_single_rank_needs_no_peer() -> None:
    assert len(_agree(dist.HashStore(), 1)[0]) == 16


def test_a_missing_rank_0_or_peer_ends_in_a_bounded_time_naming_what_is_missing() -> None:
    store = dist.HashStore()
    with pytest.raises(RuntimeError, match="rank 0 published no id"):
        agree_on_attempt(store, 1, 2, timeout_s=0.2, poll_s=0.01)
    with pytest.raises(RuntimeError, match="rank 1 did not answer"):
        agree_on_attempt(store, 0, 2, timeout_s=0.2, poll_s=0.01)
    with pytest.raises(RuntimeError, match="rank 0 did not welcome this rank"):  # the id left by that rank 0
        agree_on_attempt(store, 1, 2, timeout_s=0.2, poll_s=0.01)
