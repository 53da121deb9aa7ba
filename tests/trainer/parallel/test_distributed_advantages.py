"""Two gloo ranks on CPU give the same advantages as one process on the whole batch.

The global batch of every case in `dist_cases` is dispatched with
`assign_groups_to_ranks` (whole prompt groups), each rank `concat_batch`-es its
own groups and runs `PPOActor.compute_advantages`; the parent compares every
rank row with the matching row of the 1-process result. Workers run under
torchrun's launcher code (`--standalone`, the ranks forked from a launcher that has
torch imported: tests/trainer/warm_torchrun.py) in one job for all cases.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from dist_cases import CASES, OUT_KEYS
from dist_launch import clean_env, rank_envs, run_bounded, warm_torchrun

from areal_adv.trainer.ppo.actor import PPOActor
from areal_adv.utils.data import concat_batch

HERE = Path(__file__).resolve().parents[1]
ROOT = HERE.parents[1]
WORKER = HERE / "dist_worker.py"
JOB_TIMEOUT_S = 150
TOL = 1e-6
#: one 2-rank job (the `rank_outputs` fixture) for the module: its tests stay on one pytest-xdist worker (`--dist loadgroup`)
pytestmark = pytest.mark.xdist_group("distributed_advantages")

#: Reported in the test output (`pytest -s`): max |2-rank - 1-process| per case.
MAX_ABS_DIFF: dict[str, float] = {}


def _run_merged(cmds, envs, timeout) -> list[tuple[int, str]]:
    """run_bounded with each command's stdout and stderr as one log."""
    return [(code, out + err) for code, out, err in run_bounded(cmds, envs, timeout, warm=True)]


@pytest.fixture(scope="module")
def rank_outputs(tmp_path_factory) -> list[dict]:
    out_dir = tmp_path_factory.mktemp("dist_advantages")
    cmd = warm_torchrun("--standalone", "--nproc_per_node", "2", str(WORKER), "advantages", str(out_dir))
    [(code, log)] = _run_merged([cmd], [clean_env()], JOB_TIMEOUT_S)
    assert code == 0, f"torchrun exited with {code}:\n{log[-4000:]}"
    return [torch.load(out_dir / f"rank{r}.pt") for r in range(2)]


def _row_ranges(sizes: tuple[int, ...], groups: list[int]) -> torch.Tensor:
    starts = [0]
    for size in sizes:
        starts.append(starts[-1] + size)
    return torch.cat([torch.arange(starts[g], starts[g + 1]) for g in groups])


def _max_diff(local: dict[str, torch.Tensor], whole: dict[str, torch.Tensor], rows: torch.Tensor) -> float:
    """Max abs difference over the rank's rows, 2-D fields over the rank's own padded width."""
    worst = 0.0
    assert set(local) == {k for k in OUT_KEYS if whole.get(k) is not None}
    for key, value in local.items():
        expected = whole[key][rows]
        if value.ndim == 2:
            assert value.shape[1] <= expected.shape[1]
            expected = expected[:, : value.shape[1]]
        assert value.shape == expected.shape, key
        if value.dtype == torch.bool or expected.dtype == torch.bool:
            worst = max(worst, 0.0 if torch.equal(value, expected) else float("inf"))
            continue
        worst = max(worst, (value.double() - expected.double()).abs().max().item())
    return worst


@pytest.mark.parametrize("name", list(CASES))
def test_two_ranks_equal_one_process(rank_outputs, name):
    case = CASES[name]
    groups = case.make_groups()
    whole_batch, whole_meta = concat_batch(groups)
    whole = PPOActor(case.make_config()).compute_advantages(whole_batch, whole_meta)
    held = sorted(g for rank in rank_outputs for g in rank[name]["groups"])
    assert held == list(range(len(groups)))  # every group on exactly one rank
    worst = 0.0
    for rank in rank_outputs:
        assert rank[name]["groups"], "every rank holds at least one group"
        rows = _row_ranges(whole_meta.traj_group_sizes, rank[name]["groups"])
        worst = max(worst, _max_diff(rank[name]["out"], whole, rows))
    MAX_ABS_DIFF[name] = worst
    print(f"\n{name}: max |2-rank - 1-process| = {worst:.3g}")
    assert worst <= TOL, f"{name}: 2-rank result differs from 1 process by {worst}"


@pytest.mark.parametrize(
    "name",
    [
        n
        for n, c in CASES.items()
        if any(
            norm is not None and "batch" in (norm.mean_level, norm.std_level)
            for norm in (c.make_config().reward_norm, c.make_config().adv_norm)
        )
    ],
)
def test_batch_statistics_really_crossed_ranks(rank_outputs, name):
    """Guard against a vacuous pass: rank-local batch statistics would give other advantages."""
    case = CASES[name]
    groups = case.make_groups()
    mine = [groups[g] for g in rank_outputs[0][name]["groups"]]
    local = PPOActor(case.make_config()).compute_advantages(*concat_batch(mine))
    gap = (local["advantages"] - rank_outputs[0][name]["out"]["advantages"]).abs().max().item()
    assert gap > 1e-4, f"{name}: rank 0 alone gives the same advantages; the all-reduce was not exercised"


def test_metrics_are_token_weighted_means_over_ranks(rank_outputs):
    tokens = [rank["_metrics"]["tokens"] for rank in rank_outputs]
    expected = (1.0 * tokens[0] + 2.0 * tokens[1]) / sum(tokens)
    for rank in rank_outputs:
        reduced = rank["_metrics"]["reduced"]
        assert reduced["loss"] == pytest.approx(expected, rel=1e-12)
        assert reduced["only_rank0"] == 7.0  # averaged over the ranks that report it


def test_plugin_failing_on_one_rank_stops_both_ranks_with_the_cause():
    """rank 1 cannot import the plugin; rank 0 can, but must not wait forever in its first collective."""
    envs = rank_envs(2)
    cmd = [sys.executable, str(WORKER), "plugin"]
    results = _run_merged([cmd, cmd], envs, timeout=90)
    for rank, (code, log) in enumerate(results):
        assert code != 0, f"rank {rank} exited 0:\n{log}"
        assert "WorkerInitError" in log, log
        assert "actor worker initialisation failed: rank 1:" in log, log
        assert "actor.advantage.outcome_reward_shaping" in log and "'dist_rank_plugin.halve'" in log, log
        assert "simulated missing dependency on rank 1" in log, log
        assert "actor initialised" not in log, log
