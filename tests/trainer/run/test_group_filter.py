"""`rollout.filter_zero_advantage`: which groups go, what the update then averages over, and the metric.

The kept groups equal DAPO's filter (verl's `filter_groups`: keep a prompt whose
rewards have std > 0) on GRPO batches of groups of >= 2; the loss over the kept
rows is the unfiltered loss scaled by (all tokens / kept tokens), i.e. a token
mean over the kept groups only; the trainer logs how many groups it dropped.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from areal_adv.api.cli_args import load_config
from areal_adv.trainer.ppo.actor import PPOActor
from areal_adv.trainer.ppo.training.loss import ppo_policy_loss
from areal_adv.trainer.run.group_filter import filter_zero_advantage_groups, zero_advantage_groups
from areal_adv.trainer.run.loop import Trainer
from areal_adv.trainer.run.metrics import read_metrics
from areal_adv.utils.data import concat_batch

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "tests" / "trainer" / "ppo"))
import peer_reference as ref  # noqa: E402

PRESET = ROOT / "examples" / "presets" / "grpo_filter_zero_advantage.yaml"
SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def dapo_kept(rewards: list[float], sizes: list[int]) -> list[bool]:
    """verl's DAPO `filter_groups` on the sequence reward: keep a prompt whose rewards have std > 0 (or one sample)."""
    kept, start = [], 0
    for n in sizes:
        group = rewards[start : start + n]
        start += n
        kept.append(len(group) == 1 or statistics.pstdev(group) > 0)
    return kept


@SETTINGS
@given(sizes=st.lists(st.integers(2, 6), min_size=1, max_size=6), seed=st.integers(0, 10_000))
def test_filtered_groups_equal_dapos_filter_on_grpo(sizes, seed):
    actor = PPOActor(load_config(PRESET).actor)
    batch, meta = concat_batch(ref.make_peer_groups(seed, sizes, binary=True))
    data = actor.compute_advantages(batch, meta)
    zero = zero_advantage_groups(data, meta.traj_group_sizes)
    assert (~zero).tolist() == dapo_kept(batch["rewards"].tolist(), list(meta.traj_group_sizes))
    result = filter_zero_advantage_groups(data, meta.traj_group_sizes)
    assert result.filtered == int(zero.sum()) and result.groups == len(sizes)
    kept_rows = sum(n for n, z in zip(sizes, zero.tolist()) if not z)
    if result.skip_update:
        assert kept_rows == 0
    else:
        assert result.data["advantages"].shape[0] == kept_rows
        assert batch["rewards"] is not None and data["advantages"].shape[0] == sum(sizes)  # the input is untouched


def test_the_loss_averages_over_the_kept_groups_tokens():
    actor = PPOActor(load_config(PRESET).actor)
    batch, meta = concat_batch(ref.make_peer_groups(4, [3, 4, 2, 3], binary=True))
    batch["rewards"] = torch.tensor([1.0, 1.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0])  # group 0 all equal
    data = actor.compute_advantages(batch, meta)
    kept = filter_zero_advantage_groups(data, meta.traj_group_sizes)
    assert kept.filtered == 1

    def loss(d):
        logp = d["logprobs"] * 0.9  # a policy that moved: ratios differ token by token, the same on both batches
        return ppo_policy_loss(logp, d["logprobs"], d["logprobs"], d["advantages"], d["loss_mask"], eps_clip=0.2)[0]

    all_tokens, kept_tokens = float(data["loss_mask"].sum()), float(kept.data["loss_mask"].sum())
    full = loss(data)
    torch.testing.assert_close(loss(kept.data), full * all_tokens / kept_tokens, rtol=1e-6, atol=1e-7)
    assert kept_tokens < all_tokens


def test_the_trainer_logs_the_filtered_groups(tmp_path: Path) -> None:
    tiny = [
        "train.steps=2",
        "rollout.batch_size=4",
        "rollout.n_samples=3",
        "model.hidden_size=32",
        "model.num_heads=2",
        "model.intermediate_size=64",
        "output.progress_bar=false",
        "output.plot=false",
        "train.num_threads=1",
        "train.save_every=0",
        f"output.dir={tmp_path}",
        # the guess task with a small range: some groups all win or all lose, others are mixed
        "task={implementation: guess, kwargs: {num_range: 3, max_turns: 1}}",
        "actor.max_new_tokens=2",
    ]
    trainer = Trainer(load_config(PRESET, tiny))
    rows = read_metrics(trainer.run().metrics_path)
    assert all("filtered_groups" in r and 0 <= r["filtered_groups"] <= 4 for r in rows)
    partial = 0
    for step in range(2, 8):  # the guess task: some steps drop some groups and train on the rest
        out = trainer.step(step)
        rewards = [rec.reward for rec in out.records]
        expected = sum(len(set(rewards[i : i + 3])) == 1 for i in range(0, len(rewards), 3))
        assert out.metrics["filtered_groups"] == expected
        assert out.metrics["filtered_group_frac"] == pytest.approx(expected / 4)
        if expected == 4:  # nothing to train on: the update was skipped
            assert out.metrics["policy_loss"] is None and out.data["input_ids"].shape[0] == 12
        else:
            assert out.data["input_ids"].shape[0] == 3 * (4 - expected) and out.metrics["policy_loss"] is not None
            partial += 0 < expected
    assert partial >= 1


def test_a_rank_left_without_groups_keeps_one_with_no_active_token(monkeypatch):
    """Under data parallelism another rank kept groups: this one still joins the update, with no tokens."""
    import areal_adv.trainer.run.group_filter as group_filter

    actor = PPOActor(load_config(PRESET).actor)
    batch, meta = concat_batch(ref.make_peer_groups(2, [3, 2], binary=True))
    batch["rewards"] = torch.tensor([1.0, 1.0, 1.0, 0.0, 0.0])  # both groups: all equal
    data = actor.compute_advantages(batch, meta)
    # the other rank: 3 groups, none filtered (what the SUM all-reduce would add)
    monkeypatch.setattr(group_filter, "all_reduce_tensor", lambda t, ctx: t + torch.tensor([0.0, 3.0], dtype=t.dtype))
    result = filter_zero_advantage_groups(data, meta.traj_group_sizes)
    assert (result.filtered, result.groups, result.skip_update) == (2, 5, False)
    assert result.data["input_ids"].shape[0] == 3 and float(result.data["loss_mask"].sum()) == 0.0
    assert float(data["loss_mask"].sum()) > 0  # the input batch is untouched
