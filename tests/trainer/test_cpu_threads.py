"""Threads per process: the usable cores divided by the ranks on this machine."""

from __future__ import annotations

import pytest
import torch

from areal.trainer.cpu_threads import apply_num_threads, default_num_threads, local_world_size, usable_cores


@pytest.mark.parametrize("cores,ranks,expected", [(2, 1, 2), (2, 2, 1), (16, 3, 5), (1, 4, 1), (8, 8, 1)])
def test_cores_are_shared_between_local_ranks(cores: int, ranks: int, expected: int) -> None:
    assert default_num_threads(cores, ranks) == expected


def test_local_world_size_comes_from_torchrun() -> None:
    assert local_world_size({}) == 1
    assert local_world_size({"LOCAL_WORLD_SIZE": "4"}) == 4
    with pytest.raises(ValueError, match="LOCAL_WORLD_SIZE='x', expected an integer"):
        local_world_size({"LOCAL_WORLD_SIZE": "x"})
    with pytest.raises(ValueError, match="LOCAL_WORLD_SIZE=0, expected an integer >= 1"):
        local_world_size({"LOCAL_WORLD_SIZE": "0"})


def test_null_applies_the_default_and_a_number_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    before = torch.get_num_threads()
    try:
        monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
        assert apply_num_threads(None) == max(1, usable_cores() // 2) == torch.get_num_threads()
        monkeypatch.delenv("LOCAL_WORLD_SIZE")
        assert apply_num_threads(None) == usable_cores() == torch.get_num_threads()
        assert apply_num_threads(1) == 1 == torch.get_num_threads()
    finally:
        torch.set_num_threads(before)


def test_a_fresh_process_keeps_torch_at_the_applied_count() -> None:
    """numba's first set_num_threads starts its OpenMP pool, which used to reset torch's count to the pool size."""
    import subprocess
    import sys

    code = ("import torch; from areal.trainer.cpu_threads import apply_num_threads; "
            "torch.get_num_threads(); apply_num_threads(1); print(torch.get_num_threads())")  # torch in use first
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split()[-1] == "1"
