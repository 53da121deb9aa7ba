"""The pipeline inside the real verl 0.9.1: registry plugin, equality with verl's estimators, the wrapper.

Everything goes through verl's own `compute_advantage` (`verl.trainer.ppo.ray_trainer`),
the function verl's trainers call, with the DataProto layout they build
(`verl_batches.py`). Equalities are token by token on the response mask, max
absolute difference <= 1e-5. Deliberate differences kept out of the comparisons
(docs/algorithms.md): singleton groups (groups here have >= 2 responses) and the
whitening eps placement (batches with token variance < 1e-3 are skipped).
"""

from __future__ import annotations

import sys
from importlib.metadata import entry_points
from pathlib import Path

import integration_plugins
import pytest
import torch
import verl_batches as vb
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf
from verl.trainer.ppo import core_algos, ray_trainer

from areal_adv.api.cli_args import ConfigError
from areal_adv.integrations import verl as areal_verl
from areal_adv.integrations.response_layout import LayoutError
from areal_adv.utils.dynamic_import import PluginResolutionError

ROOT = Path(__file__).resolve().parents[2]
PRESETS = ROOT / "examples" / "presets"
SETTINGS = settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
sizes_st = st.lists(st.integers(2, 6), min_size=1, max_size=4)
VERL = areal_verl.verl_compute_advantage()  # verl's own, whatever a test patches


def algo(preset: str | Path, *overrides: str, **extra) -> object:
    """verl's `algorithm` section as its trainer passes it (a DictConfig), naming our pipeline."""
    path = preset if isinstance(preset, Path) else PRESETS / f"{preset}.yaml"
    return OmegaConf.create(
        {
            "gamma": 1.0,
            "lam": 1.0,
            "use_pf_ppo": False,
            "norm_adv_by_std_in_grpo": True,
            "areal_config": str(path),
            "areal_overrides": list(overrides),
            **extra,
        }
    )


def max_diff(ours: torch.Tensor, theirs: torch.Tensor, mask: torch.Tensor) -> float:
    return float(((ours.double() - theirs.double()) * mask).abs().max())


def whitenable(values: torch.Tensor, mask: torch.Tensor) -> bool:
    picked = values[mask.bool()].double()
    var = float(picked.var()) if picked.numel() > 1 else 0.0
    return var == 0.0 or var >= 1e-3


# ---------------------------------------------------------------------------
# Registration through verl's plugin entry points
# ---------------------------------------------------------------------------


def test_entry_point_registered_the_estimator_when_verl_was_imported():
    points = [ep for ep in entry_points(group="verl.plugins") if ep.name == "areal"]
    assert [ep.value for ep in points] == ["areal_adv.integrations.verl.plugin"]
    assert "areal_adv.integrations.verl.plugin" in sys.modules  # imported by `import verl`, not by this test
    assert core_algos.get_adv_estimator_fn("areal") is areal_verl.areal_advantage
    areal_verl.register()  # idempotent
    assert core_algos.ADV_ESTIMATOR_REGISTRY["areal"] is areal_verl.areal_advantage


# ---------------------------------------------------------------------------
# verl's compute_advantage(adv_estimator="areal") == verl's built-in estimators
# ---------------------------------------------------------------------------

REGISTRY_CASES = {
    # our preset, dotted overrides -> verl estimator, compute_advantage kwargs, whitened?, returns compared?
    # (verl's reinforce_plus_plus_baseline returns its whitened advantages as "returns"; ours are the
    # returns before whitening, and verl reads returns only for a critic, which these estimators lack.)
    "grpo": ((), "grpo", {}, False, True),
    "dr_grpo": ((), "grpo", {"norm_adv_by_std_in_grpo": False}, False, True),
    "rloo": ((), "rloo", {}, False, True),
    "reinforce_plus_plus": (
        ("actor.kl_ctl=0.0", "actor.adv_norm.std_unbiased=true"),
        "reinforce_plus_plus",
        {},
        True,
        True,
    ),
    "reinforce_plus_plus_baseline": (
        ("actor.adv_norm.std_unbiased=true",),
        "reinforce_plus_plus_baseline",
        {},
        True,
        False,
    ),
    "opo": ((), "opo", {}, False, True),
    "remax": (("actor.kl_ctl=0.0",), "remax", {}, False, False),
}


@pytest.mark.parametrize("preset", sorted(REGISTRY_CASES))
@SETTINGS
@given(sizes=sizes_st, seed=st.integers(0, 10_000), binary=st.booleans())
def test_registry_estimator_equals_verl_builtin(preset, sizes, seed, binary):
    overrides, builtin, kwargs, whitened, same_returns = REGISTRY_CASES[preset]
    batch = vb.make_batch(seed, sizes, binary=binary)
    keys = ["response_mask", "token_level_rewards"]
    if preset == "remax":
        batch.tensors["reward_baselines"] = torch.rand(
            batch.uid.shape[0], generator=torch.Generator().manual_seed(seed)
        )
        keys.append("reward_baselines")
    cfg = algo(preset, *overrides)
    theirs = VERL(batch.proto(*keys), adv_estimator=builtin, config=cfg, **kwargs).batch
    ours = VERL(batch.proto(*keys), adv_estimator="areal", config=cfg, **kwargs).batch
    mask = batch.tensors["response_mask"]
    if whitened:
        assume(whitenable(ours["returns"], mask))  # our returns are the advantages before whitening
    assert max_diff(ours["advantages"], theirs["advantages"], mask) <= 1e-5
    if same_returns:
        assert max_diff(ours["returns"], theirs["returns"], mask) <= 1e-5
    assert float((ours["advantages"] * (1 - mask)).abs().max()) == 0.0  # nothing off the response mask


@SETTINGS
@given(sizes=sizes_st, seed=st.integers(0, 10_000))
def test_ppo_preset_through_the_wrapper_equals_verl_gae_with_kl_in_reward(sizes, seed):
    """Our token GAE + KL reward + batch whitening == verl's apply_kl_penalty + GAE + masked_whiten."""
    batch = vb.make_batch(seed, sizes)
    cfg = algo("ppo")
    reference = batch.proto()
    reference, _ = ray_trainer.apply_kl_penalty(reference, core_algos.FixedKLController(kl_coef=0.001), "kl")
    theirs = VERL(reference, adv_estimator="gae", gamma=1.0, lam=0.95, config=cfg).batch
    mask = batch.tensors["response_mask"]
    raw = theirs["returns"] - batch.tensors["values"]  # verl's advantages before whitening
    assume(whitenable(raw, mask))
    ours = areal_verl.compute_advantage(batch.proto(), adv_estimator="areal", gamma=1.0, lam=0.95, config=cfg).batch
    assert max_diff(ours["advantages"], theirs["advantages"], mask) <= 1e-5
    assert max_diff(ours["returns"], theirs["returns"], mask) <= 1e-5


# ---------------------------------------------------------------------------
# The wrapper's layout: equal to the pipeline on the same data written natively
# ---------------------------------------------------------------------------

TURN_GAE_YAML = """
actor:
  kl_ctl: 0.05
  discount: 0.95
  gae_lambda: 0.9
  gae_timestep_unit: turn
  reward_norm: {mean_level: group, std_level: group}
  adv_norm: null
  advantage:
    process_adv_shaping: {implementation: additive}
critic:
  enabled: true
"""


def _runs(mask_row: list[float]) -> list[int]:
    """Turn ids by a plain loop: each run of generated tokens is the next turn."""
    out, turn, previous = [], -1, 0.0
    for m in mask_row:
        if m and not previous:
            turn += 1
        out.append(turn if m else -1)
        previous = m
    return out


def native_pipeline(
    batch: vb.VerlBatch, token_rewards: torch.Tensor, yaml_path: Path
) -> tuple[torch.Tensor, torch.Tensor]:
    """The same rollouts as padded prompt+response rows with real prompts of 1-4 tokens, run directly."""
    from areal_adv.api.cli_args import load_config
    from areal_adv.trainer.ppo.actor import PPOActor
    from areal_adv.utils.data import TrajBatchMeta

    t = batch.tensors
    B, R = t["response_mask"].shape
    order = sorted(range(B), key=lambda i: (list(dict.fromkeys(batch.uid)).index(batch.uid[i]), i))
    prompts = [1 + (i % 4) for i in range(B)]
    T = max(prompts) + R
    fields = {
        k: torch.zeros(B, T) for k in ("attention_mask", "loss_mask", "logprobs", "values", "ref_logp", "token_rewards")
    }
    fields["turn_ids"] = torch.full((B, T), -1, dtype=torch.long)
    for row, i in enumerate(order):
        P, L = prompts[row], int(batch.lengths[i])
        mask = t["response_mask"][i].tolist()
        fields["attention_mask"][row, : P + L] = 1
        for j in range(R):
            fields["loss_mask"][row, P + j] = mask[j]
            fields["logprobs"][row, P + j] = t["old_log_probs"][i, j]
            fields["token_rewards"][row, P + j] = token_rewards[i, j]
            fields["values"][row, P + j - 1] = t["values"][i, j]  # next-token aligned
            fields["ref_logp"][row, P + j - 1] = t["ref_log_prob"][i, j]
        fields["turn_ids"][row, P : P + R] = torch.tensor(_runs(mask))
    fields["input_ids"] = torch.randint(3, 50, (B, T))
    fields["rewards"] = t["token_level_rewards"][order].sum(-1)
    fields["is_truncated"] = batch.lengths[order] == R
    sizes = list(dict.fromkeys(batch.uid))
    meta = TrajBatchMeta.from_group_sizes([int((batch.uid == u).sum()) for u in sizes])
    out = PPOActor(load_config(yaml_path).actor).compute_advantages(fields, meta)
    adv, ret = torch.zeros(B, R), torch.zeros(B, R)
    for row, i in enumerate(order):
        P = prompts[row]
        adv[i], ret[i] = out["advantages"][row, P - 1 : P - 1 + R], out["returns"][row, P - 1 : P - 1 + R]
    mask = t["response_mask"]
    return adv * mask, ret * mask


@SETTINGS
@given(sizes=sizes_st, seed=st.integers(0, 10_000))
def test_wrapper_turn_gae_with_values_kl_and_process_rewards_equals_native_layout(tmp_path_factory, sizes, seed):
    yaml_path = tmp_path_factory.mktemp("turn") / "turn_gae.yaml"
    yaml_path.write_text(TURN_GAE_YAML)
    batch = vb.make_batch(seed, sizes)
    gen = torch.Generator().manual_seed(seed + 1)
    token_rewards = torch.randn(batch.uid.shape[0], batch.tensors["response_mask"].shape[1], generator=gen)
    token_rewards *= batch.tensors["response_mask"]
    data = batch.proto()
    data.batch["token_rewards"] = token_rewards.clone()
    out = areal_verl.compute_advantage(data, adv_estimator="areal", config=algo(yaml_path)).batch
    adv, ret = native_pipeline(batch, token_rewards, yaml_path)
    mask = batch.tensors["response_mask"]
    assert max_diff(out["advantages"], adv, mask) <= 1e-5
    assert max_diff(out["returns"], ret, mask) <= 1e-5


# ---------------------------------------------------------------------------
# Plugins inside verl's call path, and errors
# ---------------------------------------------------------------------------


def _yaml(tmp_path: Path, implementation: str, kwargs: str = "{}") -> Path:
    path = tmp_path / "plugin.yaml"
    path.write_text(f"""
actor:
  kl_ctl: 0.0
  reward_norm: {{mean_level: group, std_level: group, eps: 1.0e-6}}
  adv_norm: null
  advantage:
    outcome_reward_shaping: {{implementation: {implementation}, kwargs: {kwargs}}}
    estimator: {{implementation: reinforce_return}}
""")
    return path


def test_custom_outcome_plugin_runs_inside_verls_compute_advantage(tmp_path):
    batch = vb.make_batch(3, [4, 3, 5])
    cfg = algo(_yaml(tmp_path, "integration_plugins.flip_outcome", "{offset: 2.5}"))
    integration_plugins.CALLS.clear()
    ours = VERL(batch.proto("response_mask", "token_level_rewards"), adv_estimator="areal", config=cfg).batch
    assert integration_plugins.CALLS == [12]
    flipped = batch.proto("response_mask", "token_level_rewards")
    scores = flipped.batch["token_level_rewards"]
    last = batch.lengths - 1
    rows = torch.arange(scores.shape[0])
    flipped.batch["token_level_rewards"] = torch.zeros_like(scores).index_put_((rows, last), 2.5 - scores[rows, last])
    theirs = VERL(flipped, adv_estimator="grpo", config=cfg).batch
    mask = batch.tensors["response_mask"]
    assert max_diff(ours["advantages"], theirs["advantages"], mask) <= 1e-5


def test_bad_plugin_path_fails_with_our_error_through_verl(tmp_path):
    cfg = algo(_yaml(tmp_path, "no_such_package.shaping.fn"))
    with pytest.raises(
        PluginResolutionError, match=r"actor\.advantage\.outcome_reward_shaping.*no_such_package\.shaping\.fn"
    ):
        VERL(vb.make_batch(0, [2, 2]).proto("response_mask", "token_level_rewards"), adv_estimator="areal", config=cfg)


def test_missing_pipeline_config_names_the_verl_key(monkeypatch):
    monkeypatch.delenv(areal_verl.ENV_CONFIG, raising=False)
    cfg = OmegaConf.create({"gamma": 1.0})
    with pytest.raises(ConfigError, match=r"\+algorithm\.areal_config=.*AREAL_VERL_CONFIG"):
        VERL(vb.make_batch(0, [2]).proto("response_mask", "token_level_rewards"), adv_estimator="areal", config=cfg)


def test_pipeline_named_by_environment_with_verls_algo_dataclass(monkeypatch):
    from verl.trainer.config import AlgoConfig

    monkeypatch.setenv(areal_verl.ENV_CONFIG, str(PRESETS / "rloo.yaml"))
    batch = vb.make_batch(5, [3, 3])
    keys = ("response_mask", "token_level_rewards")
    ours = VERL(batch.proto(*keys), adv_estimator="areal", config=AlgoConfig()).batch
    theirs = VERL(batch.proto(*keys), adv_estimator="rloo", config=AlgoConfig()).batch
    assert max_diff(ours["advantages"], theirs["advantages"], batch.tensors["response_mask"]) <= 1e-5


def test_registry_refuses_what_its_call_does_not_pass():
    data = vb.make_batch(0, [2, 2])
    with pytest.raises(ConfigError, match=r"critic\.enabled.*areal_adv\.integrations\.verl\.compute_advantage"):
        VERL(data.proto("response_mask", "token_level_rewards"), adv_estimator="areal", config=algo("ppo"))
    with pytest.raises(ConfigError, match=r"actor\.kl_ctl=0\.01 needs old_log_probs.*areal_overrides"):
        VERL(
            data.proto("response_mask", "token_level_rewards"),
            adv_estimator="areal",
            config=algo("reinforce_plus_plus"),
        )


def test_dense_token_level_rewards_are_refused_with_the_kl_cause():
    batch = vb.make_batch(1, [3, 3])
    data, _ = ray_trainer.apply_kl_penalty(batch.proto(), core_algos.FixedKLController(kl_coef=0.01), "kl")
    with pytest.raises(LayoutError, match=r"token_level_rewards: row \d+ has \d+ non-zero.*use_kl_in_reward=true"):
        areal_verl.compute_advantage(data, adv_estimator="areal", config=algo("grpo"))
    assert "advantages" not in data.batch.keys()  # nothing half-written


def test_wrapper_kl_needs_log_probs():
    data = vb.make_batch(0, [2, 2]).proto("response_mask", "token_level_rewards", "attention_mask", "values")
    with pytest.raises(ConfigError, match=r"needs \['old_log_probs', 'ref_log_prob'\]"):
        areal_verl.compute_advantage(data, adv_estimator="areal", config=algo("ppo"))


def test_patch_makes_verls_trainer_call_the_wrapper_and_other_estimators_delegate(monkeypatch):
    import importlib

    modules = [ray_trainer]
    try:
        modules.append(importlib.import_module("verl.trainer.ppo.v1.utils"))
    except ImportError:
        pass
    for module in modules:
        monkeypatch.setattr(module, "compute_advantage", module.compute_advantage)  # restored afterwards
        if hasattr(module, "compute_data_metrics"):
            monkeypatch.setattr(module, "compute_data_metrics", module.compute_data_metrics)
    patched = areal_verl.patch_compute_advantage()
    assert "verl.trainer.ppo.ray_trainer" in patched
    assert ray_trainer.compute_advantage is areal_verl.compute_advantage
    assert all(m.compute_advantage is areal_verl.compute_advantage for m in modules if m.__name__ in patched)
    batch = vb.make_batch(2, [3, 4])
    cfg = algo("ppo")
    theirs = VERL(batch.proto(), adv_estimator="gae", lam=0.95, config=cfg).batch
    delegated = ray_trainer.compute_advantage(batch.proto(), adv_estimator="gae", lam=0.95, config=cfg).batch
    assert torch.equal(theirs["advantages"], delegated["advantages"])
    reference, _ = ray_trainer.apply_kl_penalty(batch.proto(), core_algos.FixedKLController(kl_coef=0.001), "kl")
    expected = VERL(reference, adv_estimator="gae", lam=0.95, config=cfg).batch
    ours = ray_trainer.compute_advantage(batch.proto(), adv_estimator="areal", config=cfg).batch  # values, log-probs
    assert max_diff(ours["advantages"], expected["advantages"], batch.tensors["response_mask"]) <= 1e-5


# ---------------------------------------------------------------------------
# 2026 options through verl: GRPO + on-policy distillation (combine)
# ---------------------------------------------------------------------------


@SETTINGS
@given(sizes=sizes_st, seed=st.integers(0, 100_000))
def test_grpo_distill_preset_through_the_wrapper_equals_verl_grpo_minus_the_reverse_kl(sizes, seed):
    """ROLL's mixed OPD on verl's own GRPO: A = A_grpo - 0.1 * (old_log_probs - ref_log_prob) per response token."""
    batch = vb.make_batch(seed, sizes, binary=True)
    mask = batch.tensors["response_mask"]
    grpo = VERL(batch.proto(), adv_estimator="grpo", config=algo("grpo")).batch["advantages"]
    kl = batch.tensors["old_log_probs"] - batch.tensors["ref_log_prob"]
    ours = areal_verl.compute_advantage(batch.proto(), adv_estimator="areal", config=algo("grpo_distill")).batch
    assert max_diff(ours["advantages"], (grpo - 0.1 * kl) * mask, mask) <= 1e-5


def test_registry_refuses_a_distillation_term():
    data = vb.make_batch(0, [2, 2])
    with pytest.raises(ConfigError, match=r"distillation term needs old_log_probs"):
        VERL(data.proto("response_mask", "token_level_rewards"), adv_estimator="areal", config=algo("grpo_distill"))


def test_running_norm_preset_keeps_its_moments_across_verl_calls():
    """The cached pipeline's running moments persist from one compute_advantage call to the next (ROLL's loop)."""
    sys.path.insert(0, str(ROOT / "tests" / "trainer" / "ppo"))
    import selfplay_reference as sref

    reference = sref.RollRunningMoments()
    cfg = algo("running_norm", "actor.reward_norm.group_size=7")  # its own cached pipeline (group_size is unused)
    for seed in range(4):
        batch = vb.make_batch(seed, [3, 2, 4])
        mask = batch.tensors["response_mask"]
        scores = batch.tensors["token_level_rewards"].sum(dim=1).double().tolist()
        expected = torch.tensor(reference.normalise(scores), dtype=torch.float64)[:, None] * mask
        ours = VERL(batch.proto("response_mask", "token_level_rewards"), adv_estimator="areal", config=cfg).batch
        assert max_diff(ours["advantages"], expected, mask) <= 1e-5


# ---------------------------------------------------------------------------
# Shadow estimators: their diagnostics in verl's metrics dict
# ---------------------------------------------------------------------------


def test_shadow_diagnostics_reach_verls_metrics_dict_and_leave_advantages_alone(tmp_path, monkeypatch):
    import math

    monkeypatch.setattr(ray_trainer, "compute_advantage", ray_trainer.compute_advantage)  # restored afterwards
    monkeypatch.setattr(ray_trainer, "compute_data_metrics", ray_trainer.compute_data_metrics)
    areal_verl.patch_compute_advantage()
    plain, shadowed = tmp_path / "plain.yaml", tmp_path / "shadowed.yaml"
    plain.write_text("defaults: [preset:grpo]\n")
    shadowed.write_text("defaults: [preset:grpo]\ndiagnostics: {estimators: [rloo, maxrl, ppo]}\n")
    batch = vb.make_batch(4, [4, 4, 3], binary=True)

    def proto():
        data = batch.proto(*[k for k in batch.tensors if k != "values"])  # no critic: the ppo shadow is skipped
        rows, width = data.batch["responses"].shape
        data.batch["prompts"] = torch.ones(rows, data.batch["attention_mask"].shape[1] - width, dtype=torch.long)
        data.batch["sum_pi_squared"] = 0.5 * data.batch["response_mask"]
        return data

    ours = ray_trainer.compute_advantage(proto(), adv_estimator="areal", config=algo(shadowed))
    reference = ray_trainer.compute_advantage(proto(), adv_estimator="areal", config=algo(plain))
    assert torch.equal(ours.batch["advantages"], reference.batch["advantages"])
    metrics = ray_trainer.compute_data_metrics(batch=ours, use_critic=False)
    for name in ("active", "rloo", "maxrl"):
        for metric in ("zero_adv_frac", "noise_proxy", "length_corr", "reward_rank_corr"):
            assert math.isfinite(metrics[f"diagnostics/{name}/{metric}"])
    assert not any(k.startswith("diagnostics/ppo/") for k in metrics)
    assert not any(k.startswith("diagnostics/") for k in ray_trainer.compute_data_metrics(reference, False))


def test_the_registry_call_says_where_diagnostics_need_the_wrapper(tmp_path, caplog):
    shadowed = tmp_path / "registry_shadowed.yaml"
    shadowed.write_text("defaults: [preset:grpo]\ndiagnostics: {estimators: [rloo]}\n")
    batch = vb.make_batch(3, [3, 3])
    with caplog.at_level("WARNING", logger="areal_adv.integrations.verl"):
        VERL(batch.proto("response_mask", "token_level_rewards"), adv_estimator="areal", config=algo(shadowed))
    assert "diagnostics.estimators" in caplog.text and "patch_compute_advantage" in caplog.text
