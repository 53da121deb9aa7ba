"""No output is silently NaN or inf: the output guard, its bounds and its diagnosis (issue 14, class 1)."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch
from batch_factory import make_batch
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from test_advantage_default import configs

from areal_adv.api.cli_args import AdvantageConfig, ConfigError, NormConfig, PPOActorConfig, StageSpec
from areal_adv.trainer.ppo import advantage as advantage_module
from areal_adv.trainer.ppo import output_guard
from areal_adv.trainer.ppo.actor import PPOActor
from areal_adv.trainer.ppo.output_guard import GUARDED_FIELDS, NonFiniteOutputError, guard_outputs, output_bounds
from areal_adv.utils.kl import KLEstimator

FLOAT_OUTPUTS = (
    "advantages",
    "returns",
    "loss_mask",
    "logprobs",
    "kl_rewards",
    "tot_rewards",
    "rewards",
    "prox_logp",
    "mopd_behavior_logprobs",
)


def deep_snapshot(batch, meta):
    return {k: (v.clone() if torch.is_tensor(v) else copy.deepcopy(v)) for k, v in batch.items()}, copy.deepcopy(meta)


def assert_unchanged(batch, meta, before):
    tensors, meta_before = before
    assert batch.keys() == tensors.keys()
    for key, value in tensors.items():
        assert torch.equal(batch[key], value), key
    assert meta == meta_before


def assert_all_finite(out):
    for key in FLOAT_OUTPUTS:
        value = out.get(key)
        if torch.is_tensor(value) and value.is_floating_point():
            assert bool(torch.isfinite(value).all()), key


def huge_rewards(batch):
    batch["rewards"] = batch["rewards"] * 100.0 + 50.0


def extreme_values(batch):
    batch["values"] = torch.where(batch["values"] >= 0, 3e38, -3e38)


def divergent_logprobs(batch):
    batch["logprobs"] = torch.where(batch["loss_mask"].bool(), -50.0, 0.0)
    batch["ref_logp"] = torch.zeros_like(batch["ref_logp"])


@pytest.mark.parametrize(
    "cfg, edit, field, cause",
    [
        (dict(reward_clip=float("inf"), reward_scaling=1e38), huge_rewards, "tot_rewards", "actor.reward_scaling"),
        (
            dict(reward_clip=float("inf"), reward_scaling=1e38, kl_ctl=0.0, adv_norm=NormConfig()),
            huge_rewards,
            "tot_rewards",
            "finite actor.reward_clip",
        ),
        (dict(kl_ctl=1e38), divergent_logprobs, "kl_rewards", "actor.kl_ctl=1e+38"),
        (dict(), extreme_values, "returns", "values reach 3e+38"),
        (dict(gae_timestep_unit="turn"), extreme_values, "returns", "values reach"),
    ],
    ids=["clip-inf-scaling", "clip-inf-scaling-adv-norm", "kl-ctl-1e38", "values-3e38", "values-3e38-turn"],
)
def test_non_finite_outputs_are_reported_with_field_and_cause(cfg, edit, field, cause):
    batch, meta = make_batch(3)
    edit(batch)
    before = deep_snapshot(batch, meta)
    with pytest.raises(NonFiniteOutputError) as err:
        PPOActor(PPOActorConfig(**cfg)).compute_advantages(batch, meta)
    message = str(err.value)
    assert message.startswith(f"{field}: ") and "probable cause" in message and cause in message, message
    assert err.value.field == field
    assert_unchanged(batch, meta, before)


def test_k3_with_extreme_log_probs_is_finite_and_clamped():
    """±3e38 log-probs overflow the float32 log-ratio; k3 used to give exp(inf) - inf = NaN."""
    batch, meta = make_batch(4)
    batch["logprobs"] = torch.where(batch["loss_mask"].bool(), -3e38, 0.0)
    batch["ref_logp"] = torch.full_like(batch["ref_logp"], 3e38)
    out = PPOActor(PPOActorConfig(kl_estimator="k3", kl_ctl=0.1)).compute_advantages(batch, meta)
    assert_all_finite(out)
    active = out["loss_mask"].bool()
    assert torch.equal(out["kl_rewards"][active], torch.full_like(out["kl_rewards"][active], -1.0))


def test_k3_bound_on_the_log_ratio_changes_no_clamped_value():
    """Clamping the log-ratio to ±20 first is exact: k3 is past the ±10 clamp beyond |r| = 11."""
    r = torch.linspace(-60, 60, 240_001, dtype=torch.float32)
    out = KLEstimator("k3")(r, torch.zeros_like(r))
    truth = ((-r.double()).exp() - 1 + r.double()).clamp(-10, 10)  # float64, no bound on the log-ratio
    saturated = truth == 10
    assert bool(saturated[r.abs() >= 20].all()) and torch.equal(out[saturated], torch.full_like(out[saturated], 10.0))
    assert float((out.double() - truth).abs().max()) <= 2e-6  # the float32 rounding of e - 1 - r


@pytest.mark.parametrize("name", ["reward_norm", "adv_norm"])
def test_zero_eps_with_std_normalisation_is_rejected_at_config(name):
    with pytest.raises(ConfigError, match=rf"actor\.{name}\.eps: got 0\.0, expected a number > 0 when std_level"):
        PPOActorConfig(**{name: NormConfig(eps=0.0)})
    PPOActorConfig(**{name: NormConfig(eps=0.0, std_level=None)})  # no division, nothing to reject


def test_zero_eps_bypassing_validation_is_caught_by_the_guard():
    """The pipeline is public; a config mutated after validation still cannot return 0/0."""
    cfg = PPOActorConfig(kl_ctl=0.0, adv_norm=NormConfig())
    actor = PPOActor(cfg)
    object.__setattr__(actor.config.adv_norm, "eps", 0.0)
    batch, meta = make_batch(5, drop=("values", "token_rewards"))
    batch["rewards"] = torch.zeros_like(batch["rewards"])  # every advantage 0: std 0
    with pytest.raises(NonFiniteOutputError, match=r"advantages: .*actor\.adv_norm\.eps=0\.0"):
        advantage_module.run_advantage_pipeline(batch, meta, actor.config, actor.resolved)


def test_the_default_config_reads_no_output_tensor_again(monkeypatch):
    """The bounds prove the [B, T] outputs finite, so the guard only scans the [B] rewards."""
    scanned = []
    real = output_guard.all_finite
    monkeypatch.setattr(output_guard, "all_finite", lambda t: scanned.append(tuple(t.shape)) or real(t))
    batch, meta = make_batch(6)
    for cfg in (
        PPOActorConfig(),
        PPOActorConfig(kl_ctl=0.1, adv_norm=NormConfig(), gae_timestep_unit="turn"),
        PPOActorConfig(reward_norm=NormConfig(mean_level="group", std_level="group"), kl_ctl=0.0),
    ):
        scanned.clear()
        PPOActor(cfg).compute_advantages(batch, meta)
        assert scanned == [(batch["input_ids"].shape[0],)], cfg


def test_unbounded_fields_are_scanned(monkeypatch):
    """A custom estimator of unknown magnitude followed by normalisation: the result is read."""
    scanned = []
    real = output_guard.all_finite
    monkeypatch.setattr(output_guard, "all_finite", lambda t: scanned.append(tuple(t.shape)) or real(t))
    batch, meta = make_batch(7)
    cfg = PPOActorConfig(
        adv_norm=NormConfig(),
        advantage=AdvantageConfig(estimator=StageSpec("examples.custom_advantage.plugins.token_gae_turn_lambda")),
    )
    PPOActor(cfg).compute_advantages(batch, meta)
    assert tuple(batch["input_ids"].shape) in scanned


# --- properties --------------------------------------------------------------------------

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(
    cfg=configs(),
    seed=st.integers(0, 10_000),
    scale=st.sampled_from([1.0, 1e3, 1e6]),
    split=st.booleans(),
    estimator=st.sampled_from([None, "reinforce_return"]),
    mode=st.sampled_from(["additive", "gvpo"]),
)
def test_random_valid_configs_and_batches_give_finite_outputs(cfg, seed, scale, split, estimator, mode):
    batch, meta = make_batch(seed, split=split)
    for key in ("values", "token_rewards"):
        batch[key] = batch[key] * scale
    batch["rewards"] = batch["rewards"] * scale
    if split and cfg.overlong_reward_penalty:
        cfg = dataclasses.replace(cfg, overlong_reward_penalty=False)  # split rows must keep equal rewards
    if estimator is not None:
        cfg = dataclasses.replace(cfg, advantage=AdvantageConfig(estimator=StageSpec(estimator)))
    if not cfg.token_rewards_as_adv:
        mode = "additive"
    out = PPOActor(cfg).compute_advantages(batch, meta, advantage_shaping_mode=mode)
    assert_all_finite(out)


extreme_configs = st.builds(
    PPOActorConfig,
    reward_scaling=st.sampled_from([1.0, 1e20, 1e38]),
    reward_clip=st.sampled_from([20.0, 1e30, float("inf")]),
    reward_bias=st.sampled_from([0.0, -1e38]),
    kl_ctl=st.sampled_from([0.0, 0.1, 1e30, 1e38]),
    kl_estimator=st.sampled_from(["k1", "k2", "k3"]),
    reward_norm=st.sampled_from([None, NormConfig(mean_level="group", std_level="group", eps=1e-30), NormConfig()]),
    adv_norm=st.sampled_from([None, NormConfig(), NormConfig(eps=1e-38), NormConfig(mean_leave1out=True)]),
    gae_timestep_unit=st.sampled_from(["token", "turn"]),
    token_rewards_as_adv=st.booleans(),
)


@SETTINGS
@given(
    cfg=extreme_configs,
    seed=st.integers(0, 10_000),
    values=st.sampled_from([1.0, 1e18, 1e30, 3e38]),
    process=st.sampled_from([1.0, 1e36]),
    logp=st.sampled_from([1.0, 1e10, 3e38]),
)
def test_extreme_inputs_never_return_non_finite_outputs(cfg, seed, values, process, logp):
    """Either every output is finite, or NonFiniteOutputError names a field and a cause.

    The guard's bounds are also checked for soundness: a field they call safe is finite.
    """
    batch, meta = make_batch(seed)
    batch["values"] = (batch["values"] * values).clamp(-3e38, 3e38)
    batch["token_rewards"] = batch["token_rewards"] * process
    batch["logprobs"] = (batch["logprobs"] * logp).clamp(-3e38, 3e38)
    seen = {}
    with pytest.MonkeyPatch.context() as patch:  # record what the guard would see instead of guarding
        patch.setattr(advantage_module, "guard_outputs", lambda fields, ctx: seen.update(fields=fields, ctx=ctx))
        PPOActor(cfg).compute_advantages(batch, meta)
    fields, ctx = seen["fields"], seen["ctx"]
    bounds = output_bounds(fields, ctx)
    for name in GUARDED_FIELDS:
        if bounds[name].safe:
            assert bool(torch.isfinite(fields[name]).all()), (name, bounds[name])
    non_finite = [
        k
        for k in FLOAT_OUTPUTS
        if torch.is_tensor(fields.get(k))
        and fields[k].is_floating_point()
        and not bool(torch.isfinite(fields[k]).all())
    ]
    event(f"non-finite fields: {bool(non_finite)}; scanned: {sorted(n for n in GUARDED_FIELDS if not bounds[n].safe)}")
    if not non_finite:
        guard_outputs(fields, ctx)  # must not raise
        return
    with pytest.raises(NonFiniteOutputError) as err:
        guard_outputs(fields, ctx)
    assert err.value.field in non_finite and "probable cause" in str(err.value)


def test_a_rank_does_not_return_non_finite_outputs_from_another_ranks_overflow():
    """Batch statistics cross ranks, so the bounds must too: rank 0 raises instead of returning NaN."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from dist_launch import rank_envs, run_bounded

    worker = Path(__file__).resolve().parent / "dist_guard_worker.py"
    results = run_bounded([[sys.executable, str(worker)]] * 2, rank_envs(2), timeout=120, warm=True)
    logs = [out + err for _, out, err in results]
    assert all(code == 0 for code, _, _ in results), logs
    # both ranks' guards fire; the call-time agreement raises one CallFailure naming both on each rank
    agreed = (
        "raised CallFailure: PPOActor.compute_advantages: rank 0 failed in the output guard: NonFiniteOutputError: "
    )
    assert f"rank 0: {agreed}advantages:" in logs[0], logs[0]
    assert "values reach 3e+38 in magnitude (on some data-parallel rank" in logs[0], logs[0]
    assert f"rank 1: {agreed}" in logs[1] and "rank 1 failed in the output guard: NonFiniteOutputError:" in logs[1], (
        logs[1]
    )
