"""Plugins that fail on one rank only, at call time (for the torchrun failure tests)."""

from __future__ import annotations

import os
import signal
import tempfile
import time
from pathlib import Path

from areal_adv.trainer.ppo.advantage import OutcomeResult


def fail_on_rank1(inputs, *, delay_s: float = 0.0):
    """An outcome-shaping stage that imports everywhere but raises when called on rank 1.

    `delay_s` first lets the other ranks walk into the next collective (a batch-level
    normalisation all-reduce), so the test covers a peer blocked in a collective.
    """
    if os.environ.get("RANK") == "1":
        time.sleep(delay_s)
        raise ValueError("simulated plugin failure on rank 1")
    return OutcomeResult(rewards=inputs.data["rewards"].float())


def reward_failing_on_rank0(prompts, completions, **columns):
    """A TRL-style reward function (`reward: [{implementation: ...}]`) that raises when called on rank 0."""
    if os.environ.get("RANK") == "0":
        raise ZeroDivisionError("simulated reward-function failure on rank 0")
    return [0.0 for _ in completions]


_CALLS: list[int] = []
#: how long rank 1's interpreter shutdown takes in the `boundary` run (module teardown frees `_SLOW_AT_SHUTDOWN`)
_SLOW_SHUTDOWN_S = 3.0


class _SlowToFree:
    """An object whose release at interpreter shutdown takes `_SLOW_SHUTDOWN_S` (a large model being freed)."""

    def __del__(self) -> None:
        time.sleep(_SLOW_SHUTDOWN_S)


_SLOW_AT_SHUTDOWN: list[_SlowToFree] = []
#: how long rank 0 waits for its failure watch to learn of rank 1's failure (a bound: it learns within a poll)
_LEARN_TIMEOUT_S = 120.0


def reward_dying_on_rank1(prompts, completions, *, how: str = "exit", at_call: int = 1, rank0: str = "free", **columns):
    """A reward function that, on rank 1 at its `at_call`-th call (0-based: step 1), exits hard or hangs.

    `how`: `exit` ends the process with os._exit(3) (no exception, no report, no error file);
    `hang` sleeps for an hour (a rank whose main thread never returns); `raise` raises.

    `rank0` fixes the order of events on rank 0 at the same call (`free` leaves it to timing):
    `boundary` waits until its failure watch has learnt of rank 1's failure and ignores the launcher's
    SIGTERM, so its main thread stops at its next stage boundary; `sigterm` waits until it has learnt
    of it and then until the launcher ends it (torchrun's SIGTERM once rank 1 has exited). A loaded
    machine produces either order by chance. With `boundary`, a raising rank 1 also takes
    `_SLOW_SHUTDOWN_S` to shut its interpreter down (as freeing a large model does), so rank 0 ends
    first and the launcher's SIGTERM reaches rank 1 while Python finalises, after its own handlers are gone.
    In both, rank 1 fails only once rank 0 is inside its own call (`_rank0_is_in_its_call`): a rank 0 that
    learnt of the failure before it got there would stop at the stage boundary before it, whatever `rank0` says.
    """
    _CALLS.append(len(completions))
    if os.environ.get("RANK") == "1" and len(_CALLS) - 1 == at_call:
        if rank0 != "free":
            _wait_for(_rank0_is_in_its_call().exists)
            _rank0_is_in_its_call().unlink(missing_ok=True)  # a later launch's agent may get the same pid
        if how == "exit":
            os._exit(3)
        if how == "hang":
            time.sleep(3600)
        if rank0 == "boundary":
            _SLOW_AT_SHUTDOWN.append(_SlowToFree())
        raise RuntimeError("simulated reward-function failure on rank 1")
    if os.environ.get("RANK") == "0" and len(_CALLS) - 1 == at_call and rank0 != "free":
        if rank0 == "boundary":
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        _rank0_is_in_its_call().touch()
        _wait_until_the_watch_learns_of_a_peer_failure()
        if rank0 == "sigterm":
            time.sleep(_LEARN_TIMEOUT_S)
    return [0.0 for _ in completions]


def _rank0_is_in_its_call() -> Path:
    """A file rank 0 creates on entering its failing-step call; both ranks of one launch name it alike.

    The ranks' parent is their torchrun agent, one per launch, so its pid keys the file.
    """
    return Path(tempfile.gettempdir()) / f"dist_failing_plugins-{os.getppid()}-rank0-in-call"


def _wait_for(condition) -> None:
    """Poll `condition` until it holds or `_LEARN_TIMEOUT_S` has passed (a bound, not an expected wait)."""
    deadline = time.monotonic() + _LEARN_TIMEOUT_S
    while time.monotonic() < deadline and not condition():
        time.sleep(0.01)


def _wait_until_the_watch_learns_of_a_peer_failure() -> None:
    from areal_adv.trainer.parallel import failures

    def learnt() -> bool:
        watch = failures._ACTIVE
        return watch is not None and watch.peer_report is not None

    _wait_for(learnt)


def reward_dying_once_on_rank1(
    prompts, completions, *, at_call: int = 1, marker: str, after: str | None = None, **columns
):
    """A reward function that ends rank 1 with os._exit(3) at its `at_call`-th call, once per `marker` file.

    The first death creates `marker`; a restarted worker (torchrun `--max-restarts`) then scores as usual and
    can finish. A file rather than `TORCHELASTIC_RESTART_COUNT`: an agent whose workers restart because
    another node rejoined keeps its count, so the count says nothing about whether rank 1 died already.
    `after` names a file to wait for (at most 120 s) before dying: rank 0 publishes a checkpoint after the
    ranks' shards are written, while rank 1 goes on, so waiting for its manifest fixes the step resumed from.
    """
    _CALLS.append(len(completions))
    if os.environ.get("RANK") == "1" and len(_CALLS) - 1 == at_call and not Path(marker).exists():
        deadline = time.monotonic() + 120.0
        while after is not None and not Path(after).exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        Path(marker).touch()
        os._exit(3)
    return [0.0 for _ in completions]
