"""CPU threads per process: by default the usable cores divided by the ranks on this machine.

torch sizes its intra-op pool for the whole machine in every process, so N
ranks under torchrun on C cores run N*C busy threads and spend their time
preempting each other (the 2-rank CPU job was 13x slower than one process).
torchrun exports LOCAL_WORLD_SIZE (ranks on this node); the cores this process
may use come from its CPU affinity mask, which respects taskset and cgroup
cpusets. numba's parallel kernels get the same cap.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import torch


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


def default_num_threads(cores: int | None = None, local_ranks: int | None = None) -> int:
    """`cores // local_ranks`, at least 1."""
    cores = usable_cores() if cores is None else cores
    local_ranks = local_world_size() if local_ranks is None else local_ranks
    return max(1, cores // local_ranks)


def apply_num_threads(configured: int | None) -> int:
    """Set torch's (and numba's) thread count: `train.num_threads`, or the default when null."""
    n = default_num_threads() if configured is None else configured
    try:  # numba first: its first set_num_threads starts its OpenMP pool, which resets torch's count
        import numba

        numba.set_num_threads(min(n, numba.config.NUMBA_NUM_THREADS))
    except ImportError:  # numba is a core dependency; tolerate a trimmed environment
        pass
    torch.set_num_threads(n)
    return n
