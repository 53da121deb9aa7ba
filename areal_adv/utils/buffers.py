"""Fresh CPU output tensors that are cheap to write the first time.

Why: a new multi-megabyte tensor is mapped lazily, so its first write pays one
page fault per 4 KiB page. `torch.empty` does not ask for transparent huge
pages; numpy's allocator does (`madvise(MADV_HUGEPAGE)` on large blocks), and
where the kernel honours it (THP `madvise` mode, the common default) the first
write costs a fraction: writing six fresh [256, 8192] float32 outputs took
about 3x less time this way on the development VM (docs/performance.md). The
tensor shares the numpy block and keeps it alive; nothing is copied.
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["empty_cpu"]

_NUMPY = {torch.float32: np.float32, torch.float64: np.float64, torch.int64: np.int64, torch.bool: np.bool_}


def empty_cpu(shape: tuple[int, ...], dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """An uninitialised CPU tensor whose memory comes from numpy's allocator."""
    return torch.from_numpy(np.empty(shape, dtype=_NUMPY[dtype]))
