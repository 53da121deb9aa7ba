"""Entropy-based advantage shaping (arXiv 2506.14758): A + min(alpha * H, |A| / kappa) per token.

The stage runs after `adv_norm` on any estimator's advantages; it must equal the
per-token loop of the paper's definition on every generated token (and leave
every other position alone), compose with a PRM shaping (`then`), work on split
rollouts (it is per token, so a row is a row), and fail clearly without
entropies.
"""

from __future__ import annotations

import estimators_reference as eref
import pytest
import torch
from episode_factory import batch_of, make_episode_groups
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from areal_adv.api.cli_args import NormConfig, PPOActorConfig
from areal_adv.trainer.ppo.actor import PPOActor

SETTINGS = settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def config(process: dict | None, **actor) -> PPOActorConfig:
    fields = dict(
        kl_ctl=0.0,
        reward_norm=NormConfig(mean_level="group", std_level="group"),
        adv_norm=None,
        advantage={"estimator": {"implementation": "reinforce_return"}, "process_adv_shaping": process},
    )
    fields.update(actor)
    return PPOActorConfig(**fields)


@SETTINGS
@given(
    sizes=st.lists(st.integers(2, 6), min_size=1, max_size=4),
    seed=st.integers(0, 100_000),
    alpha=st.sampled_from([0.0, 0.1, 0.4, 2.0]),
    kappa=st.sampled_from([1.0, 2.0, 5.0]),
    split=st.booleans(),
)
def test_entropy_shaping_equals_the_per_token_definition(sizes, seed, alpha, kappa, split):
    groups = make_episode_groups(seed, sizes, binary=False)
    batch, meta = batch_of(groups, split=split)
    batch.pop("token_rewards")
    base = PPOActor(config(None)).compute_advantages(batch, meta)["advantages"]
    shaped = PPOActor(
        config({"implementation": "entropy_advantage", "kwargs": {"alpha": alpha, "kappa": kappa}})
    ).compute_advantages(batch, meta)
    mask = shaped["loss_mask"]
    entropy = batch["token_entropy"]
    B, T = base.shape
    for b in range(B):
        for t in range(T):
            a = float(base[b, t])
            want = eref.entropy_shaped(a, float(entropy[b, t + 1]), alpha, kappa) if mask[b, t] else a
            assert float(shaped["advantages"][b, t]) == pytest.approx(want, rel=1e-6, abs=1e-7), (b, t)
    assert bool((torch.sign(shaped["advantages"]) * torch.sign(base) >= 0).all())  # never reverses a sign


def test_entropy_shaping_applies_the_prm_shaping_first():
    groups = make_episode_groups(4, [3, 4], binary=True)
    batch, meta = batch_of(groups, split=False)
    batch["token_rewards"] = batch["token_rewards"] * 2 - 1  # a signed process signal for GVPO
    gvpo = PPOActor(config({"implementation": "gvpo", "kwargs": {"negative_scale": 0.5}})).compute_advantages(
        batch, meta
    )
    both = PPOActor(
        config(
            {"implementation": "entropy_advantage", "kwargs": {"then": "gvpo", "then_kwargs": {"negative_scale": 0.5}}}
        )
    ).compute_advantages(batch, meta)
    mask = both["loss_mask"].bool()
    entropy = torch.roll(batch["token_entropy"], -1, dims=1)
    a = gvpo["advantages"]
    want = torch.where(mask, a + torch.minimum(0.4 * entropy, a.abs() / 2.0), a)
    torch.testing.assert_close(both["advantages"], want)
    additive = PPOActor(config({"implementation": "entropy_advantage"})).compute_advantages(batch, meta)
    plain = PPOActor(config({"implementation": "additive"})).compute_advantages(batch, meta)["advantages"]
    torch.testing.assert_close(
        additive["advantages"], torch.where(mask, plain + torch.minimum(0.4 * entropy, plain.abs() / 2.0), plain)
    )


def test_entropy_shaping_errors():
    groups = make_episode_groups(1, [2, 2])
    batch, meta = batch_of(groups, split=False)
    actor = PPOActor(config({"implementation": "entropy_advantage"}))
    with pytest.raises(ValueError, match=r"'entropy_advantage'.*no 'token_entropy'"):
        actor.compute_advantages({k: v for k, v in batch.items() if k != "token_entropy"}, meta)
    bad = batch["token_entropy"].clone()
    bad[batch["loss_mask"].bool()] = -1.0
    with pytest.raises(ValueError, match=r"token_entropy: expected finite entropies >= 0"):
        actor.compute_advantages(dict(batch, token_entropy=bad), meta)
    for kwargs, message in (
        ({"kappa": 0.5}, "kappa must be a finite number >= 1"),
        ({"alpha": -1}, "alpha must"),
        ({"then": "x"}, "then must be one of"),
        ({"then": "additive", "then_kwargs": {"a": 1}}, "only 'gvpo' takes any"),
    ):
        with pytest.raises(ValueError, match=message):
            PPOActor(config({"implementation": "entropy_advantage", "kwargs": kwargs})).compute_advantages(batch, meta)
