"""empty_cpu: a writable CPU tensor of the requested shape and dtype, backed by numpy memory."""

from __future__ import annotations

import pytest
import torch

from areal_adv.utils.buffers import empty_cpu


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.bool])
def test_empty_cpu_shape_dtype_and_writes(dtype):
    t = empty_cpu((3, 5), dtype)
    assert t.shape == (3, 5) and t.dtype == dtype and t.device.type == "cpu" and t.is_contiguous()
    t.fill_(1)
    assert bool((t == 1).all())
    assert torch.equal(t.clone(), t)
