"""What the training entry points arrange before torch loads: OpenMP threads that wait passively.

An idle thread of libgomp (the OpenMP runtime of torch's CPU build) spins for a
few milliseconds before it sleeps, so that the next parallel region starts at
once. On a machine whose cores other processes keep busy, the spinning threads
take the time slices the working thread needs: 100 default steps took 133 s
with two busy-loop processes beside them, 9 s with passive waiting
(docs/performance.md, "Threads"). The runtime reads its environment once, when
torch's library loads, so this must run before `import torch`: the first line
of `areal_adv.trainer.main` (hence `python -m areal_adv.trainer[.main]`,
`scripts/train.sh` and every torchrun rank), `areal_adv.cli` (the `areal-adv` console script)
and `tests/conftest.py` call it.
Setting `OMP_WAIT_POLICY` or `GOMP_SPINCOUNT` yourself keeps your choice.

This module imports nothing, so importing it loads no library.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping

#: The OpenMP standard's variable (libgomp, LLVM's libomp and Intel's libiomp5 all read it).
WAIT_POLICY = "OMP_WAIT_POLICY"
#: libgomp's own spin count; set by a user, it is left alone too.
SPIN_COUNT = "GOMP_SPINCOUNT"


def prefer_passive_waiting(environ: MutableMapping[str, str] | None = None) -> bool:
    """Set `OMP_WAIT_POLICY=PASSIVE` unless the user chose a wait policy or spin count; True if it was set."""
    environ = os.environ if environ is None else environ
    if WAIT_POLICY in environ or SPIN_COUNT in environ:
        return False
    environ[WAIT_POLICY] = "PASSIVE"
    return True
