"""Single-process tests of areal_adv.trainer.parallel.distributed: group dispatch, launch context, metric means."""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.distributed as dist
from dist_cases import make_groups
from hypothesis import given, settings
from hypothesis import strategies as st

from areal_adv.trainer.parallel import distributed as D
from areal_adv.trainer.parallel.distributed import (
    DistContext,
    assign_groups_to_ranks,
    barrier,
    destroy,
    group_token_counts,
    init_distributed,
    reduce_metrics,
    shard_groups,
)
from areal_adv.utils.data import concat_batch

# ---------------------------------------------------------------------------
# assign_groups_to_ranks
# ---------------------------------------------------------------------------


def _loads(counts, assignment):
    return [sum(counts[i] for i in rank) for rank in assignment]


def test_longest_first_example():
    # 9 -> r0, 7 -> r1, 5 -> r1 (7 < 9), 4 -> r0 (9 < 12), 3 -> r0 (13 vs 12 -> r1), ...
    counts = [3, 9, 4, 7, 5]
    assert assign_groups_to_ranks(counts, 2) == [[1, 2], [0, 3, 4]]
    assert _loads(counts, assign_groups_to_ranks(counts, 2)) == [13, 15]


def test_one_big_group_gets_a_rank_of_its_own():
    counts = [10] + [1] * 10
    assert assign_groups_to_ranks(counts, 2) == [[0], list(range(1, 11))]


def test_zero_token_groups_still_reach_every_rank():
    assert assign_groups_to_ranks([0, 0, 0], 3) == [[0], [1], [2]]
    assert assign_groups_to_ranks([5, 0, 0], 3) == [[0], [1], [2]]


def test_single_rank_takes_everything_in_order():
    assert assign_groups_to_ranks([4, 1, 3], 1) == [[0, 1, 2]]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 60), min_size=1, max_size=30), st.integers(1, 6))
def test_whole_groups_balanced_ordered_deterministic(counts, world):
    if len(counts) < world:
        with pytest.raises(ValueError, match="without splitting a group"):
            assign_groups_to_ranks(counts, world)
        return
    assignment = assign_groups_to_ranks(counts, world)
    assert len(assignment) == world
    assert sorted(itertools.chain.from_iterable(assignment)) == list(range(len(counts)))  # a partition
    assert all(rank and rank == sorted(rank) for rank in assignment)  # non-empty, original order
    loads = _loads(counts, assignment)
    assert max(loads) - min(loads) <= max(counts)  # greedy list-scheduling bound
    assert assign_groups_to_ranks(list(counts), world) == assignment  # deterministic


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(1, 40), min_size=2, max_size=8), st.integers(2, 3))
def test_within_four_thirds_of_the_optimum(counts, world):
    if len(counts) < world:
        return
    best = min(
        max(sum(c for c, r in zip(counts, labels) if r == rank) for rank in range(world))
        for labels in itertools.product(range(world), repeat=len(counts))
    )
    assert max(_loads(counts, assign_groups_to_ranks(counts, world))) <= best * 4 / 3 + 1e-9


@pytest.mark.parametrize(
    "counts, world, needle",
    [
        ([1, 2], 3, "2 prompt groups cannot be spread over 3 ranks"),
        ([], 1, "0 prompt groups cannot be spread over 1 ranks"),
        ([1, 2], 0, "world_size: got 0, expected an integer >= 1"),
        ([1, 2], True, "world_size: got True"),
        ([1, 2], 2.0, "world_size: got 2.0"),
        ([1, -2], 1, "group_token_counts[1]: got -2, expected an integer >= 0"),
        ([1, 2.5], 1, "group_token_counts[1]: got 2.5"),
        ("12", 1, "group_token_counts: got str"),
    ],
)
def test_assign_rejects_bad_inputs(counts, world, needle):
    with pytest.raises(ValueError) as info:
        assign_groups_to_ranks(counts, world)
    assert needle in str(info.value)


# ---------------------------------------------------------------------------
# shard_groups
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("split, refs", [(False, False), (True, False), (True, True)])
@pytest.mark.parametrize("world", [1, 2, 3])
def test_shards_are_whole_groups_with_their_own_metadata(world, split, refs):
    groups = make_groups(21, n_groups=7, split=split, explicit_refs=refs)
    counts = group_token_counts(groups)
    assert counts == [int(g["attention_mask"].sum()) for g in groups]
    assignment = assign_groups_to_ranks(counts, world)
    seen = []
    for rank in range(world):
        shard = shard_groups(groups, rank, world)
        assert [id(g) for g in shard] == [id(groups[i]) for i in assignment[rank]]  # the caller's groups, in order
        seen.extend(assignment[rank])
        batch, meta = concat_batch(shard)
        assert meta.n_trajs == len(shard)
        assert meta.traj_group_sizes == tuple(g["input_ids"].shape[0] for g in shard)
        assert batch["input_ids"].shape[0] == sum(meta.traj_group_sizes)
        assert int(batch["attention_mask"].sum()) == sum(counts[i] for i in assignment[rank])
        if split:
            assert meta.rollout_groups == tuple(g["rollout_group"] for g in shard)
        else:
            assert meta.rollout_groups is None
    assert sorted(seen) == list(range(len(groups)))


def test_shard_rejects_bad_inputs():
    groups = make_groups(3, n_groups=2)
    with pytest.raises(ValueError, match=r"rank: got 2, expected an integer in \[0, 2\)"):
        shard_groups(groups, 2, 2)
    with pytest.raises(ValueError, match="rank: got -1"):
        shard_groups(groups, -1, 2)
    with pytest.raises(ValueError, match="group 1 has no 'attention_mask' tensor"):
        shard_groups([groups[0], {"input_ids": groups[1]["input_ids"]}], 0, 2)
    with pytest.raises(ValueError, match="2 prompt groups cannot be spread over 3 ranks"):
        shard_groups(groups, 0, 3)
    with pytest.raises(ValueError, match="expected a sequence of trajectory-group dicts"):
        shard_groups(groups[0], 0, 1)


# ---------------------------------------------------------------------------
# init_distributed / barrier / destroy (no process group is ever started here)
# ---------------------------------------------------------------------------

_DIST_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


@pytest.fixture
def clean_env(monkeypatch):
    for name in _DIST_ENV:
        monkeypatch.delenv(name, raising=False)
    assert not dist.is_initialized()
    yield monkeypatch
    assert not dist.is_initialized()


def test_without_torchrun_is_a_single_process(clean_env):
    ctx = init_distributed()
    assert (ctx.rank, ctx.world_size, ctx.local_rank, ctx.is_main) == (0, 1, 0, True)
    assert ctx.device == (torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu"))
    assert not ctx.is_distributed
    assert init_distributed("gloo").device == torch.device("cpu")
    barrier(ctx)
    destroy(ctx)
    barrier()
    destroy()


@pytest.mark.parametrize(
    "env, backend, needle",
    [
        (dict(WORLD_SIZE="2"), None, "environment variable RANK is not set"),
        (dict(WORLD_SIZE="2", RANK="x"), None, "RANK='x', expected an integer"),
        (dict(WORLD_SIZE="0", RANK="0"), None, "WORLD_SIZE=0, expected an integer >= 1"),
        (dict(WORLD_SIZE="2", RANK="2"), None, "RANK=2 is not below WORLD_SIZE=2"),
        (dict(WORLD_SIZE="2", RANK="1", LOCAL_RANK="-1"), None, "LOCAL_RANK=-1"),
        (dict(WORLD_SIZE="2", RANK="1", MASTER_PORT="1234"), None, "MASTER_ADDR is not set"),
        (dict(WORLD_SIZE="2", RANK="1", MASTER_ADDR="127.0.0.1"), None, "MASTER_PORT is not set"),
        (
            dict(WORLD_SIZE="2", RANK="1", MASTER_ADDR="127.0.0.1", MASTER_PORT="1"),
            "mpi",
            "backend='mpi', expected one of ['gloo', 'nccl']",
        ),
    ],
)
def test_bad_launch_environment(clean_env, env, backend, needle):
    for name, value in env.items():
        clean_env.setenv(name, value)
    with pytest.raises(ValueError) as info:
        init_distributed(backend)
    assert needle in str(info.value)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only error")
def test_nccl_without_cuda_is_a_clear_error(clean_env):
    clean_env.setenv("WORLD_SIZE", "2")
    clean_env.setenv("RANK", "0")
    clean_env.setenv("MASTER_ADDR", "127.0.0.1")
    clean_env.setenv("MASTER_PORT", "1")
    with pytest.raises(ValueError, match="backend='nccl' needs CUDA"):
        init_distributed("nccl")


@pytest.mark.parametrize("timeout", [0, -1.0, float("inf"), "60", True])
def test_bad_timeout(clean_env, timeout):
    with pytest.raises(ValueError, match="timeout="):
        init_distributed(timeout=timeout)


# ---------------------------------------------------------------------------
# reduce_metrics
# ---------------------------------------------------------------------------


def test_single_process_metrics_come_back_as_floats():
    ctx = DistContext()
    out = reduce_metrics({"loss": torch.tensor(0.5).item(), "n": 3}, ctx, weights=10)
    assert out == {"loss": 0.5, "n": 3.0} and all(type(v) is float for v in out.values())
    assert reduce_metrics({}, ctx) == {}


def test_weighted_means_across_reports():
    reports = [
        ({"loss": 1.0, "acc": 0.0}, {"loss": 100.0, "acc": 1.0}),
        ({"loss": 4.0, "only1": 5.0}, {"loss": 300.0, "only1": 2.0}),
        ({"loss": 9.0}, {"loss": 0.0}),  # a rank without tokens does not count
    ]
    out = D._weighted_means(reports)
    assert out == {"loss": pytest.approx((100 + 1200) / 400), "acc": 0.0, "only1": 5.0}
    # all weights zero: plain mean instead of 0/0
    assert D._weighted_means([({"x": 1.0}, {"x": 0.0}), ({"x": 3.0}, {"x": 0.0})]) == {"x": 2.0}


@pytest.mark.parametrize(
    "weights, needle",
    [
        (-1.0, "expected finite numbers >= 0"),
        (float("nan"), "expected finite numbers >= 0"),
        ({"a": 1.0}, "weights lack metrics ['b']"),
    ],
)
def test_reduce_metrics_rejects_bad_weights(weights, needle):
    with pytest.raises(ValueError) as info:
        reduce_metrics({"a": 1.0, "b": 2.0}, DistContext(), weights=weights)
    assert needle in str(info.value)
