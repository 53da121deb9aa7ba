"""Pluggable stages: config rules, resolution on the worker, and every run-time contract."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from batch_factory import make_batch
from hypothesis import given, settings
from hypothesis import strategies as st
from test_advantage_default import assert_same

from areal_adv.api.cli_args import (
    AdvantageConfig,
    ConfigError,
    NormConfig,
    PPOActorConfig,
    StageSpec,
    config_to_dict,
    config_to_yaml,
    load_config,
)
from areal_adv.trainer.ppo.actor import PPOActor
from areal_adv.trainer.ppo.advantage import AdvantageInputs
from areal_adv.trainer.ppo.checks.contracts import StageContractError
from areal_adv.utils.dynamic_import import PluginResolutionError

ROOT = Path(__file__).resolve().parents[3]
HERE = Path(__file__).resolve().parent

#: The default `actor.advantage` written out in full (docs/custom-advantage.md, the page's first block).
DEFAULT_ADVANTAGE_YAML = """\
actor:
  advantage:
    compute:
      implementation: default
      kwargs: {}
    outcome_reward_shaping: null
    estimator: null
    process_adv_shaping: null
"""

#: Turn GAE with GVPO process shaping (the `actor:` section of examples/custom_advantage/turn_gae_gvpo.yaml).
TURN_GAE_GVPO_YAML = """\
actor:
  token_rewards_as_adv: true
  advantage:
    estimator:
      implementation: turn_gae
      kwargs: {}
    process_adv_shaping:
      implementation: gvpo
      kwargs:
        negative_scale: 0.2
        zero_penalty: 0.4
"""


def actor_with(**advantage) -> PPOActor:
    specs = {k: (StageSpec(**v) if isinstance(v, dict) else v) for k, v in advantage.items()}
    return PPOActor(PPOActorConfig(advantage=AdvantageConfig(**specs)))


def snapshot(batch):
    return {k: (v.clone() if torch.is_tensor(v) else v) for k, v in batch.items()}


def assert_untouched(batch, before):
    assert batch.keys() == before.keys()
    for k, v in before.items():
        if torch.is_tensor(v):
            assert torch.equal(batch[k], v), k


# --- configuration (load time, no user code imported) ------------------------------------


def test_the_example_yamls_load_verbatim(tmp_path):
    for text in (DEFAULT_ADVANTAGE_YAML, TURN_GAE_GVPO_YAML):
        path = tmp_path / "c.yaml"
        path.write_text(text)
        cfg = load_config(path)
        assert isinstance(cfg.actor, PPOActorConfig)
    adv = cfg.actor.advantage
    assert adv.estimator.implementation == "turn_gae"
    assert adv.process_adv_shaping.kwargs == {"negative_scale": 0.2, "zero_penalty": 0.4}


def test_dotted_override_sets_a_null_stage():
    cfg = load_config(None, ["actor.advantage.estimator.implementation=turn_gae"])
    assert cfg.actor.advantage.estimator == StageSpec("turn_gae", {})


def test_config_round_trips_through_yaml_and_json(tmp_path):
    cfg = load_config(
        {
            "actor": {
                "gae_lambda": "vapo",
                "gae_lambda_kwargs": {"alpha": 0.3},
                "advantage": {
                    "outcome_reward_shaping": {"implementation": "plugin_fixtures.shift", "kwargs": {"offset": 1.5}}
                },
            }
        }
    )
    as_json = json.loads(json.dumps(config_to_dict(cfg)))
    assert load_config(as_json) == cfg
    (tmp_path / "c.yaml").write_text(config_to_yaml(cfg))
    assert load_config(tmp_path / "c.yaml") == cfg


def test_loading_never_imports_user_code():
    cfg = load_config(None, ["actor.advantage.estimator.implementation=no_such_pkg.mod.fn"])
    assert cfg.actor.advantage.estimator.implementation == "no_such_pkg.mod.fn"
    assert "no_such_pkg" not in sys.modules


@pytest.mark.parametrize(
    "overrides, needle",
    [
        (
            [
                "actor.advantage.process_adv_shaping.implementation=auto",
                "actor.advantage.process_adv_shaping.kwargs.x=1",
            ],
            "'auto' accepts no kwargs",
        ),
        (["actor.advantage.compute.kwargs.x=1"], "default compute takes no kwargs"),
        (
            ["actor.advantage.compute.implementation=pkg.full", "actor.advantage.estimator.implementation=turn_gae"],
            "cannot be combined with stage config",
        ),
        (
            ["actor.advantage.process_adv_shaping.implementation=gvpo", "actor.token_rewards_as_adv=false"],
            "requires actor.token_rewards_as_adv=true",
        ),
        (
            ["actor.advantage.process_adv_shaping.implementation=process_weighted", "actor.mask_no_eos_with_zero=true"],
            "requires actor.mask_no_eos_with_zero=false",
        ),
        (
            [
                "actor.advantage.process_adv_shaping.implementation=gvpo",
                "actor.advantage.process_adv_shaping.kwargs.bogus=1",
            ],
            "unknown gvpo parameters",
        ),
        (
            [
                "actor.advantage.process_adv_shaping.implementation=gvpo",
                "actor.advantage.process_adv_shaping.kwargs.zero_penalty=-1",
            ],
            "zero_penalty",
        ),
        (["actor.advantage.estimator.implementation=gae"], "expected one of ['auto', 'token_gae', 'turn_gae'"),
        (
            [
                "actor.advantage.outcome_reward_shaping.implementation=identity",
                "actor.advantage.outcome_reward_shaping.kwargs.a=1",
            ],
            "takes no kwargs",
        ),
        (["actor.advantage.estimator.foo=1"], "actor.advantage.estimator.foo"),
    ],
)
def test_bad_configs_fail_at_load_with_the_key(overrides, needle):
    with pytest.raises(ConfigError) as err:
        load_config(None, overrides)
    assert needle in str(err.value)


def test_kwargs_must_be_json_serialisable():
    with pytest.raises(ConfigError, match=r"actor.advantage.estimator.kwargs.x.*JSON"):
        StageSpec("turn_gae", {"x": {1, 2}}).validate("estimator")
    with pytest.raises(ConfigError, match="finite"):
        StageSpec("pkg.fn", {"x": float("nan")}).validate("estimator")


# --- resolution on the worker --------------------------------------------------------------


@pytest.mark.parametrize(
    "path, kwargs, needle",
    [
        ("no_such_module_xyz.fn", {}, "no module named 'no_such_module_xyz'"),
        ("plugin_fixtures.missing", {}, "has no attribute 'missing'"),
        ("plugin_fixtures.not_callable", {}, "not callable"),
        ("plugin_fixtures.shift", {}, "missing a required argument: 'offset'"),
        ("plugin_fixtures.halve", {"factor": 2}, "unexpected keyword argument 'factor'"),
    ],
)
def test_resolution_errors_name_stage_path_and_cause(path, kwargs, needle):
    with pytest.raises(PluginResolutionError) as err:
        actor_with(outcome_reward_shaping={"implementation": path, "kwargs": kwargs})
    message = str(err.value)
    assert "actor.advantage.outcome_reward_shaping" in message and path in message and needle in message


def test_a_serialised_config_resolves_in_a_fresh_process(tmp_path):
    cfg = PPOActorConfig(
        reward_norm=NormConfig(mean_level="group", std_level="group"),
        advantage=AdvantageConfig(outcome_reward_shaping=StageSpec("plugin_fixtures.shift", {"offset": 0.25})),
    )
    (tmp_path / "cfg.json").write_text(json.dumps(config_to_dict(cfg)))
    script = textwrap.dedent(
        f"""
        import json, sys, torch
        sys.path.insert(0, {str(HERE)!r})
        from areal_adv.api.cli_args import actor_config_from_dict
        from areal_adv.trainer.ppo.actor import PPOActor
        from batch_factory import make_batch
        cfg = actor_config_from_dict(json.load(open({str(tmp_path / "cfg.json")!r})))
        actor = PPOActor(cfg)
        batch, meta = make_batch(4)
        torch.save(actor.compute_advantages(batch, meta)["advantages"], {str(tmp_path / "adv.pt")!r})
        print(actor.resolved.outcome.implementation)
        """
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "plugin_fixtures.shift"
    batch, meta = make_batch(4)
    local = PPOActor(cfg).compute_advantages(batch, meta)["advantages"]
    torch.testing.assert_close(torch.load(tmp_path / "adv.pt"), local)


# --- outcome stage -------------------------------------------------------------------------


def test_scale_outcome_plugin_halves_rewards():
    batch, meta = make_batch(2)
    custom = actor_with(
        outcome_reward_shaping={
            "implementation": "examples.custom_advantage.plugins.scale_outcome",
            "kwargs": {"factor": 0.5},
        }
    )
    out = custom.compute_advantages(batch, meta)
    halved = dict(batch, rewards=batch["rewards"] * 0.5)
    ref = PPOActor(PPOActorConfig()).compute_advantages(halved, meta)
    assert_same(out, ref)


def test_identity_keeps_integer_rewards_integer():
    batch, meta = make_batch(1, integer_rewards=True)
    for actor in (PPOActor(PPOActorConfig()), actor_with(outcome_reward_shaping={"implementation": "identity"})):
        out = actor.compute_advantages(batch, meta)
        assert out["rewards"].dtype == torch.long
        assert torch.equal(out["rewards"], batch["rewards"])


@pytest.mark.parametrize(
    "path, needle",
    [
        ("plugin_fixtures.wrong_shape", "rewards: returned shape"),
        ("plugin_fixtures.nan_rewards", "non-finite"),
        ("plugin_fixtures.int_rewards", "expected a floating dtype"),
        ("plugin_fixtures.not_a_result", "expected OutcomeResult"),
        ("plugin_fixtures.inplace_outcome", "modified its inputs in place"),
        ("plugin_fixtures.adds_key", "modified its inputs in place"),
        ("plugin_fixtures.raises", "raised RuntimeError: boom"),
    ],
)
def test_outcome_contract_violations(path, needle):
    batch, meta = make_batch(3)
    before = snapshot(batch)
    with pytest.raises(StageContractError) as err:
        actor_with(outcome_reward_shaping={"implementation": path}).compute_advantages(batch, meta)
    assert "outcome_reward_shaping" in str(err.value) and path in str(err.value) and needle in str(err.value)
    assert_untouched(batch, before)


GROUP_NORM = NormConfig(mean_level="group", std_level="group")


def test_custom_outcome_with_explicit_references_must_return_them():
    batch, meta = make_batch(6, split=True, explicit_refs=True)
    cfg = PPOActorConfig(
        reward_norm=GROUP_NORM, advantage=AdvantageConfig(outcome_reward_shaping=StageSpec("plugin_fixtures.halve"))
    )
    with pytest.raises(StageContractError, match="must return OutcomeResult.normalization_rewards"):
        PPOActor(cfg).compute_advantages(batch, meta)


def test_shaped_references_one_per_logical_rollout():
    batch, meta = make_batch(6, split=True, explicit_refs=True)
    cfg = PPOActorConfig(
        reward_norm=GROUP_NORM,
        advantage=AdvantageConfig(outcome_reward_shaping=StageSpec("plugin_fixtures.refs_wrong_count")),
    )
    with pytest.raises(StageContractError, match=r"normalization_rewards: returned shape"):
        PPOActor(cfg).compute_advantages(batch, meta)


def test_shaped_references_drive_normalisation():
    """Scaling rows and references by f equals scaling the batch and its references by f."""
    from areal_adv.utils.data import RolloutGroup, TrajBatchMeta

    batch, meta = make_batch(8, split=True, explicit_refs=True)
    plugin = "examples.custom_advantage.plugins.scale_outcome_with_references"
    cfg = PPOActorConfig(
        reward_norm=NormConfig(mean_level="group", std_level=None),
        advantage=AdvantageConfig(outcome_reward_shaping=StageSpec(plugin, {"factor": 3.0})),
    )
    out = PPOActor(cfg).compute_advantages(batch, meta)
    groups = tuple(RolloutGroup(g.row_counts, g.rewards * 3.0) for g in meta.rollout_groups)
    meta3 = TrajBatchMeta(meta.n_trajs, meta.traj_group_sizes, meta.traj_seqlens, groups)
    ref = PPOActor(PPOActorConfig(reward_norm=cfg.reward_norm)).compute_advantages(
        dict(batch, rewards=batch["rewards"] * 3.0), meta3
    )
    assert_same(out, ref)


def test_unequal_rows_without_references_are_rejected():
    batch, meta = make_batch(9, split=True)
    cfg = PPOActorConfig(
        reward_norm=GROUP_NORM,
        advantage=AdvantageConfig(outcome_reward_shaping=StageSpec("plugin_fixtures.per_row_noise")),
    )
    if all(c == 1 for g in meta.rollout_groups for c in g.row_counts):
        pytest.skip("seed produced no split rollout")
    with pytest.raises(ValueError, match="have different rewards"):
        PPOActor(cfg).compute_advantages(batch, meta)


def test_shaped_references_need_concat_batch_metadata():
    batch, _ = make_batch(6)
    cfg = PPOActorConfig(
        reward_norm=NormConfig(),
        advantage=AdvantageConfig(
            outcome_reward_shaping=StageSpec(
                "examples.custom_advantage.plugins.scale_outcome_with_references", {"factor": 1.0}
            )
        ),
    )
    # Without rollout groups the plugin returns no references; force them with a wrapper.
    import plugin_fixtures

    from areal_adv.trainer.ppo.advantage import OutcomeResult

    plugin_fixtures.with_refs = lambda inputs: OutcomeResult(
        inputs.data["rewards"].float(), inputs.data["rewards"].float()
    )
    cfg.advantage.outcome_reward_shaping = StageSpec("plugin_fixtures.with_refs")
    with pytest.raises(StageContractError, match="complete concat_batch metadata"):
        PPOActor(cfg).compute_advantages(batch)  # no meta: synthesised, incomplete


# --- estimator stage -----------------------------------------------------------------------


def test_explicit_estimator_overrides_timestep_unit_and_lambda_sees_its_unit():
    import plugin_fixtures

    batch, meta = make_batch(12)
    cfg = PPOActorConfig(
        gae_timestep_unit="token",
        gae_lambda="plugin_fixtures.record_lambda",
        gae_lambda_kwargs={"value": 0.8},
        advantage=AdvantageConfig(estimator=StageSpec("turn_gae")),
    )
    out = PPOActor(cfg).compute_advantages(batch, meta)
    assert plugin_fixtures.SEEN["timestep_unit"] == "turn"
    assert torch.equal(plugin_fixtures.SEEN["timestep_lengths"], plugin_fixtures.SEEN["turn_counts"])
    turn_cfg = PPOActorConfig(gae_timestep_unit="turn", gae_lambda=0.8)
    assert_same(out, PPOActor(turn_cfg).compute_advantages(batch, meta))
    cfg2 = PPOActorConfig(
        gae_timestep_unit="turn",
        gae_lambda="plugin_fixtures.record_lambda",
        advantage=AdvantageConfig(estimator=StageSpec("token_gae")),
    )
    PPOActor(cfg2).compute_advantages(batch, meta)
    assert plugin_fixtures.SEEN["timestep_unit"] == "token"
    assert torch.equal(plugin_fixtures.SEEN["timestep_lengths"], plugin_fixtures.SEEN["effective_token_lengths"])


def test_turn_gae_needs_turn_ids():
    batch, meta = make_batch(12, drop=("turn_ids",))
    with pytest.raises(ValueError, match="turn_ids"):
        actor_with(estimator={"implementation": "turn_gae"}).compute_advantages(batch, meta)


def test_turn_kl_reaches_advantages_not_returns():
    batch, meta = make_batch(13)
    outs = [
        PPOActor(PPOActorConfig(gae_timestep_unit="turn", kl_ctl=k)).compute_advantages(batch, meta) for k in (0.0, 0.5)
    ]
    torch.testing.assert_close(outs[0]["returns"], outs[1]["returns"], rtol=0, atol=0)
    assert not torch.allclose(outs[0]["advantages"], outs[1]["advantages"])
    token = [PPOActor(PPOActorConfig(kl_ctl=k)).compute_advantages(batch, meta) for k in (0.0, 0.5)]
    assert not torch.allclose(token[0]["returns"], token[1]["returns"])


def test_custom_estimator_with_compute_gae_lambda():
    """The example estimator resolves `vapo` in turn units even though it runs token GAE."""
    batch, meta = make_batch(14)
    cfg = load_config(ROOT / "examples/custom_advantage/custom_estimator.yaml").actor
    out = PPOActor(cfg).compute_advantages(batch, meta)
    # Same token GAE, with a lambda function that computes vapo from turn counts directly.
    # (the snippet builds on examples/ppo_token_gae.yaml: the references keep that run's actor settings)
    plain = dataclasses.replace(cfg, advantage=AdvantageConfig())
    ref_cfg = dataclasses.replace(plain, gae_lambda="plugin_fixtures.vapo_from_turns", gae_lambda_kwargs={"alpha": 0.5})
    ref = PPOActor(ref_cfg).compute_advantages(batch, meta)
    assert_same(out, ref)
    token_unit = PPOActor(plain).compute_advantages(batch, meta)
    assert not torch.allclose(out["advantages"], token_unit["advantages"])


@pytest.mark.parametrize(
    "path, needle",
    [
        ("plugin_fixtures.estimator_bad_shape", "advantages: returned shape"),
        ("plugin_fixtures.estimator_nan", "non-finite"),
        ("plugin_fixtures.estimator_inplace", "modified its inputs in place"),
        ("plugin_fixtures.estimator_tuple", "expected TemporalResult"),
    ],
)
def test_estimator_contract_violations(path, needle):
    batch, meta = make_batch(15)
    before = snapshot(batch)
    with pytest.raises(StageContractError) as err:
        actor_with(estimator={"implementation": path}).compute_advantages(batch, meta)
    assert "'estimator'" in str(err.value) and needle in str(err.value)
    assert_untouched(batch, before)


# --- process stage -------------------------------------------------------------------------


def test_explicit_process_beats_call_time_mode():
    batch, meta = make_batch(16)
    batch["token_rewards"] = batch["token_rewards"] - 0.5
    explicit = actor_with(process_adv_shaping={"implementation": "gvpo"})
    out = explicit.compute_advantages(batch, meta, advantage_shaping_mode="process_weighted")
    ref = PPOActor(PPOActorConfig()).compute_advantages(batch, meta, advantage_shaping_mode="gvpo")
    assert_same(out, ref)


def test_explicit_gvpo_kwargs_override_legacy_and_keep_the_rest():
    batch, meta = make_batch(17)
    batch["token_rewards"] = batch["token_rewards"] - 0.5
    explicit = actor_with(process_adv_shaping={"implementation": "gvpo", "kwargs": {"negative_scale": 0.7}})
    out = explicit.compute_advantages(
        batch, meta, advantage_shaping_mode="gvpo", gvpo_negative_scale=0.1, gvpo_zero_penalty=0.9
    )
    ref = PPOActor(PPOActorConfig()).compute_advantages(
        batch, meta, advantage_shaping_mode="gvpo", gvpo_negative_scale=0.7, gvpo_zero_penalty=0.9
    )
    assert_same(out, ref)


def test_custom_process_stage_and_contract():
    batch, meta = make_batch(18)
    base = PPOActor(PPOActorConfig()).compute_advantages(batch, meta, advantage_shaping_mode="additive")
    doubled = actor_with(process_adv_shaping={"implementation": "plugin_fixtures.process_double"}).compute_advantages(
        batch, meta
    )
    no_prm = PPOActor(PPOActorConfig()).compute_advantages(
        {k: v for k, v in batch.items() if k != "token_rewards"}, meta
    )
    torch.testing.assert_close(doubled["advantages"], no_prm["advantages"] * 2)
    torch.testing.assert_close(doubled["returns"], base["returns"])
    with pytest.raises(StageContractError, match="advantages: returned shape"):
        actor_with(process_adv_shaping={"implementation": "plugin_fixtures.process_bad"}).compute_advantages(
            batch, meta
        )


def test_call_time_mode_requirements():
    batch, meta = make_batch(19)
    with pytest.raises(ValueError, match="token_rewards_as_adv=true"):
        PPOActor(PPOActorConfig(token_rewards_as_adv=False)).compute_advantages(
            batch, meta, advantage_shaping_mode="gvpo"
        )
    with pytest.raises(ValueError, match="mask_no_eos_with_zero=false"):
        PPOActor(PPOActorConfig(mask_no_eos_with_zero=True)).compute_advantages(
            batch, meta, advantage_shaping_mode="process_weighted"
        )
    with pytest.raises(ValueError, match="advantage_shaping_mode"):
        PPOActor(PPOActorConfig()).compute_advantages(batch, meta, advantage_shaping_mode="bogus")


# --- full replacement ----------------------------------------------------------------------


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), split=st.booleans(), unit=st.sampled_from(["token", "turn"]))
def test_default_replica_full_replacement_equals_default(seed, split, unit):
    batch, meta = make_batch(seed, split=split)
    kw = dict(reward_norm=GROUP_NORM, adv_norm=NormConfig(), gae_timestep_unit=unit, kl_ctl=0.1)
    default = PPOActor(PPOActorConfig(**kw)).compute_advantages(batch, meta)
    replica = PPOActor(
        PPOActorConfig(
            **kw, advantage=AdvantageConfig(compute=StageSpec("examples.custom_advantage.plugins.default_replica"))
        )
    ).compute_advantages(batch, meta)
    assert_same(replica, default)


@pytest.mark.parametrize("key", ["input_ids", "values", "original_rewards"])
def test_full_replacement_extras_are_restricted(key):
    batch, meta = make_batch(20)
    with pytest.raises(StageContractError, match="extras may only hold"):
        actor_with(
            compute={"implementation": "plugin_fixtures.replace_with_extra", "kwargs": {"key": key}}
        ).compute_advantages(batch, meta)


def test_full_replacement_mask_and_shapes_checked():
    batch, meta = make_batch(20)
    with pytest.raises(StageContractError, match="binary"):
        actor_with(compute={"implementation": "plugin_fixtures.replace_non_binary_mask"}).compute_advantages(
            batch, meta
        )
    with pytest.raises(StageContractError, match="returns: returned shape"):
        actor_with(compute={"implementation": "plugin_fixtures.replace_wrong_shape"}).compute_advantages(batch, meta)


def test_full_replacement_reads_call_time_shaping_by_its_flat_names():
    import plugin_fixtures

    batch, meta = make_batch(21)
    actor = actor_with(compute={"implementation": "plugin_fixtures.replace_recording_shaping"})
    actor.compute_advantages(batch, meta, advantage_shaping_mode="gvpo", gvpo_negative_scale=0.3)
    flat, shaping = plugin_fixtures.SEEN_SHAPING[-1]
    assert flat == ("gvpo", 0.3, 0.4, 1e-6)
    assert flat == (shaping.mode, shaping.negative_scale, shaping.zero_penalty, shaping.zero_eps)
    assert AdvantageInputs.gvpo_zero_eps.name == "zero_eps"  # on the class: the attribute itself


def test_self_contained_replacement_owns_alignment():
    batch, meta = make_batch(22)
    out = actor_with(
        compute={"implementation": "examples.custom_advantage.plugins.sequence_reinforce"}
    ).compute_advantages(batch, meta)
    assert torch.equal(out["loss_mask"], torch.roll(batch["loss_mask"].float(), -1, -1))
    assert torch.equal(out["input_ids"], batch["input_ids"])


# --- the default configuration -------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    unit=st.sampled_from(["token", "turn"]),
    mode=st.sampled_from(["additive", "gvpo", "process_weighted"]),
)
def test_null_auto_and_builtin_stage_configs_are_identical(seed, unit, mode):
    batch, meta = make_batch(seed)
    kw = dict(reward_norm=GROUP_NORM, adv_norm=NormConfig(), gae_timestep_unit=unit, kl_ctl=0.1)
    variants = [
        AdvantageConfig(),
        AdvantageConfig(
            outcome_reward_shaping=StageSpec("auto"), estimator=StageSpec("auto"), process_adv_shaping=StageSpec("auto")
        ),
        AdvantageConfig(outcome_reward_shaping=StageSpec("identity"), estimator=StageSpec(f"{unit}_gae")),
    ]
    outs = [
        PPOActor(PPOActorConfig(**kw, advantage=a)).compute_advantages(batch, meta, advantage_shaping_mode=mode)
        for a in variants
    ]
    for other in outs[1:]:
        for key in ("advantages", "returns", "tot_rewards", "kl_rewards", "loss_mask", "logprobs"):
            assert torch.equal(outs[0][key], other[key]), key
