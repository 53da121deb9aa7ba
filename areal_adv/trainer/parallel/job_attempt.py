"""An id for this start of the job that every rank agrees on, so no rank reads an earlier start's store keys.

torchrun's agent hosts the TCP store that the workers reach at `MASTER_ADDR:MASTER_PORT`
(`TORCHELASTIC_USE_AGENT_STORE=True`, the default with the c10d and static rendezvous), and in torch 2.13
that store outlives the workers: after `--max-restarts` restarts them it still holds every key of the
attempt that failed. `init_process_group(init_method="env://")` puts its keys in it without an attempt
prefix (torch's comment says every retry gets a new store, which the shared store is not), so a restarted
rank can read a dead peer's gloo address and fail with "Connection refused" in `connectFullMesh`, or wait
on a key nobody writes (pytorch/pytorch#135712 is the same fault with nccl). `TORCHELASTIC_RESTART_COUNT`
does not tell attempts apart either: it counts one agent's restarts, and an agent whose workers restart
because another node's worker failed (a membership change) does not count it, so two nodes' counts differ.

`agree_on_attempt` makes a fresh id instead, through the store itself: rank 0 draws a random id and
publishes it; every other rank draws a random nonce, answers the id it reads with its nonce and waits
until rank 0 welcomes that nonce with the id. An id read from an earlier attempt gets no welcome (its rank 0
is gone, and the key is made only by the rank 0 that drew the id), so such a rank reads the id again until
the live rank 0 has published its own. The process group's keys and the failure protocol's
(`areal_adv.trainer.parallel.failures`) then live under the id.
"""

from __future__ import annotations

import secrets
import time
from typing import Any

__all__ = ["ATTEMPT_KEYS", "agree_on_attempt"]

#: Where the agreement's own keys live in the store.
ATTEMPT_KEYS = "areal_adv/attempt"


def _wait(store: Any, key: str, deadline: float, poll_s: float) -> bool:
    """True once `key` exists, False at `deadline` (polled: a store's own wait raises on its timeout)."""
    while not store.check([key]):
        if time.monotonic() >= deadline:
            return False
        time.sleep(poll_s)
    return True


def _timeout(rank: int, what: str, timeout_s: float) -> RuntimeError:
    return RuntimeError(
        f"rank {rank}: no agreement on the job attempt within {timeout_s:g} s ({what}); a rank did not start, "
        "or could not reach the rendezvous store at MASTER_ADDR:MASTER_PORT"
    )


def agree_on_attempt(store: Any, rank: int, world_size: int, *, timeout_s: float, poll_s: float = 0.02) -> str:
    """The id of this job attempt, the same on every rank (see the module docstring); a collective.

    `store` is a `torch.distributed.Store` that every rank of the attempt reaches and that may hold keys
    of earlier attempts. Raises RuntimeError naming what was missing after `timeout_s`.
    """
    deadline = time.monotonic() + timeout_s
    current = f"{ATTEMPT_KEYS}/current"
    if rank == 0:
        attempt = secrets.token_hex(8)
        store.set(current, attempt)
        for peer in range(1, world_size):
            join = f"{ATTEMPT_KEYS}/{attempt}/join/{peer}"
            if not _wait(store, join, deadline, poll_s):
                raise _timeout(rank, f"rank {peer} did not answer", timeout_s)
            nonce = store.get(join).decode()
            store.set(f"{ATTEMPT_KEYS}/welcome/{nonce}", attempt)
        return attempt
    nonce = secrets.token_hex(8)
    welcome = f"{ATTEMPT_KEYS}/welcome/{nonce}"
    answered = None
    while True:
        if not _wait(store, current, deadline, poll_s):
            raise _timeout(rank, "rank 0 published no id", timeout_s)
        read = store.get(current).decode()
        if read != answered:  # a new id (the first, or the live rank 0's after an earlier attempt's)
            store.set(f"{ATTEMPT_KEYS}/{read}/join/{rank}", nonce)
            answered = read
        if store.check([welcome]):
            return store.get(welcome).decode()
        if time.monotonic() >= deadline:
            raise _timeout(rank, f"rank 0 did not welcome this rank into attempt {answered}", timeout_s)
        time.sleep(poll_s)
