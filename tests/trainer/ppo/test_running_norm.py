"""`reward_norm` / `adv_norm` at level running: ROLL's RunningMoments, checkpointed, step after step.

Rewards: each step's scores enter the cumulative moments first, then every score
is (r − μ)/(std + eps) (ROLL's `reward_norm` with `norm_*_type: running`).
Advantages: the same over the step's active tokens (the pipeline's token
weighting). Both equal a plain loop written from ROLL's code across steps, and a
save → load → next call continues bit for bit.
"""

from __future__ import annotations

import io

import peer_reference as ref
import pytest
import selfplay_reference as sref
import torch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from areal_adv.api.cli_args import ConfigError, NormConfig, PPOActorConfig
from areal_adv.trainer.ppo.actor import PPOActor
from areal_adv.trainer.ppo.rewards.running_norm import batch_moments, merge_moments
from areal_adv.utils.data import concat_batch

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
RUNNING = NormConfig(mean_level="running", std_level="running", eps=1e-6)
MAX_DIFF = {"reward": 0.0, "advantage": 0.0}


def config(**fields) -> PPOActorConfig:
    base = dict(
        kl_ctl=0.0,
        reward_clip=1e9,
        reward_norm=None,
        adv_norm=None,
        advantage={"estimator": {"implementation": "reinforce_return"}},
    )
    return PPOActorConfig(**{**base, **fields})


def row_scores(out: dict) -> torch.Tensor:
    """Each row's normalised score: reinforce_return with γ 1 and no KL puts it on every generated token."""
    mask = out["loss_mask"].bool()
    first = mask.float().argmax(dim=1)
    return out["advantages"][torch.arange(mask.shape[0]), first].double()


def batches_st():
    return st.lists(
        st.tuples(st.lists(st.integers(1, 5), min_size=1, max_size=4), st.integers(0, 10_000)), min_size=1, max_size=5
    )


@SETTINGS
@given(steps=batches_st(), centre=st.booleans(), scale=st.booleans())
@example(steps=[([1], 0), ([2, 1], 1)], centre=True, scale=True)  # a first step of one sample: std stays 1
def test_running_reward_norm_equals_rolls_running_moments(steps, centre, scale):
    if not (centre or scale):
        return
    norm = NormConfig(mean_level="running" if centre else None, std_level="running" if scale else None, eps=1e-6)
    actor, reference = PPOActor(config(reward_norm=norm)), sref.RollRunningMoments()
    for sizes, seed in steps:
        batch, meta = concat_batch(ref.make_peer_groups(seed, sizes, binary=False, trailing_env=False))
        expected = torch.tensor(
            reference.normalise(batch["rewards"].double().tolist(), centre=centre, scale=scale), dtype=torch.float64
        )
        if reference.count <= 1 and scale:
            expected = torch.tensor(
                [x - (reference.mean if centre else 0.0) for x in batch["rewards"].double().tolist()],
                dtype=torch.float64,
            ) / (1.0 + 1e-6)  # one sample so far: ROLL divides by zero, we use std 1
        got = row_scores(actor.compute_advantages(batch, meta))
        MAX_DIFF["reward"] = max(MAX_DIFF["reward"], float((got - expected).abs().max()))
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    state = actor.stage_states["reward_norm"]
    assert (state.get("count"), state.get("mean")) == pytest.approx((reference.count, reference.mean), rel=1e-12)


@SETTINGS
@given(steps=batches_st())
def test_running_adv_norm_equals_rolls_running_moments_over_active_tokens(steps):
    plain, actor = PPOActor(config()), PPOActor(config(adv_norm=RUNNING))
    reference = sref.RollRunningMoments()
    for sizes, seed in steps:
        batch, meta = concat_batch(ref.make_peer_groups(seed, sizes, binary=False))
        raw = plain.compute_advantages(batch, meta)
        mask = raw["loss_mask"].bool()
        active = raw["advantages"][mask].double().tolist()
        normalised = reference.normalise(active)
        if reference.count <= 1:  # one active token so far: ROLL's std is inf, the stage's 1
            normalised = [(x - reference.mean) / (1.0 + 1e-6) for x in active]
        expected = torch.zeros_like(raw["advantages"], dtype=torch.float64)
        expected[mask] = torch.tensor(normalised, dtype=torch.float64)
        got = actor.compute_advantages(batch, meta)["advantages"].double()
        MAX_DIFF["advantage"] = max(MAX_DIFF["advantage"], float((got - expected).abs().max()))
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_running_state_save_load_next_call_is_bit_equal():
    cfg = config(reward_norm=RUNNING, adv_norm=RUNNING)
    batches = [concat_batch(ref.make_peer_groups(s, [3, 2, 4], binary=False)) for s in range(5)]
    first = PPOActor(cfg)
    for batch, meta in batches[:2]:
        first.compute_advantages(batch, meta)
    buffer = io.BytesIO()
    torch.save(first.state_dict(), buffer)
    buffer.seek(0)
    second = PPOActor(cfg)
    second.load_state_dict(torch.load(buffer, weights_only=True))
    for batch, meta in batches[2:]:
        a, b = first.compute_advantages(batch, meta), second.compute_advantages(batch, meta)
        assert torch.equal(a["advantages"], b["advantages"])
    assert first.state_fingerprints() == second.state_fingerprints()
    assert set(first.stage_states) == {"reward_norm", "adv_norm"}


def test_chan_merge_of_parts_equals_the_whole():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(101, generator=gen, dtype=torch.float64) * 3 + 1
    parts = [batch_moments(p) for p in (x[:40], x[40:40], x[40:])]
    n, mean, m2 = merge_moments(parts)
    whole = batch_moments(x)
    assert n == whole[0] and mean == pytest.approx(whole[1], rel=1e-14) and m2 == pytest.approx(whole[2], rel=1e-13)


def test_running_combines_only_with_running_or_null():
    with pytest.raises(ConfigError, match="mean_level='running' with std_level='batch'"):
        NormConfig(mean_level="running", std_level="batch")
    NormConfig(mean_level=None, std_level="running")
    with pytest.raises(ConfigError, match="mean_leave1out: true with mean_level='running'"):
        NormConfig(mean_level="running", std_level="running", mean_leave1out=True)


def test_the_preset_equals_rolls_loop_step_after_step():
    from pathlib import Path

    from areal_adv.api.cli_args import load_config

    preset = Path(__file__).resolve().parents[3] / "examples" / "presets" / "running_norm.yaml"
    actor, reference = PPOActor(load_config(preset).actor), sref.RollRunningMoments()
    for seed in range(30):
        batch, meta = concat_batch(ref.make_peer_groups(seed, [4, 3, 4, 2], binary=seed % 2 == 0, trailing_env=False))
        expected = torch.tensor(reference.normalise(batch["rewards"].double().tolist()), dtype=torch.float64)
        got = row_scores(actor.compute_advantages(batch, meta))
        MAX_DIFF["reward"] = max(MAX_DIFF["reward"], float((got - expected).abs().max()))
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
