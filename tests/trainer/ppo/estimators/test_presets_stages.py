"""The peer stage functions: hand numbers, errors, split rollouts, turn-level REINFORCE."""

from __future__ import annotations

import math

import peer_reference as ref
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from areal_adv.api.builtin_stages import BUILTIN_STAGE_IMPLEMENTATIONS
from areal_adv.api.cli_args import PPOActorConfig, load_config
from areal_adv.api.stage_registry import STAGE_REGISTRY
from areal_adv.trainer.ppo.actor import PPOActor
from areal_adv.trainer.ppo.advantage import OutcomeRewardInputs
from areal_adv.trainer.ppo.advantage_algorithms import TemporalInputs
from areal_adv.trainer.ppo.estimators import peer_algorithms as peer
from areal_adv.trainer.ppo.gae import token_gae_tensors
from areal_adv.utils.data import RolloutGroup, TrajBatchMeta
from areal_adv.utils.dynamic_import import PluginResolutionError

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def outcome_inputs(rewards, sizes, *, lengths=None, rollout_groups=None, **extra) -> OutcomeRewardInputs:
    """A minimal outcome-stage input: rewards [B], a loss mask with `lengths` generated tokens."""
    rewards = torch.as_tensor(rewards, dtype=torch.float32)
    B = rewards.shape[0]
    lengths = lengths or [1] * B
    loss_mask = torch.zeros(B, max(lengths) + 1, dtype=torch.long)
    for b, n in enumerate(lengths):
        loss_mask[b, 1 : 1 + n] = 1
    meta = TrajBatchMeta(n_trajs=len(sizes), traj_group_sizes=tuple(sizes), rollout_groups=rollout_groups)
    return OutcomeRewardInputs({"rewards": rewards, "loss_mask": loss_mask, **extra}, PPOActorConfig(), meta)


def close(x: torch.Tensor, expected) -> None:
    torch.testing.assert_close(x.double(), torch.tensor(expected, dtype=torch.float64), rtol=1e-6, atol=1e-6)


def test_registry_matches_the_functions():
    for stage, names in (
        ("outcome_reward_shaping", {"opo", "gpg", "lite_ppo", "passk", "remax", "maxrl"}),
        ("estimator", {"reinforce_return", "turn_reinforce_return"}),
    ):
        assert set(STAGE_REGISTRY.defined_in(stage, peer.__name__)) == names
        assert names <= set(BUILTIN_STAGE_IMPLEMENTATIONS[stage])
    cfg = load_config(
        None,
        [
            "actor.advantage.outcome_reward_shaping.implementation=gpg",
            "actor.advantage.estimator.implementation=turn_reinforce_return",
            "actor.advantage.estimator.kwargs={turn_discount: 0.5}",
        ],
    )
    assert PPOActor(cfg.actor).resolved.estimator.kwargs == {"turn_discount": 0.5}


def test_unknown_kwargs_fail_at_worker_start():
    cfg = PPOActorConfig(advantage={"outcome_reward_shaping": {"implementation": "gpg", "kwargs": {"beta": 1}}})
    with pytest.raises(PluginResolutionError, match="outcome_reward_shaping.*gpg.*beta"):
        PPOActor(cfg)


# ---------------------------------------------------------------------------
# Outcome stages, hand numbers
# ---------------------------------------------------------------------------


def test_opo_length_weighted_baseline():
    # group 0: b = (2*1 + 6*0) / 8 = 0.25; group 1 is a singleton: its own baseline.
    out = peer.opo(outcome_inputs([1.0, 0.0, 3.0], [2, 1], lengths=[2, 6, 4]))
    close(out.rewards, [0.75, -0.25, 0.0])
    assert out.normalization_rewards is None


def test_opo_group_without_generated_tokens_uses_the_mean():
    inputs = outcome_inputs([1.0, 0.0], [2], lengths=[1, 1])
    inputs.data["loss_mask"].zero_()
    close(peer.opo(inputs).rewards, [0.5, -0.5])


@pytest.mark.parametrize(
    "alpha,f_norm,expected",
    [
        ("valid_groups", False, [4.5, -1.5, -1.5, -1.5, 0.0, 0.0]),  # B=6, M=2 (group [1,1]) -> 6/4
        ("nonzero_rewards", False, [6.0, -2.0, -2.0, -2.0, 0.0, 0.0]),  # 3 non-zero rewards -> 6/3
        ("none", False, [3.0, -1.0, -1.0, -1.0, 0.0, 0.0]),
        ("valid_groups", True, [2.25, -0.75, -0.75, -0.75, 0.0, 0.0]),  # std of [4,0,0,0] is 2
    ],
)
def test_gpg(alpha, f_norm, expected):
    out = peer.gpg(outcome_inputs([4.0, 0.0, 0.0, 0.0, 1.0, 1.0], [4, 2]), alpha=alpha, f_norm=f_norm, eps=0.0)
    close(out.rewards, expected)


def test_passk_reinforces_only_the_best_sample():
    std = math.sqrt(((0.5 - 7 / 6) ** 2 + (2 - 7 / 6) ** 2 + (1 - 7 / 6) ** 2) / 2)
    out = peer.passk(outcome_inputs([0.5, 2.0, 1.0, 1.0, 1.0, 0.0], [3, 3]))
    close(out.rewards, [0.0, 1.0 / (std + 1e-6), 0.0, 0.0, 0.0, 0.0])  # a tie at the top gives 0
    close(peer.passk(outcome_inputs([0.5, 2.0, 1.0], [3]), norm_by_std=False).rewards, [0.0, 1.0, 0.0])


def test_remax_subtracts_the_greedy_reward():
    out = peer.remax(outcome_inputs([1.0, 0.0, 2.0], [2, 1], reward_baselines=torch.tensor([0.5, 0.5, 3.0])))
    close(out.rewards, [0.5, -0.5, -1.0])


def test_maxrl_divides_by_the_group_mean():
    # group 0: p = 1/4, success (1 - 1/4) / (1/4) = 3, failure -1; group 1 (mean 0.5): +-1; a singleton keeps r.
    out = peer.maxrl(outcome_inputs([1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.7], [4, 2, 1]), eps=0.0)
    close(out.rewards, [3.0, -1.0, -1.0, -1.0, 1.0, -1.0, 0.7])
    eps = 1e-6
    close(peer.maxrl(outcome_inputs([1.0, 0.0], [2])).rewards, [0.5 / (0.5 + eps), -0.5 / (0.5 + eps)])


def test_maxrl_all_zero_group_with_eps_zero_gives_zero():
    close(peer.maxrl(outcome_inputs([0.0, 0.0, 1.0, 0.0], [2, 2]), eps=0.0).rewards, [0.0, 0.0, 1.0, -1.0])


def test_lite_ppo_centres_on_the_group_and_scales_by_the_batch_std():
    # groups [4, 0, 0, 0] (mean 1) and [1, 1] (mean 1); the unbiased std of all 6 rewards (mean 1): sqrt(12 / 5)
    rewards = [4.0, 0.0, 0.0, 0.0, 1.0, 1.0]
    std = math.sqrt(sum((r - 1.0) ** 2 for r in rewards) / 5)
    out = peer.lite_ppo(outcome_inputs(rewards, [4, 2]), eps=0.0)
    close(out.rewards, [3.0 / std, -1.0 / std, -1.0 / std, -1.0 / std, 0.0, 0.0])
    assert out.normalization_rewards is None  # no split rollouts
    close(peer.lite_ppo(outcome_inputs([2.0], [1])).rewards, [0.0])  # a batch of one: std 0, numerator 0
    close(peer.lite_ppo(outcome_inputs([0.5, 0.5, 0.5], [2, 1]), eps=0.0).rewards, [0.0, 0.0, 0.0])  # 0 / 0 -> 0


def test_lite_ppo_statistics_are_per_logical_rollout():
    # rollouts [1 (2 rows), 0] and [2, 0]: group means 1/2 and 1; the batch std over the 4 rollouts, not 5 rows
    std = math.sqrt(sum((r - 0.75) ** 2 for r in (1.0, 0.0, 2.0, 0.0)) / 3)
    out = peer.lite_ppo(split_inputs([1.0, 1.0, 0.0, 2.0, 0.0]), eps=0.0)
    close(out.rewards, [0.5 / std, 0.5 / std, -0.5 / std, 1.0 / std, -1.0 / std])
    close(out.normalization_rewards, [0.5 / std, -0.5 / std, 1.0 / std, -1.0 / std])


# ---------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------


def test_passk_needs_two_samples_per_group():
    with pytest.raises(ValueError, match=r"'passk': group 1 has 1 logical rollout"):
        peer.passk(outcome_inputs([1.0, 0.0, 1.0], [2, 1]))


@pytest.mark.parametrize(
    "value,match",
    [
        (None, "no 'reward_baselines'"),
        ([0.5, 0.5], "is list"),
        (torch.zeros(3), r"shape \(3,\), expected \(2,\)"),
        (torch.zeros(2, 1), r"shape \(2, 1\)"),
        (torch.tensor([True, False]), "dtype torch.bool"),
        (torch.tensor([0.0, float("nan")]), r"'reward_baselines'\[1\] is nan"),
    ],
)
def test_remax_rejects_missing_or_malformed_baselines(value, match):
    extra = {} if value is None else {"reward_baselines": value}
    with pytest.raises(ValueError, match=r"outcome_reward_shaping 'remax'.*" + match):
        peer.remax(outcome_inputs([1.0, 0.0], [2], **extra))


def test_remax_error_through_the_pipeline_names_the_field():
    batch, meta = ref.make_peer_batch(1, [2, 3])
    actor = PPOActor(load_config("examples/presets/remax.yaml").actor)
    with pytest.raises(ValueError, match="reward_baselines"):
        actor.compute_advantages(batch, meta)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"alpha": "batch"}, "alpha must be one of"),
        ({"f_norm": 1}, "f_norm must be true or false"),
        ({"eps": -1.0}, "eps must be a finite number"),
    ],
)
def test_gpg_rejects_bad_kwargs(kwargs, match):
    with pytest.raises(ValueError, match="'gpg': " + match):
        peer.gpg(outcome_inputs([1.0, 0.0], [2]), **kwargs)


def test_maxrl_zero_divisor_over_different_rewards_names_the_group():
    with pytest.raises(ValueError, match=r"'maxrl': group 1 has mean reward 0.0, so mean \+ eps \(0.0\) is 0"):
        peer.maxrl(outcome_inputs([1.0, 0.0, -1.0, 1.0], [2, 2]), eps=0.0)
    with pytest.raises(ValueError, match="'maxrl': eps must be a finite number"):
        peer.maxrl(outcome_inputs([1.0, 0.0], [2]), eps=float("nan"))


def test_lite_ppo_rejects_a_bad_eps():
    with pytest.raises(ValueError, match="'lite_ppo': eps must be a finite number >= 0, got -1.0"):
        peer.lite_ppo(outcome_inputs([1.0, 0.0], [2]), eps=-1.0)


def test_passk_rejects_bad_kwargs():
    with pytest.raises(ValueError, match="'passk': norm_by_std"):
        peer.passk(outcome_inputs([1.0, 0.0], [2]), norm_by_std="yes")


# ---------------------------------------------------------------------------
# Split rollouts
# ---------------------------------------------------------------------------


def split_inputs(row_rewards, refs=None, **extra):
    """Group 0: logical rollouts of 2 and 1 rows; group 1: two single-row rollouts."""
    groups = (
        RolloutGroup(row_counts=(2, 1), rewards=None if refs is None else refs[:2]),
        RolloutGroup(row_counts=(1, 1), rewards=None if refs is None else refs[2:]),
    )
    return outcome_inputs(row_rewards, [3, 2], lengths=[1, 2, 4, 3, 3], rollout_groups=groups, **extra)


def test_split_rollouts_statistics_are_per_logical_rollout():
    inputs = split_inputs([1.0, 1.0, 0.0, 2.0, 0.0])
    # OPO: rollout lengths 3 (rows 0+1) and 4 -> b = 3/7; group 1: b = (3*2)/6 = 1.
    out = peer.opo(inputs)
    close(out.rewards, [4 / 7, 4 / 7, -3 / 7, 1.0, -1.0])
    close(out.normalization_rewards, [4 / 7, -3 / 7, 1.0, -1.0])
    # GPG: 4 logical rollouts, all valid -> alpha 1.
    close(peer.gpg(inputs).rewards, [0.5, 0.5, -0.5, 1.0, -1.0])
    # pass@k: both rows of the best rollout get its value.
    close(peer.passk(inputs, norm_by_std=False).rewards, [1.0, 1.0, 0.0, 2.0, 0.0])
    # MaxRL: group 0 mean 1/2 over rollouts (not 2/3 over rows), group 1 mean 1.
    close(peer.maxrl(inputs, eps=0.0).rewards, [1.0, 1.0, -1.0, 1.0, -1.0])


def test_split_rows_that_differ_need_explicit_references():
    with pytest.raises(ValueError, match=r"'gpg': rows of logical rollout 0 \(group 0\) have different rewards"):
        peer.gpg(split_inputs([1.0, 0.8, 0.0, 2.0, 0.0]))


def test_split_explicit_references_drive_statistics_and_rows_keep_their_own_reward():
    # Rows 0 and 1 belong to one rollout but differ (say a per-row length penalty); reference 1.0.
    inputs = split_inputs([1.0, 0.8, 0.0, 2.0, 0.0], refs=torch.tensor([1.0, 0.0, 2.0, 0.0]))
    out = peer.gpg(inputs, alpha="none")
    close(out.rewards, [0.5, 0.3, -0.5, 1.0, -1.0])
    close(out.normalization_rewards, [0.5, -0.5, 1.0, -1.0])


def test_remax_baselines_are_shared_within_a_rollout():
    good = split_inputs([1.0, 1.0, 0.0, 2.0, 0.0], reward_baselines=torch.tensor([0.5, 0.5, 0.5, 1.0, 1.0]))
    out = peer.remax(good)
    close(out.rewards, [0.5, 0.5, -0.5, 1.0, -1.0])
    close(out.normalization_rewards, [0.5, -0.5, 1.0, -1.0])
    bad = split_inputs([1.0, 1.0, 0.0, 2.0, 0.0], reward_baselines=torch.tensor([0.5, 0.6, 0.5, 1.0, 1.0]))
    with pytest.raises(ValueError, match="differ within logical rollout 0"):
        peer.remax(bad)


@SETTINGS
@given(
    seed=st.integers(0, 10_000),
    name=st.sampled_from(["opo", "gpg", "passk", "maxrl"]),
    std_level=st.sampled_from([None, "group"]),
)
def test_reward_norm_on_top_of_a_split_stage_sees_shaped_references(seed, name, std_level):
    """With explicit references, `reward_norm` normalises the stage's per-rollout outputs."""
    batch, meta = ref.make_peer_batch(seed, [3, 2, 4], binary=False, split=True, explicit_refs=True)
    cfg = PPOActorConfig(
        kl_ctl=0.0,
        reward_clip=1e6,
        reward_norm={"mean_level": "group", "std_level": std_level},
        advantage={"outcome_reward_shaping": name, "estimator": "reinforce_return"},
    )
    out = PPOActor(cfg).compute_advantages(batch, meta)
    shaped = STAGE_REGISTRY.defined_in("outcome_reward_shaping", peer.__name__)[name](
        OutcomeRewardInputs(batch, cfg, meta)
    )
    roll = ref.rollouts(batch, meta)
    resp = ref.responses(batch, meta)
    refs = [float(x) for x in shaped.normalization_rewards]
    stats = {}
    for g in set(roll.index):
        xs = [refs[k] for k in range(len(refs)) if roll.index[k] == g]
        mean = sum(xs) / len(xs)
        std = math.sqrt(sum((x - mean) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else 1.0
        scale = std + 1e-5 if std_level else 1.0
        stats[g] = (mean, 1.0 if std_level and scale <= 2e-5 else scale)
    for k, rows in enumerate(roll.rows):
        mean, scale = stats[roll.index[k]]
        for i in rows:
            want = (float(shaped.rewards[i]) - mean) / scale
            torch.testing.assert_close(
                out["advantages"][i, resp.actions[i]].double(),
                torch.full((len(resp.actions[i]),), want, dtype=torch.float64),
                rtol=1e-5,
                atol=1e-5,
            )


# ---------------------------------------------------------------------------
# Estimators
# ---------------------------------------------------------------------------


def temporal(loss_mask, *, outcome, kl=None, process=None, turn_ids=None, discount=1.0) -> TemporalInputs:
    mask = torch.tensor([loss_mask], dtype=torch.float32)
    zeros = torch.zeros_like(mask)

    def row(x):
        return zeros.clone() if x is None else torch.tensor([x], dtype=torch.float32)

    return TemporalInputs(
        outcome_rewards=row(outcome),
        kl_rewards=row(kl),
        process_rewards=row(process),
        values=torch.randn_like(mask),
        loss_mask=mask,
        turn_ids=None if turn_ids is None else torch.tensor([turn_ids]),
        is_truncated=torch.tensor([True]),
        bootstrap_values=torch.tensor([5.0]),
        seqlens=torch.tensor([mask.shape[1]]),
        discount=discount,
        gae_lambda=0.5,
    )


def test_reinforce_return_hand_numbers():
    # Steps at 1, 2, 4; G4 = 1 - 0.1 = 0.9, G2 = -0.1 + 0.5 * 0.9, G1 = -0.1 + 0.5 * 0.35.
    kl = [0.0, -0.1, -0.1, 0.0, -0.1, 0.0, 0.0]
    res = peer.reinforce_return(temporal([0, 1, 1, 0, 1, 0, 0], outcome=[0, 0, 0, 0, 1.0, 0, 0], kl=kl, discount=0.5))
    close(res.advantages[0], [0, 0.075, 0.35, 0, 0.9, 0, 0])
    close(res.returns[0], [0, 0.075, 0.35, 0, 0.9, 0, 0])  # no critic: values and bootstrap ignored
    close(res.total_rewards[0], [0, -0.1, -0.1, 0, 0.9, 0, 0])


def test_reinforce_return_credits_off_step_rewards_to_the_previous_generated_token():
    # The score after trailing environment tokens (position 5) goes to the last generated token;
    # a reward before the first generated token goes to the first one.
    res = peer.reinforce_return(temporal([0, 1, 1, 0, 1, 0, 0], outcome=[0.25, 0, 0, 0, 0, 1.0, 0], discount=0.5))
    close(res.advantages[0], [0, 0.25 + 0.25, 0.5, 0, 1.0, 0, 0])


@SETTINGS
@given(seed=st.integers(0, 10_000), gamma=st.sampled_from([1.0, 0.9, 0.0]))
def test_reinforce_return_is_critic_free_token_gae_with_lambda_one(seed, gamma):
    batch, meta = ref.make_peer_batch(seed, [2, 3], trailing_env=False, process=True)
    cfg = PPOActorConfig(
        kl_ctl=0.1, discount=gamma, token_rewards_as_adv=False, advantage={"estimator": "reinforce_return"}
    )
    out = PPOActor(cfg).compute_advantages(batch, meta)
    mask = out["loss_mask"]
    expected, _ = token_gae_tensors(
        out["tot_rewards"], torch.zeros_like(mask), mask, discount=gamma, lam=1.0, bootstrap=0.0
    )
    torch.testing.assert_close(out["advantages"], expected * mask, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(out["returns"], out["advantages"])


def test_turn_reinforce_return_hand_numbers():
    # Turn 0 at 1-2, env at 3, turn 1 at 4-5. Turn rewards R0 = 0.5 (process), R1 = 0.25 + 1.0.
    kwargs = dict(
        outcome=[0, 0, 0, 0, 0, 1.0, 0],
        process=[0, 0, 0.5, 0, 0, 0.25, 0],
        kl=[0, -0.1, -0.1, 0, -0.1, -0.1, 0],
        turn_ids=[-1, 0, 0, -1, 1, 1, -1],
    )
    res = peer.turn_reinforce_return(temporal([0, 1, 1, 0, 1, 1, 0], discount=1.0, **kwargs), turn_discount=0.5)
    close(res.returns[0], [0, 1.125, 1.125, 0, 1.25, 1.25, 0])  # G0 = 0.5 + 0.5 * 1.25
    close(res.advantages[0], [0, 1.025, 1.025, 0, 1.15, 1.15, 0])  # KL stays local to its token
    res = peer.turn_reinforce_return(temporal([0, 1, 1, 0, 1, 1, 0], discount=0.0, **kwargs))
    close(res.returns[0], [0, 0.5, 0.5, 0, 1.25, 1.25, 0])  # turn_discount defaults to actor.discount


def test_turn_reinforce_return_errors():
    with pytest.raises(ValueError, match="'turn_reinforce_return': the batch has no 'turn_ids'"):
        peer.turn_reinforce_return(temporal([0, 1, 0], outcome=[0, 1.0, 0]))
    with pytest.raises(ValueError, match="turn_discount must be a number in"):
        peer.turn_reinforce_return(temporal([0, 1, 0], outcome=[0, 1.0, 0], turn_ids=[-1, 0, -1]), turn_discount=1.5)


@SETTINGS
@given(seed=st.integers(0, 10_000), gamma=st.sampled_from([1.0, 0.5, 0.0]), kl=st.sampled_from([0.0, 0.1]))
def test_turn_reinforce_with_per_turn_rewards_equals_a_loop(seed, gamma, kl):
    """Per-turn rewards (process rewards folded at turn ends) with a turn discount."""
    batch, meta = ref.make_peer_batch(seed, [2, 3, 2], process=True, binary=False)
    cfg = PPOActorConfig(
        kl_ctl=kl,
        token_rewards_as_adv=False,
        advantage={"estimator": {"implementation": "turn_reinforce_return", "kwargs": {"turn_discount": gamma}}},
    )
    out = PPOActor(cfg).compute_advantages(batch, meta)
    resp = ref.responses(batch, meta)
    for b, positions in enumerate(resp.actions):
        turns = [int(batch["turn_ids"][b, t + 1]) for t in positions]
        order = sorted(set(turns))
        turn_reward = {k: float(batch["token_rewards"][b, positions[turns.index(k)] + 1]) for k in order}
        turn_reward[order[-1]] += resp.scores[b]  # the outcome belongs to the last turn
        returns, acc = {}, 0.0
        for k in reversed(order):
            acc = turn_reward[k] + gamma * acc
            returns[k] = acc
        want = [returns[k] - kl * kl_t for k, kl_t in zip(turns, resp.kl[b])]
        torch.testing.assert_close(
            out["advantages"][b, positions].double(), torch.tensor(want, dtype=torch.float64), rtol=1e-5, atol=1e-6
        )


# ---------------------------------------------------------------------------
# Data parallel: GPG's batch factor counts the whole batch
# ---------------------------------------------------------------------------

GPG_DP_REWARDS = ([4.0, 0.0, 0.0, 0.0, 1.0, 1.0], [0.0, 0.0, 1.0, 0.0, 0.0])
GPG_DP_SIZES = ([4, 2], [2, 3])


def _gpg_rank(rank: int, init_file: str, out_dir: str) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    try:
        for mode in ("valid_groups", "nonzero_rewards"):
            out = peer.gpg(outcome_inputs(GPG_DP_REWARDS[rank], GPG_DP_SIZES[rank]), alpha=mode)
            torch.save(out.rewards, f"{out_dir}/rank{rank}-{mode}.pt")
    finally:
        dist.destroy_process_group()


def test_gpg_alpha_is_all_reduced_over_data_parallel_ranks(tmp_path):
    """Two gloo ranks, each with whole prompt groups, equal one process on the whole batch."""
    import torch.multiprocessing as mp

    mp.spawn(_gpg_rank, args=(str(tmp_path / "init"), str(tmp_path)), nprocs=2, join=True)
    rewards = GPG_DP_REWARDS[0] + GPG_DP_REWARDS[1]
    for mode in ("valid_groups", "nonzero_rewards"):
        whole = peer.gpg(outcome_inputs(rewards, GPG_DP_SIZES[0] + GPG_DP_SIZES[1]), alpha=mode).rewards
        ranks = torch.cat([torch.load(tmp_path / f"rank{r}-{mode}.pt") for r in range(2)])
        torch.testing.assert_close(ranks, whole)
        assert not torch.equal(ranks[:6], peer.gpg(outcome_inputs(GPG_DP_REWARDS[0], [4, 2]), alpha=mode).rewards)
