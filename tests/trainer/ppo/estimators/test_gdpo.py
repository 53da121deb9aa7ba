"""Multi-dimensional rewards and GDPO: `rewards` [B, K] through the pipeline.

* the GDPO preset equals verl's `compute_gdpo_outcome_advantage` definition (plain
  loops in `estimators_reference.py`) on every generated token, for K = 1..4
  components, weights, variable group sizes (2-8) and binary or continuous rewards;
* split rollouts: every row of a logical rollout gets its rollout's value, the
  same as the one-row-per-episode batch;
* [B, K] rewards with the identity stage (and the scalar built-ins) give exactly
  the pipeline output of the weighted-sum [B] reward: today's behaviour;
* the length penalty is one more component;
* errors name the stage and what was expected.
"""

from __future__ import annotations

import functools
from pathlib import Path

import estimators_reference as eref
import peer_reference as ref
import pytest
import state_plugins
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from areal_adv.api.cli_args import PPOActorConfig, load_config
from areal_adv.trainer.ppo.actor import PPOActor
from areal_adv.trainer.ppo.checks.contracts import StageContractError
from areal_adv.utils.data import RolloutGroup, concat_batch

PRESETS = Path(__file__).resolve().parents[4] / "examples" / "presets"
SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
NAMES = ("correct", "format", "brevity", "style")


@functools.cache
def actor(name: str, *overrides: str) -> PPOActor:
    return PPOActor(load_config(PRESETS / f"{name}.yaml", list(overrides)).actor)


def component_groups(seed: int, sizes: list[int], k: int, *, binary: bool, weights=None, split: bool = False):
    """Peer batches whose rows carry K components (rows of a logical rollout share them)."""
    groups = ref.make_peer_groups(seed, sizes, binary=binary, split=split)
    gen = torch.Generator().manual_seed(seed)
    for group in groups:
        counts = group["rollout_group"].row_counts if split else (1,) * group["input_ids"].shape[0]
        per_rollout = (
            torch.randint(0, 2, (len(counts), k), generator=gen).float()
            if binary
            else torch.randn(len(counts), k, generator=gen)
        )
        group["rewards"] = per_rollout.repeat_interleave(torch.tensor(counts), dim=0)
        group["reward_keys"] = NAMES[:k]
        if weights is not None:
            group["reward_weights"] = tuple(weights)
    return groups


def responses(batch: dict, meta) -> ref.Responses:
    """The response view (positions of generated tokens, groups); its `scores` are unused here."""
    rewards = batch["rewards"]
    return ref.responses({**batch, "rewards": rewards.sum(-1) if rewards.ndim == 2 else rewards}, meta)


def assert_tokens(adv: torch.Tensor, resp: ref.Responses, expected: list[list[float]], atol: float = 1e-6) -> float:
    worst = 0.0
    for b, (positions, exp) in enumerate(zip(resp.actions, expected)):
        got = adv[b, positions].double()
        want = torch.tensor(exp, dtype=torch.float64)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=atol, msg=lambda m, b=b: f"row {b}: {m}")
        if len(exp):
            worst = max(worst, float((got - want).abs().max()))
    return worst


def summed_group_advantages(
    comps: list[list[float]], weights: list[float], index: list[int], norm_by_std: bool = True
) -> list[float]:
    per_row = [0.0] * len(index)
    for j, w in enumerate(weights):
        adv = eref.grpo_scalar([c[j] for c in comps], index, norm_by_std=norm_by_std)
        per_row = [a + w * b for a, b in zip(per_row, adv)]
    return per_row


@SETTINGS
@given(
    sizes=st.lists(st.integers(2, 8), min_size=1, max_size=5),
    seed=st.integers(0, 100_000),
    k=st.integers(1, 4),
    binary=st.booleans(),
    weighted=st.booleans(),
)
def test_gdpo_preset_equals_verl_definition(sizes, seed, k, binary, weighted):
    weights = [0.5 + 0.5 * i for i in range(k)] if weighted else [1.0] * k
    batch, meta = concat_batch(component_groups(seed, sizes, k, binary=binary, weights=weights if weighted else None))
    resp = responses(batch, meta)
    comps = batch["rewards"].double().tolist()
    # whitening's eps placement differs from verl's (docs/algorithms.md): skip near-degenerate batches
    raw = ref.broadcast(summed_group_advantages(comps, weights, resp.index), resp)
    var = ref.token_variance(raw)
    assume(var == 0 or var >= 1e-3)
    expected = eref.gdpo_verl(comps, weights, resp.index, [len(a) for a in resp.actions])
    assert_tokens(actor("gdpo").compute_advantages(batch, meta)["advantages"], resp, expected)


@SETTINGS
@given(sizes=st.lists(st.integers(2, 6), min_size=1, max_size=4), seed=st.integers(0, 100_000), k=st.integers(1, 3))
def test_gdpo_without_whitening_is_the_decoupled_group_sum(sizes, seed, k):
    batch, meta = concat_batch(component_groups(seed, sizes, k, binary=False))
    resp = responses(batch, meta)
    comps = batch["rewards"].double().tolist()
    for by_std in (True, False):
        per_row = summed_group_advantages(comps, [1.0] * k, resp.index, norm_by_std=by_std)
        out = actor(
            "gdpo",
            "actor.adv_norm=null",
            f"actor.advantage.outcome_reward_shaping.kwargs.norm_by_std={str(by_std).lower()}",
        ).compute_advantages(batch, meta)
        assert_tokens(out["advantages"], resp, ref.broadcast(per_row, resp))
        torch.testing.assert_close(
            out["rewards"].double(), torch.tensor(per_row, dtype=torch.float64), rtol=1e-5, atol=1e-6
        )


@SETTINGS
@given(sizes=st.lists(st.integers(2, 6), min_size=1, max_size=4), seed=st.integers(0, 100_000), k=st.integers(1, 3))
def test_gdpo_split_rollouts_give_every_row_its_rollouts_value(sizes, seed, k):
    groups = component_groups(seed, sizes, k, binary=False, split=True)
    batch, meta = concat_batch(groups)
    out = actor("gdpo", "actor.adv_norm=null").compute_advantages(batch, meta)
    rollouts = ref.rollouts({**batch, "rewards": batch["rewards"].sum(-1)}, meta)
    comps = [batch["rewards"][rows[0]].double().tolist() for rows in rollouts.rows]
    per_rollout = [0.0] * len(comps)
    for j in range(k):
        adv = eref.grpo_scalar([c[j] for c in comps], rollouts.index)
        per_rollout = [a + b for a, b in zip(per_rollout, adv)]
    for value, rows in zip(per_rollout, rollouts.rows):
        for r in rows:
            assert abs(float(out["rewards"][r]) - value) < 1e-5


@pytest.mark.parametrize("preset", ["grpo", "rloo", "opo", "gpg", "reinforce_plus_plus_baseline"])
@pytest.mark.parametrize("penalty", [False, True])
def test_components_with_scalar_stages_equal_their_weighted_sum(preset, penalty):
    """Identity and the other scalar stages see sum_k w_k r_k: the [B] pipeline output, bit for bit."""
    weights = (1.0, 0.25, -0.5)
    batch, meta = concat_batch(component_groups(3, [3, 4, 2], 3, binary=False, weights=weights))
    scalar = dict(batch)
    scalar["rewards"] = (batch["rewards"].double() @ torch.tensor(weights, dtype=torch.float64)).float()
    over = (
        [
            "actor.overlong_reward_penalty=true",
            "actor.overlong_tokens=4",
            "actor.overlong_penalty_factor=0.5",
            "actor.max_new_tokens=8",
        ]
        if penalty
        else []
    )
    a = actor(preset, *over)
    plain_meta = concat_batch(ref.make_peer_groups(3, [3, 4, 2], binary=False))[1]
    out = a.compute_advantages(batch, meta)
    want = a.compute_advantages(scalar, plain_meta)
    for key in ("advantages", "returns", "rewards", "tot_rewards"):
        torch.testing.assert_close(out[key], want[key], rtol=0, atol=0, msg=key)


def test_identity_reduces_components_with_the_weights():
    weights = (2.0, -1.0)
    batch, meta = concat_batch(component_groups(5, [2, 3], 2, binary=False, weights=weights))
    out = PPOActor(PPOActorConfig(kl_ctl=0.0)).compute_advantages(batch, meta)
    torch.testing.assert_close(out["rewards"], (batch["rewards"] @ torch.tensor(weights)).float())
    assert batch["rewards"].shape == (5, 2)  # the caller's batch is untouched


def test_length_penalty_is_a_component():
    cfg = PPOActorConfig(
        kl_ctl=0.0,
        overlong_reward_penalty=True,
        overlong_tokens=2,
        overlong_penalty_factor=1.0,
        max_new_tokens=4,
        advantage={"outcome_reward_shaping": {"implementation": "state_plugins.component_spy"}},
    )
    batch, meta = concat_batch(component_groups(7, [3, 3], 2, binary=True))
    PPOActor(cfg).compute_advantages(batch, meta)
    seen = state_plugins.SEEN
    assert seen["keys"] == ("correct", "format", "overlong_penalty") and seen["weights"] == (1.0, 1.0, 1.0)
    lengths = batch["loss_mask"].sum(-1).double()
    penalty = torch.clamp(-(lengths - 2) / 2 * 1.0, max=0)
    torch.testing.assert_close(seen["rewards"][:, 2].double(), penalty)
    torch.testing.assert_close(seen["rewards"][:, :2], batch["rewards"])


def test_custom_stage_sees_every_component_and_must_reduce_them():
    cfg = PPOActorConfig(
        advantage={"outcome_reward_shaping": {"implementation": "state_plugins.component_passthrough"}}
    )
    batch, meta = concat_batch(component_groups(1, [2, 2], 3, binary=True))
    with pytest.raises(StageContractError, match=r"3 reward components.*weighted_sum"):
        PPOActor(cfg).compute_advantages(batch, meta)


def test_gdpo_errors_name_the_stage():
    batch, meta = concat_batch(component_groups(2, [1, 3], 2, binary=False))
    with pytest.raises(ValueError, match=r"'gdpo'.*prompt group 0 has 1 logical rollout.*allow_singletons"):
        actor("gdpo").compute_advantages(batch, meta)
    out = actor(
        "gdpo", "actor.advantage.outcome_reward_shaping.kwargs.allow_singletons=true", "actor.adv_norm=null"
    ).compute_advantages(batch, meta)
    assert float(out["rewards"][0]) == 0.0
    batch, meta = concat_batch(component_groups(2, [2, 3], 2, binary=False))
    cases = [
        ("{implementation: gdpo, kwargs: {keys: [correct, nope]}}", r"keys .*unknown: \['nope'\]"),
        ("{implementation: gdpo, kwargs: {weights: [1.0]}}", r"weights must be a mapping .* 2 numbers"),
        ("{implementation: gdpo, kwargs: {weights: {style: 1.0}}}", r"weights name \['style'\]"),
        ("{implementation: gdpo, kwargs: {eps: -1}}", r"eps must be"),
    ]
    for spec, message in cases:
        a = PPOActor(load_config(PRESETS / "gdpo.yaml", [f"actor.advantage.outcome_reward_shaping={spec}"]).actor)
        with pytest.raises(ValueError, match=message):
            a.compute_advantages(batch, meta)


def test_gdpo_keys_and_mapping_weights_select_components():
    batch, meta = concat_batch(component_groups(9, [3, 4], 3, binary=False))
    resp = responses(batch, meta)
    comps = batch["rewards"].double().tolist()
    per_row = [0.0] * len(resp.index)
    for j, w in ((0, 2.0), (2, 1.0)):
        adv = eref.grpo_scalar([c[j] for c in comps], resp.index)
        per_row = [a + w * b for a, b in zip(per_row, adv)]
    spec = "{implementation: gdpo, kwargs: {keys: [correct, brevity], weights: {correct: 2.0}}}"
    a = PPOActor(
        load_config(
            PRESETS / "gdpo.yaml", ["actor.adv_norm=null", f"actor.advantage.outcome_reward_shaping={spec}"]
        ).actor
    )
    out = a.compute_advantages(batch, meta)
    torch.testing.assert_close(
        out["rewards"].double(), torch.tensor(per_row, dtype=torch.float64), rtol=1e-5, atol=1e-6
    )


def test_component_batches_are_checked():
    groups = component_groups(4, [2, 2], 2, binary=False)
    for g in groups:
        del g["reward_keys"]
    batch, meta = concat_batch(groups)
    with pytest.raises(ValueError, match=r"rewards: shape \(4, 2\).*meta.reward_keys is missing"):
        actor("gdpo").compute_advantages(batch, meta)
    groups = component_groups(4, [2, 2], 2, binary=False)
    groups[1]["reward_keys"] = ("correct", "other")
    with pytest.raises(ValueError, match=r"trajectory 1 has reward_keys=.*every prompt group"):
        concat_batch(groups)
    groups = component_groups(4, [2, 2], 2, binary=False)
    groups[0]["reward_keys"] = ("a", "b", "c")
    groups[1]["reward_keys"] = ("a", "b", "c")
    batch, meta = concat_batch(groups)
    with pytest.raises(ValueError, match=r"2 components, but meta.reward_keys names 3"):
        actor("gdpo").compute_advantages(batch, meta)
    groups = component_groups(4, [2, 2], 2, binary=False, split=True)
    groups[0]["rewards"] = groups[0]["rewards"].clone()
    groups[0]["rollout_group"] = RolloutGroup(row_counts=(2,) + (1,) * (groups[0]["input_ids"].shape[0] - 2))
    groups[0]["rewards"][1, 0] += 1.0
    batch, meta = concat_batch(groups)
    with pytest.raises(ValueError, match=r"rows of logical rollout 0 differ in reward component 'correct'"):
        actor("gdpo").compute_advantages(batch, meta)
