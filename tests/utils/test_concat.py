"""concat_batch: padding, metadata and input validation."""

from __future__ import annotations

import copy

import pytest
import torch

from areal_adv.utils.data import RolloutGroup, concat_batch


def _traj(rows: int, seqlen: int, *, start: int = 1, reward: float = 1.0, **extra):
    """One prompt's trajectory group with distinct, recognisable values."""
    ids = torch.arange(start, start + rows * seqlen, dtype=torch.long).view(rows, seqlen)
    traj = {
        "input_ids": ids,
        "attention_mask": torch.ones(rows, seqlen, dtype=torch.bool),
        "loss_mask": torch.ones(rows, seqlen, dtype=torch.int32),
        "logprobs": -torch.rand(rows, seqlen),
        "turn_ids": torch.zeros(rows, seqlen, dtype=torch.long),
        "rewards": torch.full((rows,), reward),
    }
    traj.update(extra)
    return traj


def _snapshot(trajs):
    return [{k: (v.clone() if isinstance(v, torch.Tensor) else copy.copy(v)) for k, v in t.items()} for t in trajs]


def _assert_unchanged(trajs, snapshot):
    for t, s in zip(trajs, snapshot):
        assert t.keys() == s.keys()
        for k in t:
            if isinstance(t[k], torch.Tensor) and t[k].device.type == "meta":
                assert s[k].device.type == "meta" and t[k].shape == s[k].shape, k
            elif isinstance(t[k], torch.Tensor):
                assert torch.equal(t[k], s[k]), k
            else:
                assert t[k] == s[k], k


def test_concat_pads_2d_concats_1d_and_builds_meta():
    group = RolloutGroup((1, 1), [0.25, 0.75])
    trajs = [
        _traj(2, 3, start=1, reward=1.0, rollout_group=group),
        _traj(1, 5, start=100, reward=2.0),
        _traj(3, 2, start=200, reward=3.0, rollout_group=None),
    ]
    snapshot = _snapshot(trajs)
    batch, meta = concat_batch(trajs)
    _assert_unchanged(trajs, snapshot)

    assert "rollout_group" not in batch
    assert list(batch) == ["input_ids", "attention_mask", "loss_mask", "logprobs", "turn_ids", "rewards"]
    assert batch["input_ids"].shape == (6, 5)
    assert batch["input_ids"].tolist() == [
        [1, 2, 3, 0, 0],
        [4, 5, 6, 0, 0],
        [100, 101, 102, 103, 104],
        [200, 201, 0, 0, 0],
        [202, 203, 0, 0, 0],
        [204, 205, 0, 0, 0],
    ]
    assert batch["attention_mask"].dtype == torch.bool
    assert batch["attention_mask"].sum(1).tolist() == [3, 3, 5, 2, 2, 2]
    assert batch["loss_mask"].dtype == torch.int32
    assert batch["turn_ids"].tolist() == [
        [0, 0, 0, -1, -1],
        [0, 0, 0, -1, -1],
        [0, 0, 0, 0, 0],
        [0, 0, -1, -1, -1],
        [0, 0, -1, -1, -1],
        [0, 0, -1, -1, -1],
    ]
    assert torch.equal(batch["logprobs"][0, :3], trajs[0]["logprobs"][0])
    assert batch["logprobs"][0, 3:].tolist() == [0.0, 0.0]
    assert batch["rewards"].tolist() == [1.0, 1.0, 2.0, 3.0, 3.0, 3.0]

    assert meta.n_trajs == 3
    assert meta.traj_group_sizes == (2, 1, 3)
    assert meta.traj_seqlens == (3, 5, 2)
    assert meta.rollout_groups == (group, None, None)
    assert meta.logical_group_sizes == (2, 1, 3)
    meta.validate(batch["input_ids"].shape[0])


def test_concat_pads_to_min_positions_when_longer_than_every_group():
    trajs = [_traj(2, 3, start=1), _traj(1, 2, start=100, rewards=torch.ones(1, 2))]
    trajs[0]["rewards"] = torch.ones(2, 2)  # an [rows, K] rewards matrix is never padded
    batch, meta = concat_batch(trajs, min_positions=6)
    assert batch["input_ids"].tolist() == [[1, 2, 3, 0, 0, 0], [4, 5, 6, 0, 0, 0], [100, 101, 0, 0, 0, 0]]
    assert batch["turn_ids"].tolist() == [[0, 0, 0, -1, -1, -1]] * 2 + [[0, 0, -1, -1, -1, -1]]
    assert batch["rewards"].shape == (3, 2)
    assert meta.traj_seqlens == (3, 2)  # each group's own length, as without min_positions
    shorter, _ = concat_batch(trajs, min_positions=2)  # shorter than the longest group: no effect
    assert shorter["input_ids"].shape == (3, 3)


def test_concat_outputs_never_alias_inputs():
    trajs = [_traj(2, 4)]
    batch, meta = concat_batch(trajs)
    assert meta.rollout_groups is None
    for key, value in batch.items():
        assert value.data_ptr() != trajs[0][key].data_ptr(), key
    batch["input_ids"][0, 0] = -5
    assert trajs[0]["input_ids"][0, 0] == 1


def test_concat_split_rollouts_logical_sizes():
    trajs = [
        _traj(3, 4, rollout_group=RolloutGroup((2, 1))),
        _traj(4, 4, rollout_group=RolloutGroup((4,))),
    ]
    _, meta = concat_batch(trajs)
    assert meta.logical_group_sizes == (2, 1)
    assert meta.logical_row_index().tolist() == [0, 0, 1, 2, 2, 2, 2]


def _bad(i: int, **changes):
    """Two valid trajectories with trajectory i's entries changed (None deletes a key)."""
    trajs = [_traj(2, 3), _traj(1, 4)]
    for key, value in changes.items():
        if value is None:
            del trajs[i][key]
        else:
            trajs[i][key] = value
    return trajs


@pytest.mark.parametrize(
    "trajs, needles",
    [
        ([], ["non-empty"]),
        ({"input_ids": torch.ones(1, 1)}, ["non-empty sequence"]),
        ([_traj(1, 2), "nope"], ["trajectory 1", "mapping"]),
        (_bad(1, input_ids=None), ["trajectory 1", "'input_ids'"]),
        (_bad(0, attention_mask=None), ["trajectory 0", "'attention_mask'"]),
        (_bad(1, logprobs=None), ["trajectory 1", "missing ['logprobs']"]),
        (_bad(1, values=torch.zeros(1, 4)), ["trajectory 1", "unexpected ['values']"]),
        (_bad(0, rewards=torch.zeros(3)), ["trajectory 0", "'rewards'", "3 rows", "expected 2"]),
        (_bad(0, loss_mask=torch.ones(2, 4, dtype=torch.int32)), ["trajectory 0", "'loss_mask'", "T=3"]),
        (_bad(1, logprobs=torch.zeros(1, 4, dtype=torch.float64)), ["trajectory 1", "'logprobs'", "dtype"]),
        (_bad(1, rewards=torch.zeros(1, 4)), ["trajectory 1", "'rewards'", "2-D", "1-D"]),
        (_bad(0, turn_ids=torch.zeros(2, 3, 1, dtype=torch.long)), ["trajectory 0", "'turn_ids'", "[rows, T]"]),
        (_bad(0, rewards=torch.tensor(1.0)), ["trajectory 0", "'rewards'"]),
        (_bad(1, rewards=[1.0]), ["trajectory 1", "'rewards'", "torch.Tensor"]),
        (_bad(0, input_ids=torch.ones(2, dtype=torch.long)), ["trajectory 0", "'input_ids'", "[rows, T]"]),
        (_bad(0, rollout_group=RolloutGroup((1, 2))), ["trajectory 0", "'rollout_group'", "sum to 3", "2 rows"]),
        (_bad(1, rollout_group=(1,)), ["trajectory 1", "'rollout_group'", "RolloutGroup"]),
        (_bad(1, input_ids=torch.ones(1, 4, dtype=torch.long, device="meta")), ["trajectory 1", "'input_ids'", "meta"]),
        ([_traj(0, 3)], ["trajectory 0", "'input_ids'", "at least one row"]),
    ],
)
def test_concat_rejects_malformed(trajs, needles):
    snapshot = _snapshot(trajs) if isinstance(trajs, list) and all(isinstance(t, dict) for t in trajs) else None
    with pytest.raises(ValueError) as info:
        concat_batch(trajs)
    message = str(info.value)
    for needle in needles:
        assert needle in message, (needle, message)
    if snapshot is not None:
        _assert_unchanged(trajs, snapshot)
