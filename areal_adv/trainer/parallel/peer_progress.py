"""Which peer a failed collective waited for: every rank's progress stamp in the rendezvous store.

When a rank dies hard (`os._exit`, a kill, a crash) or hangs, it reports nothing;
its peers' next collective fails with gloo's "Connection closed by peer" or
"Timed out waiting ...", which names no rank, and the rank that sees it is not
the one at fault. So every rank's failure watcher keeps a stamp in the store,
`<prefix>/stamp/<rank>/stage`, the stage path its main thread is in (written
by `failures.stage` on entry and exit), and `<prefix>/stamp/<rank>/beat`, a
counter its watcher thread advances on every poll. A rank whose collective failed
reads the stamps: the peers that are not in its own stage (or have no stamp)
are the ones it waited for; among peers in the same stage, one whose beat no
longer moves is gone. torch keeps no such record (the nccl flight recorder
names collectives, not ranks' stages, and gloo has none), hence this module.

Pure functions of the stamps and the exception; the store access lives in
`areal_adv.trainer.parallel.failures.FailureWatch`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

__all__ = ["GONE", "SILENT", "Stamp", "collective_failure", "peer_error", "stalled", "suspects"]

GONE, SILENT = "gone", "silent"
# the words gloo and nccl use when a peer's process has ended, or when a peer never came
_GONE_WORDS = (
    "Connection closed by peer",
    "Connection reset by peer",
    "Broken pipe",
    "Connection refused",
    "remote process exited",
)
# evidence, besides the raising frame, that an exception came from a collective (not, say, from a reward
# function's own HTTP timeout)
_BACKEND_WORDS = (
    "third_party/gloo",
    "ProcessGroupGloo",
    "ProcessGroupNCCL",
    "NCCL",
    "Application timeout caused pair closure",
)


@dataclass(frozen=True)
class Stamp:
    """One rank's last published progress: the stage path it is in (None: never stamped), its watcher's beat."""

    stage: str | None
    beat: int


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or (None if current.__suppress_context__ else current.__context__)


def _from_collective(exc: BaseException) -> bool:
    from areal_adv.utils.call_agreement import raised_by_collective  # torch, only once something failed

    if raised_by_collective(exc):
        return True
    return isinstance(exc, RuntimeError) and any(word in str(exc) for word in _BACKEND_WORDS)


def collective_failure(exc: BaseException) -> str | None:
    """`GONE` or `SILENT` when `exc` (or one it wraps) is a collective a peer left unfinished, else None.

    `SILENT` also stands for "cannot tell": the beats decide (see `FailureWatch`).
    """
    for item in _chain(exc):
        if not _from_collective(item):
            continue
        text = str(item)
        return GONE if any(word in text for word in _GONE_WORDS) else SILENT
    return None


def suspects(stamps: Mapping[int, Stamp], mine: str, rank: int) -> list[int]:
    """The peers this rank waited for: those never stamped, or stamped in another stage than `mine`."""
    return [r for r, stamp in sorted(stamps.items()) if r != rank and stamp.stage != mine]


def stalled(before: Mapping[int, Stamp], after: Mapping[int, Stamp], rank: int) -> list[int]:
    """Peers whose beat did not move between two readings (their watcher, hence their process, is gone)."""
    return [r for r in sorted(before) if r != rank and (r not in after or after[r].beat == before[r].beat)]


def peer_error(kind: str, rank: int, mine: str) -> str:
    """The report's `error` for a peer that `rank` found gone or silent while waiting in stage `mine`."""
    where = mine or "the trainer"
    if kind == GONE:
        return (
            f"its process ended without reporting an error (a hard exit, a kill or a crash; torchrun's summary "
            f"has its exit code); rank {rank} found it gone when its collective in {where} failed"
        )
    return (
        f"it stopped responding: its process was still running but did not reach the collective that rank "
        f"{rank} waited in ({where}) within the process-group timeout (train.dist_timeout_s)"
    )
