"""Global random states put back after work that must not move a run's random streams.

The kernel warm-up before step 0 and the shadow estimators of the diagnostics run code a
run does not otherwise run (stages on synthetic batches, other estimators' pipelines);
a stage may draw from torch's, numpy's or Python's global generator. Restoring all of
them after such work keeps the run's own draws, and so its results, those of a run
without it.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator

import numpy as np
import torch

__all__ = ["preserved_random_states"]


@contextlib.contextmanager
def preserved_random_states(device: torch.device) -> Iterator[None]:
    """Restore torch's CPU (and `device`'s CUDA), numpy's and Python's global random states on exit."""
    cpu, numpy_state, python = torch.get_rng_state(), np.random.get_state(), random.getstate()
    cuda = torch.cuda.get_rng_state(device) if device.type == "cuda" else None
    try:
        yield
    finally:
        torch.set_rng_state(cpu)
        np.random.set_state(numpy_state)
        random.setstate(python)
        if cuda is not None:
            torch.cuda.set_rng_state(cuda, device)
