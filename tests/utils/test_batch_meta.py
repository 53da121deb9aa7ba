"""RolloutGroup and TrajBatchMeta: layout, derived indices and input validation."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from areal_adv.utils.data import RolloutGroup, TrajBatchMeta

# ---------------------------------------------------------------------------
# RolloutGroup
# ---------------------------------------------------------------------------


def test_rollout_group_converts_lists_and_indexes_rows():
    group = RolloutGroup([2, 1, 3], [0.5, 1, -2])
    assert group.row_counts == (2, 1, 3)
    assert group.n_rows == 6 and group.n_logical == 3
    assert group.rewards.dtype == torch.float64
    assert group.rewards.tolist() == [0.5, 1.0, -2.0]
    assert group.row_to_rollout().tolist() == [0, 0, 1, 2, 2, 2]
    assert group.row_to_rollout().dtype == torch.long


def test_rollout_group_keeps_float_tensor_dtype_and_copies():
    rewards = torch.tensor([1.0, 2.0], dtype=torch.float32)
    group = RolloutGroup((1, 1), rewards)
    assert group.rewards.dtype == torch.float32
    rewards[0] = 99.0  # the caller's later edit does not reach the metadata
    assert group.rewards.tolist() == [1.0, 2.0]
    assert RolloutGroup((1, 1), torch.tensor([1, 2])).rewards.dtype == torch.float64
    assert RolloutGroup((1, 1), [1.0, 2.0]) == RolloutGroup([1, 1], [1.0, 2.0])
    assert RolloutGroup((1, 1)) != RolloutGroup((1, 1), [1.0, 2.0])


def test_rollout_group_is_frozen():
    group = RolloutGroup((1,))
    with pytest.raises(dataclasses.FrozenInstanceError):
        group.row_counts = (2,)  # type: ignore[misc]


@pytest.mark.parametrize(
    "row_counts, rewards, field, detail",
    [
        ((), None, "RolloutGroup.row_counts", "empty"),
        ((1, 0), None, "RolloutGroup.row_counts[1]", ">= 1"),
        ((1, -2), None, "RolloutGroup.row_counts[1]", "got -2"),
        ((1, 1.5), None, "RolloutGroup.row_counts[1]", "integer"),
        ((True, 1), None, "RolloutGroup.row_counts[0]", "integer"),
        ("12", None, "RolloutGroup.row_counts", "sequence of integers"),
        ((1, 1), [1.0], "RolloutGroup.rewards", "expected (2,)"),
        ((1, 1), [[1.0, 2.0]], "RolloutGroup.rewards", "shape"),
        ((1, 1), [1.0, float("nan")], "RolloutGroup.rewards[1]", "finite"),
        ((1, 1), torch.tensor([float("inf"), 0.0]), "RolloutGroup.rewards[0]", "finite"),
        ((1, 1), torch.tensor([True, False]), "RolloutGroup.rewards", "float"),
        ((1, 1), ["a", "b"], "RolloutGroup.rewards", "expected"),
        ((1, 1), torch.zeros(2, device="meta"), "RolloutGroup.rewards", "on device meta"),
        ((1, 1), torch.zeros(2, device="meta", dtype=torch.long), "RolloutGroup.rewards", "on device meta"),
    ],
)
def test_rollout_group_rejects_malformed(row_counts, rewards, field, detail):
    with pytest.raises(ValueError) as info:
        RolloutGroup(row_counts, rewards)
    assert field in str(info.value)
    assert detail in str(info.value)


# ---------------------------------------------------------------------------
# TrajBatchMeta
# ---------------------------------------------------------------------------


def test_meta_from_group_sizes():
    meta = TrajBatchMeta.from_group_sizes([2, 3, 1])
    assert meta.n_trajs == 3 and meta.traj_group_sizes == (2, 3, 1)
    assert meta.rollout_groups is None and meta.traj_seqlens == ()
    assert meta.logical_group_sizes == (2, 3, 1)
    assert meta.n_rows == 6 and meta.n_logical == 6
    assert meta.row_group_index().tolist() == [0, 0, 1, 1, 1, 2]
    assert meta.logical_row_index().tolist() == [0, 1, 2, 3, 4, 5]
    assert meta.logical_group_index().tolist() == [0, 0, 1, 1, 1, 2]
    assert meta.reference_rewards() is None
    meta.validate(6)


def test_meta_with_split_rollouts():
    meta = TrajBatchMeta(
        n_trajs=3,
        traj_group_sizes=[3, 2, 4],
        traj_seqlens=[5, 7, 4],
        rollout_groups=[RolloutGroup([2, 1]), None, RolloutGroup([1, 3])],
    )
    assert meta.traj_group_sizes == (3, 2, 4) and meta.traj_seqlens == (5, 7, 4)
    assert meta.logical_group_sizes == (2, 2, 2)
    assert meta.n_rows == 9 and meta.n_logical == 6
    assert meta.row_group_index().tolist() == [0, 0, 0, 1, 1, 2, 2, 2, 2]
    assert meta.logical_row_index().tolist() == [0, 0, 1, 2, 3, 4, 5, 5, 5]
    assert meta.logical_group_index().tolist() == [0, 0, 1, 1, 2, 2]
    assert meta.reference_rewards() is None
    meta.validate(9, field_prefix="batch.meta")


def test_meta_all_none_rollout_groups_collapse_to_none():
    meta = TrajBatchMeta(n_trajs=2, traj_group_sizes=(1, 1), rollout_groups=(None, None))
    assert meta.rollout_groups is None


def test_meta_reference_rewards_concatenated():
    meta = TrajBatchMeta(
        n_trajs=2,
        traj_group_sizes=(3, 1),
        rollout_groups=(RolloutGroup((2, 1), [1.0, 2.0]), RolloutGroup((1,), torch.tensor([3.0]))),
    )
    refs = meta.reference_rewards()
    assert refs.dtype == torch.float64 and refs.tolist() == [1.0, 2.0, 3.0]


@pytest.mark.parametrize(
    "groups",
    [
        (RolloutGroup((2, 1), [1.0, 2.0]), RolloutGroup((1,))),
        (RolloutGroup((2, 1), [1.0, 2.0]), None),
    ],
)
def test_meta_reference_rewards_all_or_nothing(groups):
    meta = TrajBatchMeta(n_trajs=2, traj_group_sizes=(3, 1), rollout_groups=groups)
    with pytest.raises(ValueError, match=r"RolloutGroup.rewards.*groups \[1\] do not.*expected every"):
        meta.reference_rewards()


@pytest.mark.parametrize(
    "kwargs, field",
    [
        (dict(n_trajs=0, traj_group_sizes=()), "traj_group_sizes"),
        (dict(n_trajs=2, traj_group_sizes=(1,)), "TrajBatchMeta.traj_group_sizes"),
        (dict(n_trajs=1, traj_group_sizes=(0,)), "TrajBatchMeta.traj_group_sizes[0]"),
        (dict(n_trajs=1, traj_group_sizes=(2.0,)), "TrajBatchMeta.traj_group_sizes[0]"),
        (dict(n_trajs="1", traj_group_sizes=(2,)), "TrajBatchMeta.n_trajs"),
        (dict(n_trajs=2, traj_group_sizes=(1, 1), traj_seqlens=(3,)), "TrajBatchMeta.traj_seqlens"),
        (dict(n_trajs=1, traj_group_sizes=(1,), traj_seqlens=(0,)), "TrajBatchMeta.traj_seqlens[0]"),
        (dict(n_trajs=2, traj_group_sizes=(1, 1), rollout_groups=(None,)), "TrajBatchMeta.rollout_groups"),
        (
            dict(n_trajs=1, traj_group_sizes=(3,), rollout_groups=(RolloutGroup((1, 1)),)),
            "TrajBatchMeta.rollout_groups[0].row_counts",
        ),
        (dict(n_trajs=1, traj_group_sizes=(2,), rollout_groups=((1, 1),)), "TrajBatchMeta.rollout_groups[0]"),
        (dict(n_trajs=1, traj_group_sizes=(2,), rollout_groups=RolloutGroup((2,))), "TrajBatchMeta.rollout_groups"),
    ],
)
def test_meta_rejects_malformed(kwargs, field):
    with pytest.raises(ValueError) as info:
        TrajBatchMeta(**kwargs)
    assert field in str(info.value)


def test_meta_validate_checks_batch_size_with_prefix():
    meta = TrajBatchMeta.from_group_sizes((2, 3))
    expected = r"inputs\.meta\.traj_group_sizes: sizes sum to 5 rows, expected the batch size 6"
    with pytest.raises(ValueError, match=expected):
        meta.validate(6, field_prefix="inputs.meta")


def test_meta_validate_catches_bypassed_construction():
    meta = TrajBatchMeta.from_group_sizes((2, 3))
    object.__setattr__(meta, "n_trajs", 3)  # as a misbehaving plugin might
    with pytest.raises(ValueError, match=r"meta\.traj_group_sizes: got 2 sizes, expected n_trajs=3"):
        meta.validate(5)
