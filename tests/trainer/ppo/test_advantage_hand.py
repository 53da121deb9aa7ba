"""The default pipeline on tiny batches, against numbers worked out by hand."""

from __future__ import annotations

import torch

from areal_adv.api.cli_args import NormConfig, PPOActorConfig
from areal_adv.trainer.ppo.actor import PPOActor
from areal_adv.utils.data import RolloutGroup, TrajBatchMeta


def two_rows(**extra):
    """Row 0: prompt 2 + 3 generated tokens, fills T=5 (truncated when is_truncated is absent).
    Row 1: prompt 1 + 3 generated tokens, one padding position. Integer rewards 1 and 0."""
    batch = {
        "input_ids": torch.tensor([[5, 6, 7, 8, 9], [5, 7, 8, 9, 0]]),
        "attention_mask": torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 1, 0]]),
        "loss_mask": torch.tensor([[0, 0, 1, 1, 1], [0, 1, 1, 1, 0]]),
        "logprobs": torch.tensor([[0.0, 0.0, -1.0, -2.0, -3.0], [0.0, -1.0, -1.0, -1.0, 0.0]]),
        "rewards": torch.tensor([1, 0]),
    }
    batch.update(extra)
    return batch


def run(batch, meta=None, **cfg):
    return PPOActor(PPOActorConfig(**cfg)).compute_advantages(batch, meta)


def test_kl_placement_and_token_gae_by_hand():
    """Aligned masks [0,1,1,1,0] / [1,1,1,0,0]; old logp [0,-1,-2,-3,0] / [-1,-1,-1,0,0];
    KL rewards (kl_ctl 0.5, k1, ref 0) [0,.5,1,1.5,0] / [.5,.5,.5,0,0]; outcome 1 at position
    seqlen-2 = 3 of row 0; GAE (gamma = lambda = 1, no critic) sums rewards to go over active
    positions, masked position 0 of row 0 carries the next advantage."""
    out = run(two_rows(), kl_ctl=0.5)
    assert torch.equal(out["loss_mask"], torch.tensor([[0.0, 1, 1, 1, 0], [1, 1, 1, 0, 0]]))
    torch.testing.assert_close(out["logprobs"], torch.tensor([[0.0, -1, -2, -3, 0], [-1.0, -1, -1, 0, 0]]))
    torch.testing.assert_close(out["kl_rewards"], torch.tensor([[0.0, 0.5, 1, 1.5, 0], [0.5, 0.5, 0.5, 0, 0]]))
    torch.testing.assert_close(out["tot_rewards"], torch.tensor([[0.0, 0.5, 1, 2.5, 0], [0.5, 0.5, 0.5, 0, 0]]))
    torch.testing.assert_close(out["advantages"], torch.tensor([[4.0, 4, 3.5, 2.5, 0], [1.5, 1, 0.5, 0, 0]]))
    torch.testing.assert_close(out["returns"], out["advantages"])
    assert out["is_truncated"].tolist() == [True, False]  # seqlen == T
    assert out["rewards"].dtype == torch.long  # identity keeps integer task rewards


def test_mask_no_eos_with_zero_with_and_without_is_truncated():
    inferred = run(two_rows(), kl_ctl=0.5, mask_no_eos_with_zero=True)
    # row 0 fills T: truncated, its outcome is dropped -> rewards to go of [0,.5,1,1.5,0]
    torch.testing.assert_close(inferred["advantages"][0], torch.tensor([3.0, 3, 2.5, 1.5, 0]))
    explicit = run(two_rows(is_truncated=torch.tensor([False, True])), kl_ctl=0.5, mask_no_eos_with_zero=True)
    torch.testing.assert_close(explicit["advantages"][0], torch.tensor([4.0, 4, 3.5, 2.5, 0]))


def test_truncated_row_bootstraps_from_its_last_valid_value():
    """Row 1 flagged truncated: bootstrap = values[1, seqlen-1 = 3] = 10, carried back over
    the masked position 3; gamma 1, lambda 1, no KL: A_t = 10 - V_t on active positions."""
    values = torch.tensor([[0.0, 0, 0, 0, 0], [1.0, 2, 3, 10, 0]])
    out = run(two_rows(values=values, is_truncated=torch.tensor([False, True])), kl_ctl=0.0)
    torch.testing.assert_close(out["advantages"][1], torch.tensor([9.0, 8, 7, 0, 0]))
    torch.testing.assert_close(out["returns"][1], torch.tensor([10.0, 10, 10, 10, 0]))


def test_recompute_logprob_uses_prox_logp():
    prox = torch.tensor([[0.0, -0.5, -0.5, -0.5, 0.0], [-2.0, -2, -2, 0, 0]])
    out = run(two_rows(prox_logp=prox), kl_ctl=1.0, recompute_logprob=True)
    torch.testing.assert_close(out["logprobs"], prox * out["loss_mask"])
    torch.testing.assert_close(out["kl_rewards"], torch.tensor([[0.0, 0.5, 0.5, 0.5, 0], [2.0, 2, 2, 0, 0]]))


def test_group_leave_one_out_reward_norm_and_singleton():
    """Group [1, 0, 1] with leave-one-out baselines (2-x)/2 = .5, 1, .5 -> scores .5, -1, .5;
    a singleton group normalises to 0 (its own baseline)."""
    rows = {k: torch.cat([v, v[:1], v[:1]]) for k, v in two_rows().items()}
    rows["rewards"] = torch.tensor([1.0, 0.0, 1.0, 3.0])
    meta = TrajBatchMeta.from_group_sizes([3, 1])
    norm = NormConfig(mean_level="group", std_level=None, mean_leave1out=True)
    out = run(rows, meta, kl_ctl=0.0, reward_norm=norm)
    # with no KL, the score is every active advantage of the row (gamma = lambda = 1)
    assert out["advantages"][:, 1].tolist() == [0.5, -1.0, 0.5, 0.0]


def test_split_rollout_references_by_hand():
    """One prompt, logical rollouts of 2 rows and 1 row. Derived references [1, 0]: group mean .5
    -> row scores .5, .5, -.5. Explicit references [.2, 0] (mean .1) -> .9, .9, -.1."""
    rows = {k: torch.cat([v, v[:1]]) for k, v in two_rows().items()}
    rows["rewards"] = torch.tensor([1.0, 1.0, 0.0])
    norm = NormConfig(mean_level="group", std_level=None)
    derived = TrajBatchMeta(1, (3,), (5,), (RolloutGroup((2, 1)),))
    out = run(rows, derived, kl_ctl=0.0, reward_norm=norm)
    torch.testing.assert_close(out["advantages"][:, 1], torch.tensor([0.5, 0.5, -0.5]))
    explicit = TrajBatchMeta(1, (3,), (5,), (RolloutGroup((2, 1), torch.tensor([0.2, 0.0])),))
    out = run(rows, explicit, kl_ctl=0.0, reward_norm=norm)
    torch.testing.assert_close(out["advantages"][:, 1], torch.tensor([0.9, 0.9, -0.1]))


def test_multi_turn_row_with_tool_gap_token_and_turn_gae():
    """Prompt 1, turn 0 = tokens 1-2, tool tokens 3-4, turn 1 = tokens 5-6 (T = 7, seqlen 7).
    Outcome 1 at aligned position 5 (predicts token 6). Token GAE: every active position sees 1.
    Turn GAE with values: V(turn0) = values[0] = .5, V(turn1) = values[4] = .25:
    A1 = 1 - .25 = .75, A0 = 0 + .25 - .5 + .75 = .5 (gamma = lambda = 1)."""
    batch = {
        "input_ids": torch.arange(1, 8).unsqueeze(0),
        "attention_mask": torch.ones(1, 7, dtype=torch.long),
        "loss_mask": torch.tensor([[0, 1, 1, 0, 0, 1, 1]]),
        "logprobs": torch.zeros(1, 7),
        "rewards": torch.tensor([1.0]),
        "turn_ids": torch.tensor([[-1, 0, 0, -1, -1, 1, 1]]),
        "is_truncated": torch.tensor([False]),
        "values": torch.tensor([[0.5, 9.0, 9.0, 9.0, 0.25, 9.0, 9.0]]),
    }
    token = run({k: v for k, v in batch.items() if k != "values"}, kl_ctl=0.0)
    assert token["advantages"][0].tolist() == [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0]
    turn = run(batch, kl_ctl=0.0, gae_timestep_unit="turn")
    torch.testing.assert_close(turn["advantages"][0], torch.tensor([0.5, 0.5, 0.0, 0.0, 0.75, 0.75, 0.0]))
    torch.testing.assert_close(turn["returns"][0], torch.tensor([1.0, 1.0, 9.0, 9.0, 1.0, 1.0, 9.0]))


def test_mopd_behaviour_logprobs_are_the_rollout_ones_even_when_recomputed():
    """With MOPD teacher targets, `mopd_behavior_logprobs` keeps the aligned, masked rollout
    log-probs although recompute_logprob replaces `logprobs` by prox_logp."""
    prox = torch.full((2, 5), -0.25)
    batch = two_rows(prox_logp=prox, mopd_teacher_logp_sum=torch.zeros(2, 5))
    out = run(batch, recompute_logprob=True)
    expected = torch.tensor([[0.0, -1, -2, -3, 0], [-1.0, -1, -1, 0, 0]])
    torch.testing.assert_close(out["mopd_behavior_logprobs"], expected)
    assert not out["mopd_behavior_logprobs"].requires_grad
    torch.testing.assert_close(out["logprobs"], prox * out["loss_mask"])
    assert "mopd_behavior_logprobs" not in run(two_rows())
