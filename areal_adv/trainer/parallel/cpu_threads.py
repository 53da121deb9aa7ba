"""CPU threads per process: one for a model too small to gain from more, else the cores divided by the ranks.

torch sizes its intra-op pool for the whole machine in every process, so N
ranks under torchrun on C cores run N*C busy threads and spend their time
preempting each other (the 2-rank CPU job was 13x slower than one process).
torchrun exports LOCAL_WORLD_SIZE (ranks on this node); the cores this process
may use come from its CPU affinity mask, which respects taskset and cgroup
cpusets. numba's parallel kernels get the same cap.

A small model gains nothing from a second thread: its matmuls are too small to
split, and every parallel region costs a wake-up of the pool, which on a machine
other processes keep busy means waiting for a time slice. Below
`SMALL_MODEL_PARAMS` parameters the default is therefore one thread
(measurement: docs/performance.md, "Threads"). The count never depends on the
machine's load: a reduction split over another number of threads may round
differently, and a resumed run must take the same steps as an uninterrupted one.
The load is only reported (`busy_note`).
"""

from __future__ import annotations

import os
import resource
from collections.abc import Mapping
from dataclasses import dataclass

import torch

#: Policies with fewer parameters run with one intra-op thread by default (docs/performance.md, "Threads").
SMALL_MODEL_PARAMS = 250_000


def usable_cores() -> int:
    """CPUs this process may run on (its affinity mask), falling back to the machine's count."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def local_world_size(env: Mapping[str, str] | None = None) -> int:
    """Processes of this job on this machine: torchrun's LOCAL_WORLD_SIZE, 1 without torchrun."""
    env = os.environ if env is None else env
    raw = env.get("LOCAL_WORLD_SIZE", "1")
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"environment variable LOCAL_WORLD_SIZE={raw!r}, expected an integer >= 1") from None
    if value < 1:
        raise ValueError(f"environment variable LOCAL_WORLD_SIZE={value}, expected an integer >= 1")
    return value


def default_num_threads(cores: int | None = None, local_ranks: int | None = None, n_params: int | None = None) -> int:
    """1 for a model of fewer than `SMALL_MODEL_PARAMS` parameters, else `cores // local_ranks` (at least 1).

    `n_params=None` (size unknown) takes the cores rule.
    """
    if n_params is not None and n_params < SMALL_MODEL_PARAMS:
        return 1
    cores = usable_cores() if cores is None else cores
    local_ranks = local_world_size() if local_ranks is None else local_ranks
    return max(1, cores // local_ranks)


def apply_num_threads(configured: int | None, n_params: int | None = None) -> int:
    """Set torch's (and numba's) thread count: `train.num_threads`, or the default for the model when null."""
    n = default_num_threads(n_params=n_params) if configured is None else configured
    try:  # numba first: its first set_num_threads starts its OpenMP pool, which resets torch's count
        import numba

        numba.set_num_threads(min(n, numba.config.NUMBA_NUM_THREADS))
    except ImportError:  # numba is a core dependency; tolerate a trimmed environment
        pass
    torch.set_num_threads(n)
    return n


@dataclass(frozen=True)
class CpuSample:
    """The machine's busy and total CPU time (/proc/stat, seconds over all CPUs) and this process's own."""

    busy: float
    total: float
    own: float


def cpu_sample(stat_path: str = "/proc/stat") -> CpuSample | None:
    """A snapshot for `busy_cores_of_others`; None where /proc/stat does not exist (not Linux)."""
    try:
        with open(stat_path, encoding="ascii") as fh:
            fields = fh.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu":
        return None
    ticks = [int(x) for x in fields[1:9]]  # user nice system idle iowait irq softirq steal
    hz = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    usage = resource.getrusage(resource.RUSAGE_SELF)
    idle = ticks[3] + ticks[4]
    return CpuSample(busy=(sum(ticks) - idle) / hz, total=sum(ticks) / hz, own=usage.ru_utime + usage.ru_stime)


def busy_cores_of_others(before: CpuSample | None, after: CpuSample | None, local_ranks: int = 1) -> float | None:
    """Cores other processes kept busy between two samples: the machine's busy time less this job's.

    Measured over the trainer's own start-up, so it costs no waiting; this job's
    other local ranks are assumed to do what this one did. None when unknown
    (no /proc/stat, or too short a window to tell).
    """
    if before is None or after is None:
        return None
    cpus = os.cpu_count() or 1
    wall = (after.total - before.total) / cpus
    if wall <= 0.05:
        return None
    others = (after.busy - before.busy) - local_ranks * (after.own - before.own)
    return max(0.0, others / wall)


def busy_note(others: float | None, threads: int, cores: int | None = None) -> str | None:
    """One line when other processes occupied at least half of the usable cores at start, else None."""
    cores = usable_cores() if cores is None else cores
    if others is None or others < 0.5 * cores:
        return None
    return (
        f"[areal-adv] note: other processes kept {others:.1f} of this machine's {os.cpu_count() or cores} cores busy "
        f"while this run started ({cores} usable here); it trains with {threads} intra-op "
        f"thread{'s' if threads != 1 else ''} (train.num_threads) and will be slower than on a quiet machine"
    )
