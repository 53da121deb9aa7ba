"""Step-level credit: GiGPO and the MT-GRPO-style turn-level advantage.

Random multi-turn episodes (per-turn rewards, anchor states that recur across a
group's episodes, variable group sizes and turn counts) go through the pipeline
both as one row per episode and as one row per turn (split rollouts); on every
turn's tokens the advantage must equal the plain-loop reference written from
verl-agent's GiGPO code and the MT-GRPO authors' trainer, in both layouts.
"""

from __future__ import annotations

import estimators_reference as eref
import pytest
import torch
from episode_factory import batch_of, make_episode_groups, token_positions
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from areal_adv.api.cli_args import PPOActorConfig
from areal_adv.trainer.ppo.actor import PPOActor

SETTINGS = settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
sizes_st = st.lists(st.integers(2, 6), min_size=1, max_size=4)


def actor(estimator: str, **kwargs) -> PPOActor:
    return PPOActor(
        PPOActorConfig(
            kl_ctl=0.0,
            reward_norm=None,
            adv_norm=None,
            token_rewards_as_adv=False,
            reward_clip=1e9,
            advantage={"estimator": {"implementation": estimator, "kwargs": kwargs}},
        )
    )


def check_turns(adv: torch.Tensor, groups, expected, *, split: bool, atol: float = 1e-5, rtol: float = 1e-5) -> float:
    """Every token of every turn carries the expected value; returns the largest difference."""
    worst = 0.0
    positions = token_positions(groups, split=split)
    for g, per_group in enumerate(positions):
        for e, per_episode in enumerate(per_group):
            for k, tokens in enumerate(per_episode):
                for row, col in tokens:
                    diff = abs(float(adv[row, col]) - expected[g][e][k])
                    worst = max(worst, diff)
                    assert diff <= atol + rtol * abs(expected[g][e][k]), (
                        g,
                        e,
                        k,
                        row,
                        col,
                        float(adv[row, col]),
                        expected[g][e][k],
                    )
    return worst


def gigpo_inputs(groups) -> list[list[dict]]:
    return [
        [
            {
                "rewards": [t.reward for t in ep.turns[:-1]] + [ep.turns[-1].reward + ep.outcome],
                "anchors": [t.anchor for t in ep.turns],
            }
            for ep in episodes
        ]
        for episodes in groups
    ]


def mt_inputs(groups) -> list[list[dict]]:
    return [
        [{"outcome": ep.outcome, "turn_rewards": [t.reward for t in ep.turns]} for ep in episodes]
        for episodes in groups
    ]


@pytest.mark.parametrize("episode_stats", ["steps", "episodes"])
@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sizes=sizes_st,
    seed=st.integers(0, 100_000),
    binary=st.booleans(),
    split=st.booleans(),
    gamma=st.sampled_from([1.0, 0.95, 0.5]),
    weight=st.sampled_from([1.0, 0.5]),
    mode=st.sampled_from(["mean_norm", "mean_std_norm"]),
)
def test_gigpo_equals_verl_agent(episode_stats, sizes, seed, binary, split, gamma, weight, mode):
    """Both episode statistics (the authors' compute_mean_std_cross_steps True / False), 50 batches each."""
    groups = make_episode_groups(seed, sizes, binary=binary, max_turns=4)
    batch, meta = batch_of(groups, split=split)
    out = actor(
        "gigpo", step_discount=gamma, step_weight=weight, mode=mode, episode_stats=episode_stats
    ).compute_advantages(batch, meta)
    expected = eref.gigpo(gigpo_inputs(groups), gamma, weight, mode, cross_steps=episode_stats == "steps")
    check_turns(out["advantages"], groups, expected, split=split, atol=1e-6, rtol=0.0)
    assert float(out["advantages"][out["loss_mask"] == 0].abs().max()) == 0.0


@pytest.mark.parametrize("split", [False, True])
def test_gigpo_default_is_the_authors_statistics_over_steps(split):
    """Issue 21's group of guess_gigpo.yaml: A has 1 turn (outcome 1), B 2 turns (outcome 0), first turns share
    a state. Over steps (the authors' default) the group mean is 1/3: A 2/3 + 1/2, B -1/3 - 1/2 and -1/3 + 0;
    over episodes it is 1/2: A 1/2 + 1/2, B -1/2 - 1/2 and -1/2."""
    turn = type(make_episode_groups(0, [1])[0][0].turns[0])
    episode = type(make_episode_groups(0, [1])[0][0])
    groups = [[episode(1000, [turn(2, 0.0, 7, 0)], 1.0), episode(1000, [turn(2, 0.0, 7, 1), turn(2, 0.0, 38, 0)], 0.0)]]
    batch, meta = batch_of(groups, split=split)
    kwargs = {"step_weight": 1.0, "step_discount": 0.95, "mode": "mean_norm", "eps": 1e-6}  # guess_gigpo.yaml
    authors = [[[7 / 6], [-5 / 6, -1 / 3]]]
    check_turns(
        actor("gigpo", **kwargs).compute_advantages(batch, meta)["advantages"],
        groups,
        authors,
        split=split,
        atol=1e-6,
        rtol=0.0,
    )
    check_turns(
        actor("gigpo", episode_stats="steps", **kwargs).compute_advantages(batch, meta)["advantages"],
        groups,
        authors,
        split=split,
        atol=1e-6,
        rtol=0.0,
    )
    by_episode = actor("gigpo", episode_stats="episodes", **kwargs).compute_advantages(batch, meta)["advantages"]
    check_turns(by_episode, groups, [[[1.0], [-1.0, -0.5]]], split=split, atol=1e-6, rtol=0.0)
    reference = eref.gigpo(gigpo_inputs(groups), 0.95)[0]  # the plain loop agrees with the hand computation
    assert reference[0] + reference[1] == pytest.approx([7 / 6, -5 / 6, -1 / 3], abs=1e-12)


@SETTINGS
@given(
    sizes=sizes_st,
    seed=st.integers(0, 100_000),
    binary=st.booleans(),
    split=st.booleans(),
    credit=st.sampled_from(["to_go", "own"]),
    coef=st.sampled_from([1.0, 0.3]),
)
def test_mt_grpo_equals_its_turn_level_definition(sizes, seed, binary, split, credit, coef):
    groups = make_episode_groups(seed, sizes, binary=binary, max_turns=4)
    batch, meta = batch_of(groups, split=split)
    out = actor("mt_grpo", turn_credit=credit, turn_weight=coef).compute_advantages(batch, meta)
    expected = eref.mt_grpo(mt_inputs(groups), coef, credit=credit)
    check_turns(out["advantages"], groups, expected, split=split)


@SETTINGS
@given(sizes=sizes_st, seed=st.integers(0, 100_000), split=st.booleans())
def test_mt_grpo_two_turns_equals_the_authors_assignment(sizes, seed, split):
    """The authors' case: two turns, a turn reward on the first (tool) turn only."""
    groups = make_episode_groups(seed, sizes, binary=True, max_turns=2)
    for episodes in groups:
        for ep in episodes:
            while len(ep.turns) < 2:
                ep.turns[-1].gap = 1
                ep.turns.append(type(ep.turns[0])(2, 0.0, 99, 0))
            ep.turns[1].reward = 0.0
    batch, meta = batch_of(groups, split=split)
    out = actor("mt_grpo").compute_advantages(batch, meta)
    expected = []
    for episodes in groups:
        pairs = eref.mt_grpo_two_turn([ep.outcome for ep in episodes], [ep.turns[0].reward for ep in episodes])
        expected.append([[first, final] for first, final in pairs])
    check_turns(out["advantages"], groups, expected, split=split)


def test_step_credit_is_the_same_for_both_layouts():
    groups = make_episode_groups(11, [4, 3, 5], binary=False, max_turns=3)
    for estimator in ("gigpo", "mt_grpo"):
        a = actor(estimator)
        by_episode = a.compute_advantages(*batch_of(groups, split=False))["advantages"]
        by_turn = a.compute_advantages(*batch_of(groups, split=True))["advantages"]
        for pe, pt in zip(token_positions(groups, split=False), token_positions(groups, split=True)):
            for ee, et in zip(pe, pt):
                for te, tt in zip(ee, et):
                    assert [float(by_episode[p]) for p in te] == pytest.approx(
                        [float(by_turn[p]) for p in tt], abs=1e-6
                    )


def test_step_credit_adds_token_kl_as_a_local_penalty():
    groups = make_episode_groups(2, [3, 3], max_turns=2)
    batch, meta = batch_of(groups, split=False)
    batch["ref_logp"] = batch["logprobs"] - 0.25 * batch["loss_mask"]
    plain = actor("gigpo").compute_advantages(batch, meta)
    cfg = PPOActorConfig(
        kl_ctl=0.1,
        reward_norm=None,
        adv_norm=None,
        token_rewards_as_adv=False,
        reward_clip=1e9,
        advantage={"estimator": {"implementation": "gigpo"}},
    )
    with_kl = PPOActor(cfg).compute_advantages(batch, meta)
    torch.testing.assert_close(with_kl["advantages"], plain["advantages"] + with_kl["kl_rewards"])


def test_step_credit_errors_name_the_estimator():
    groups = make_episode_groups(3, [2, 3])
    batch, meta = batch_of(groups, split=False)
    no_turns = {k: v for k, v in batch.items() if k != "turn_ids"}
    for estimator in ("gigpo", "mt_grpo"):
        with pytest.raises(ValueError, match=rf"'{estimator}'.*no 'turn_ids'"):
            actor(estimator).compute_advantages(no_turns, meta)
    with pytest.raises(ValueError, match=r"'gigpo'.*no 'anchor_ids'"):
        actor("gigpo").compute_advantages({k: v for k, v in batch.items() if k != "anchor_ids"}, meta)
    moving = dict(batch, anchor_ids=batch["anchor_ids"] + torch.arange(batch["anchor_ids"].shape[1]))
    with pytest.raises(ValueError, match=r"'anchor_ids' change inside a turn"):
        actor("gigpo").compute_advantages(moving, meta)
    with pytest.raises(ValueError, match=r"anchor_ids: expected an integer tensor"):
        actor("gigpo").compute_advantages(dict(batch, anchor_ids=batch["anchor_ids"].float()), meta)
    single = make_episode_groups(3, [1, 3])
    sb, sm = batch_of(single, split=True)
    for estimator in ("gigpo", "mt_grpo"):
        with pytest.raises(ValueError, match=r"prompt group 0 has 1 logical rollout.*allow_singletons"):
            actor(estimator).compute_advantages(sb, sm)
        out = actor(estimator, allow_singletons=True).compute_advantages(sb, sm)
        assert torch.isfinite(out["advantages"]).all()
    for kwargs, message in (
        ({"mode": "x"}, "mode must be one of"),
        ({"step_discount": 2.0}, r"step_discount must"),
        ({"episode_stats": "rows"}, r"episode_stats must be one of \['steps', 'episodes'\]"),
        ({"step_weight": -1.0}, "step_weight must"),
    ):
        with pytest.raises(ValueError, match=message):
            actor("gigpo", **kwargs).compute_advantages(batch, meta)
    with pytest.raises(ValueError, match="turn_credit must be one of"):
        actor("mt_grpo", turn_credit="all").compute_advantages(batch, meta)
