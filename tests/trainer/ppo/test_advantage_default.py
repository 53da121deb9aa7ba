"""The default pipeline equals the plain-loop reference (advantage.md §4) on random batches."""

from __future__ import annotations

import pytest
import torch
from advantage_reference import ref_pipeline
from batch_factory import make_batch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from areal_adv.api.cli_args import NormConfig, PPOActorConfig
from areal_adv.trainer.ppo.actor import PPOActor

OUT_KEYS = (
    "advantages",
    "returns",
    "loss_mask",
    "logprobs",
    "kl_rewards",
    "tot_rewards",
    "prox_logp",
    "is_truncated",
    "rewards",
)


def assert_same(out, ref, keys=OUT_KEYS):
    for key in keys:
        a, b = out[key], ref[key]
        if a is None or b is None:
            assert a is None and b is None, key
            continue
        if a.dtype == torch.bool or b.dtype == torch.bool:
            assert torch.equal(a.bool(), b.bool()), key
            continue
        torch.testing.assert_close(a.double(), b.double(), rtol=1e-5, atol=1e-5, msg=lambda m, key=key: f"{key}: {m}")


norms = st.one_of(
    st.none(),
    st.builds(
        NormConfig,
        mean_level=st.sampled_from(["batch", "group", None]),
        std_level=st.sampled_from(["batch", "group", None]),
        mean_leave1out=st.booleans(),
        std_unbiased=st.booleans(),
        eps=st.sampled_from([1e-5, 1e-2]),
    ),
)


@st.composite
def configs(draw, unit=None):
    penalty = draw(st.booleans())
    return PPOActorConfig(
        reward_bias=draw(st.sampled_from([0.0, -0.5])),
        reward_scaling=draw(st.sampled_from([1.0, 2.0])),
        reward_clip=draw(st.sampled_from([20.0, 0.7])),
        reward_norm=draw(norms),
        adv_norm=draw(norms),
        kl_ctl=draw(st.sampled_from([0.0, 0.1])),
        kl_estimator=draw(st.sampled_from(["k1", "k2", "k3"])),
        discount=draw(st.sampled_from([1.0, 0.9])),
        gae_lambda=draw(st.sampled_from([1.0, 0.95, 0.0])),
        gae_timestep_unit=unit or draw(st.sampled_from(["token", "turn"])),
        mask_no_eos_with_zero=draw(st.booleans()),
        overlong_reward_penalty=penalty,
        overlong_tokens=3 if penalty else None,
        overlong_penalty_factor=0.5 if penalty else None,
        max_new_tokens=8,
        token_rewards_as_adv=draw(st.booleans()),
    )


SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def split_counterexample_config() -> PPOActorConfig:
    """Issue 21's chance failure (seed 376, split rollouts): two logical rollouts of one group with rewards 7e-4
    apart, biased group std 3.6e-4; the rows' float32 (r + bias) against the references' float64 was off 1.6e-4."""
    return PPOActorConfig(
        reward_bias=-0.5,
        reward_scaling=1.0,
        reward_clip=20.0,
        adv_norm=None,
        kl_ctl=0.0,
        reward_norm=NormConfig(mean_level="group", std_level="group", std_unbiased=False, eps=1e-5),
        discount=1.0,
        gae_lambda=1.0,
        max_new_tokens=8,
    )


@SETTINGS
@given(
    cfg=configs(),
    seed=st.integers(0, 10_000),
    integer=st.booleans(),
    drop=st.sampled_from([(), ("values",), ("ref_logp", "is_truncated"), ("token_rewards",)]),
)
def test_default_pipeline_equals_reference(cfg, seed, integer, drop):
    batch, meta = make_batch(seed, integer_rewards=integer, drop=drop)
    out = PPOActor(cfg).compute_advantages(batch, meta)
    assert_same(out, ref_pipeline(batch, meta, cfg))


@SETTINGS
@given(cfg=configs(), seed=st.integers(0, 10_000), explicit=st.booleans())
@example(cfg=split_counterexample_config(), seed=376, explicit=False)
def test_split_rollouts_equal_reference(cfg, seed, explicit):
    batch, meta = make_batch(seed, split=True, explicit_refs=explicit)
    if cfg.overlong_reward_penalty and not explicit:
        # Rows of a logical rollout differ after the length penalty without references.
        cfg.overlong_reward_penalty = False
    out = PPOActor(cfg).compute_advantages(batch, meta)
    assert_same(out, ref_pipeline(batch, meta, cfg))


@SETTINGS
@given(
    seed=st.integers(0, 10_000),
    mode=st.sampled_from(["additive", "gvpo", "process_weighted"]),
    scale=st.sampled_from([0.0, 0.3]),
    signed=st.booleans(),
)
def test_call_time_prm_modes_equal_reference(seed, mode, scale, signed):
    cfg = PPOActorConfig(adv_norm=NormConfig(), kl_ctl=0.05)
    batch, meta = make_batch(seed)
    if signed and mode != "process_weighted":
        batch["token_rewards"] = batch["token_rewards"] - 0.5
    gvpo = (scale, 0.4, 1e-6)
    out = PPOActor(cfg).compute_advantages(batch, meta, advantage_shaping_mode=mode, gvpo_negative_scale=scale)
    assert_same(out, ref_pipeline(batch, meta, cfg, mode=mode, gvpo=gvpo))


def test_legacy_fixed_group_size_without_metadata():
    cfg = PPOActorConfig(
        reward_norm=NormConfig(mean_level="group", std_level="group", group_size=2),
        adv_norm=NormConfig(mean_level="group", std_level=None, group_size=2),
    )
    batch, _ = make_batch(3, n_groups=1, max_group=1)
    batch, _ = make_batch(5, n_groups=4, max_group=1)  # 4 rows, no metadata passed
    out = PPOActor(cfg).compute_advantages(batch)
    assert_same(out, ref_pipeline(batch, None, cfg))


@pytest.mark.parametrize("decoupled,recompute", [(False, False), (False, True), (True, False), (True, True)])
def test_logprob_modes(decoupled, recompute):
    cfg = PPOActorConfig(use_decoupled_loss=decoupled, recompute_logprob=recompute, kl_ctl=0.2)
    batch, meta = make_batch(11)
    batch["prox_logp"] = -torch.rand_like(batch["logprobs"])
    out = PPOActor(cfg).compute_advantages(batch, meta)
    assert_same(out, ref_pipeline(batch, meta, cfg))
    if decoupled:  # passed through as a copy: editing the output never edits the caller's batch
        assert torch.equal(out["prox_logp"], batch["prox_logp"])
        assert out["prox_logp"].untyped_storage().data_ptr() != batch["prox_logp"].untyped_storage().data_ptr()


def test_list_of_groups_equals_concatenated_batch():
    from batch_factory import make_groups

    from areal_adv.utils.data import concat_batch

    cfg = PPOActorConfig(reward_norm=NormConfig(mean_level="group", std_level="group"), adv_norm=NormConfig())
    groups = make_groups(21)
    out_list = PPOActor(cfg).compute_advantages(groups)
    batch, meta = concat_batch(groups)
    out_batch = PPOActor(cfg).compute_advantages(batch, meta)
    assert_same(out_list, out_batch)


@pytest.mark.parametrize(
    "compute",
    [None, "areal_adv.trainer.ppo.advantage.compute_default_advantages"],
    ids=["pipeline", "full-replacement"],
)
def test_total_rewards_is_the_output_name_and_tot_rewards_its_areal_alias(compute):
    batch, meta = make_batch(0)
    config = PPOActorConfig(kl_ctl=0.1)
    if compute is not None:
        config.advantage.compute.implementation = compute
    out = PPOActor(config).compute_advantages(batch, meta)
    assert out["total_rewards"] is out["tot_rewards"]
    ref = ref_pipeline(batch, meta, PPOActorConfig(kl_ctl=0.1))
    torch.testing.assert_close(out["total_rewards"].double(), ref["tot_rewards"].double(), rtol=1e-5, atol=1e-5)
