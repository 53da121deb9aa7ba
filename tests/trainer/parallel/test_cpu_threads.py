"""Threads per process: one for a tiny model, else the usable cores divided by the ranks on this machine.

Also: OpenMP waits passively in every entry point (set before torch loads), and a note when
other processes occupy the cores at start.
"""

from __future__ import annotations

import pytest
import torch

from areal_adv.trainer.parallel.cpu_threads import (
    SMALL_MODEL_PARAMS,
    CpuSample,
    apply_num_threads,
    busy_cores_of_others,
    busy_note,
    cpu_sample,
    default_num_threads,
    local_world_size,
    usable_cores,
)
from areal_adv.trainer.parallel.launch_env import prefer_passive_waiting


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

    code = (
        "import torch; from areal_adv.trainer.parallel.cpu_threads import apply_num_threads; "
        "torch.get_num_threads(); apply_num_threads(1); print(torch.get_num_threads())"
    )  # torch in use first
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split()[-1] == "1"


@pytest.mark.parametrize(
    "cores,ranks,params,expected",
    [
        (2, 1, 84_000, 1),
        (16, 1, SMALL_MODEL_PARAMS - 1, 1),  # too small to gain from a second thread
        (2, 1, SMALL_MODEL_PARAMS, 2),
        (16, 3, 135_000_000, 5),
        (2, 2, 135_000_000, 1),
        (4, 1, None, 4),
    ],
)
def test_a_small_model_gets_one_thread_a_larger_one_the_cores_per_rank(cores, ranks, params, expected) -> None:
    assert default_num_threads(cores, ranks, n_params=params) == expected


def test_the_trainer_picks_by_the_policy_size_and_train_num_threads_still_wins(tmp_path) -> None:
    from areal_adv.api.cli_args import load_config
    from areal_adv.trainer.run.loop import Trainer

    before = torch.get_num_threads()
    tiny = ["model.hidden_size=32", "model.num_heads=2", "model.intermediate_size=64", f"output.dir={tmp_path}"]
    try:
        assert Trainer(load_config(None, tiny)).num_threads == 1 == torch.get_num_threads()
        assert Trainer(load_config(None, [*tiny, "train.num_threads=2", "trial_name=b"])).num_threads == 2
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_passive_waiting_is_set_unless_the_user_chose() -> None:
    env: dict[str, str] = {}
    assert prefer_passive_waiting(env) and env == {"OMP_WAIT_POLICY": "PASSIVE"}
    for mine in ({"OMP_WAIT_POLICY": "ACTIVE"}, {"GOMP_SPINCOUNT": "1000"}):
        env = dict(mine)
        assert not prefer_passive_waiting(env) and env == mine


@pytest.mark.parametrize("entry", ["areal_adv.trainer.main", "areal_adv.cli"])
def test_the_entry_point_sets_it_before_torch_loads(entry: str) -> None:
    """libgomp reads OMP_WAIT_POLICY once, when torch's library loads: too late after `import torch`.

    `areal_adv.cli` is the `areal-adv` console script (`validate --dry-run` computes too).
    """
    import os
    import subprocess
    import sys

    code = (
        "import sys, areal_adv.trainer.parallel.launch_env as le; real = le.prefer_passive_waiting\n"
        "def spy(*a):\n    print('torch already loaded:', 'torch' in sys.modules); return real(*a)\n"
        "le.prefer_passive_waiting = spy\n"
        f"import {entry}, os; print(os.environ.get('OMP_WAIT_POLICY'))"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.splitlines() == ["torch already loaded: False", "PASSIVE"]


def _sample(busy: float, total: float, own: float) -> CpuSample:
    return CpuSample(busy=busy, total=total, own=own)


def test_busy_cores_of_others_subtracts_this_job(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    # 1 s of wall time on 2 CPUs: 1.9 CPU-s busy, 0.5 of them this process's
    assert busy_cores_of_others(_sample(0, 0, 0), _sample(1.9, 2.0, 0.5)) == pytest.approx(1.4)
    # two local ranks doing the same: 1.0 of the busy time is this job's
    assert busy_cores_of_others(_sample(0, 0, 0), _sample(1.9, 2.0, 0.5), local_ranks=2) == pytest.approx(0.9)
    assert busy_cores_of_others(None, _sample(1, 2, 0)) is None
    assert busy_cores_of_others(_sample(0, 0, 0), _sample(0.05, 0.06, 0)) is None  # too short to tell


def test_the_note_is_one_line_only_when_half_the_cores_are_taken() -> None:
    assert busy_note(None, 1, cores=2) is None and busy_note(0.9, 1, cores=2) is None
    note = busy_note(1.8, 1, cores=2)
    assert note is not None and "\n" not in note
    assert note.startswith("[areal-adv] note: other processes kept 1.8 of") and "1 intra-op thread " in note


def test_cpu_sample_reads_proc_stat(tmp_path) -> None:
    stat = tmp_path / "stat"
    stat.write_text("cpu  100 0 50 800 50 0 0 0 0 0\ncpu0 1 2 3\n")
    sample = cpu_sample(str(stat))
    import os

    hz = os.sysconf("SC_CLK_TCK")
    assert sample is not None and sample.busy == pytest.approx(150 / hz) and sample.total == pytest.approx(1000 / hz)
    assert cpu_sample(str(tmp_path / "missing")) is None
