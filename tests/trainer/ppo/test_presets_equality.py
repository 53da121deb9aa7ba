"""Every preset in examples/presets equals its algorithm's reference definition.

For random grouped batches (groups of 2-8 samples, ragged multi-turn rows, binary
and continuous rewards) the advantages the pipeline computes with
`load_config(preset).actor` -> `PPOActor(cfg).compute_advantages(batch, meta)` must
match, on every generated token (rtol 1e-5), the plain per-group loops in
`peer_reference.py`, written from verl's `core_algos.py`, OpenRLHF's
`experience_maker.py`, the GPG authors' trainer and SkyRL's `ppo_utils.py` (MaxRL).

Deliberate differences (also in docs/algorithms.md), kept out of these
comparisons and tested on their own at the end of this file:
- singleton groups: our baselines treat a lone sample as its own baseline (0);
  verl uses mean 0 / std 1, i.e. keeps the raw reward;
- whitening eps: ours is added to the std, (x - m) / (std + eps) with eps 1e-8;
  verl multiplies by rsqrt(var + 1e-8), OpenRLHF by rsqrt(max(var, 1e-8)). The
  relative gap is about 1e-8 / (2 var) + 1e-8 / std, below the tolerance when the
  token variance of the advantages is >= 1e-3 (or exactly 0, where all give 0), so
  the whitening comparisons `assume` that; `test_whitening_eps_gap_is_bounded`
  checks the bound itself on near-degenerate batches;
- discount < 1 with environment tokens between turns: our steps are generated
  tokens; OpenRLHF also discounts across environment positions, so the gamma < 1
  comparison uses single-turn rows;
- PPO on truncated rows bootstraps from the critic (verl: 0), so the PPO
  comparison marks rows as finished;
- token GAE (the PPO preset) reads the outcome score at the row's last attended
  position; a row ending with environment tokens loses it there (the default
  pipeline's placement), so the PPO comparison uses rows that end with a
  generated token. The critic-free presets use `reinforce_return`, which credits
  such a score to the last generated token, and are compared on all rows.
"""

from __future__ import annotations

import functools
import math
from pathlib import Path

import peer_reference as ref
import pytest
import torch
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from areal_adv.api.cli_args import load_config
from areal_adv.trainer.ppo.actor import PPOActor
from areal_adv.utils.data import concat_batch

PRESETS = Path(__file__).resolve().parents[3] / "examples" / "presets"
PRESET_NAMES = (
    "grpo",
    "dr_grpo",
    "rloo",
    "reinforce_plus_plus",
    "reinforce_plus_plus_baseline",
    "remax",
    "opo",
    "gpg",
    "lite_ppo",
    "grpo_passk",
    "maxrl",
    "ppo",
)
SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SETTINGS_40 = settings(SETTINGS, max_examples=40)

sizes_st = st.lists(st.integers(2, 8), min_size=1, max_size=5)
seeds = st.integers(0, 100_000)
kinds = st.sampled_from(["k1", "k2", "k3"])


@functools.cache
def actor(name: str, *overrides: str) -> PPOActor:
    return PPOActor(load_config(PRESETS / f"{name}.yaml", list(overrides)).actor)


def advantages(name: str, batch: dict, meta, *overrides: str) -> torch.Tensor:
    return actor(name, *overrides).compute_advantages(batch, meta)["advantages"]


def assert_tokens(adv: torch.Tensor, resp: ref.Responses, expected: list[list[float]]) -> None:
    """Equal on every generated token (aligned positions), row by row."""
    for b, (positions, exp) in enumerate(zip(resp.actions, expected)):
        got = adv[b, positions].double()
        want = torch.tensor(exp, dtype=torch.float64)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6, msg=lambda m, b=b: f"row {b}: {m}")


def assume_whitenable(raw: list[list[float]]) -> None:
    """Skip batches whose advantage variance makes the eps placements differ (see module doc)."""
    var = ref.token_variance(raw)
    assume(var == 0 or var >= 1e-3)


def test_every_preset_loads_and_resolves():
    found = sorted(p.stem for p in PRESETS.glob("*.yaml"))
    assert set(PRESET_NAMES) <= set(found), found
    for name in found:
        cfg = load_config(PRESETS / f"{name}.yaml")
        PPOActor(cfg.actor)
        assert cfg.critic.enabled == (name == "ppo"), name


# ---------------------------------------------------------------------------
# Group baselines (verl core_algos)
# ---------------------------------------------------------------------------


@SETTINGS
@given(sizes=sizes_st, seed=seeds, binary=st.booleans())
def test_grpo_equals_verl(sizes, seed, binary):
    batch, meta = ref.make_peer_batch(seed, sizes, binary=binary)
    resp = ref.responses(batch, meta)
    expected = ref.broadcast(ref.grpo(resp.scores, resp.index, eps=1e-6), resp)
    assert_tokens(advantages("grpo", batch, meta), resp, expected)


@SETTINGS
@given(sizes=sizes_st, seed=seeds, binary=st.booleans())
def test_dr_grpo_equals_verl_without_std(sizes, seed, binary):
    batch, meta = ref.make_peer_batch(seed, sizes, binary=binary)
    resp = ref.responses(batch, meta)
    expected = ref.broadcast(ref.grpo(resp.scores, resp.index, norm_by_std=False), resp)
    assert_tokens(advantages("dr_grpo", batch, meta), resp, expected)


@SETTINGS
@given(sizes=sizes_st, seed=seeds, binary=st.booleans())
def test_rloo_equals_verl(sizes, seed, binary):
    batch, meta = ref.make_peer_batch(seed, sizes, binary=binary)
    resp = ref.responses(batch, meta)
    expected = ref.broadcast(ref.rloo(resp.scores, resp.index), resp)
    assert_tokens(advantages("rloo", batch, meta), resp, expected)


@SETTINGS
@given(sizes=sizes_st, seed=seeds, binary=st.booleans())
def test_opo_equals_verl(sizes, seed, binary):
    batch, meta = ref.make_peer_batch(seed, sizes, binary=binary)
    resp = ref.responses(batch, meta)
    lengths = [float(len(a)) for a in resp.actions]
    expected = ref.broadcast(ref.opo(resp.scores, lengths, resp.index), resp)
    assert_tokens(advantages("opo", batch, meta), resp, expected)


@SETTINGS
@given(sizes=sizes_st, seed=seeds, binary=st.booleans(), f_norm=st.booleans())
def test_gpg_equals_the_authors_definition(sizes, seed, binary, f_norm):
    batch, meta = ref.make_peer_batch(seed, sizes, binary=binary)
    resp = ref.responses(batch, meta)
    expected = ref.broadcast(ref.gpg_paper(resp.scores, resp.index, f_norm=f_norm), resp)
    out = advantages("gpg", batch, meta, f"actor.advantage.outcome_reward_shaping.kwargs.f_norm={str(f_norm).lower()}")
    assert_tokens(out, resp, expected)


@SETTINGS
@given(sizes=sizes_st, seed=seeds, binary=st.booleans())
def test_gpg_nonzero_rewards_alpha_equals_verl(sizes, seed, binary):
    batch, meta = ref.make_peer_batch(seed, sizes, binary=binary)
    resp = ref.responses(batch, meta)
    expected = ref.broadcast(ref.gpg_verl(resp.scores, resp.index), resp)
    out = advantages("gpg", batch, meta, "actor.advantage.outcome_reward_shaping.kwargs.alpha=nonzero_rewards")
    assert_tokens(out, resp, expected)


@SETTINGS
@given(sizes=st.lists(st.integers(1, 8), min_size=1, max_size=5), seed=seeds, binary=st.booleans())
@example(sizes=[1], seed=0, binary=True)  # a batch of one: std 0, TRL's 0 / 1e-4
@example(sizes=[3, 3], seed=3, binary=True)
def test_lite_ppo_equals_trls_batch_scale(sizes, seed, binary):
    """(r - group mean) / (unbiased std of the batch's rewards + 1e-4), TRL's `scale_rewards="batch"`."""
    batch, meta = ref.make_peer_batch(seed, sizes, binary=binary)
    resp = ref.responses(batch, meta)
    expected = ref.broadcast(ref.lite_ppo(resp.scores, resp.index, eps=1e-4), resp)
    assert_tokens(advantages("lite_ppo", batch, meta), resp, expected)


def test_lite_ppo_equals_trls_own_formula_and_differs_from_a_pooled_batch_std():
    """TRL's tensor code (its `nanstd`) on equal groups; AReaL's std_level: batch leaves out the between-group spread."""
    trl_utils = pytest.importorskip("trl.trainer.utils")
    n_gen, sizes = 4, [4, 4, 4]
    batch, meta = ref.make_peer_batch(5, sizes)
    batch["rewards"] = torch.tensor([0.0, 0.0, 1.0, 0.0, 1.0, 1.0, 1.0, 0.0, 0.5, 0.5, 0.5, 0.5])
    resp = ref.responses(batch, meta)
    rewards = batch["rewards"].clone()
    mean_grouped = rewards.view(-1, n_gen).mean(dim=1).repeat_interleave(n_gen, dim=0)
    std_rewards = trl_utils.nanstd(rewards).expand_as(rewards)
    trl_advantages = (rewards - mean_grouped) / (std_rewards + 1e-4)
    assert_tokens(advantages("lite_ppo", batch, meta), resp, ref.broadcast(trl_advantages.tolist(), resp))
    pooled = advantages("grpo", batch, meta, "actor.reward_norm.std_level=batch", "actor.reward_norm.eps=1e-4")
    first = resp.actions[0][0]
    assert abs(float(pooled[0, first]) - float(trl_advantages[0])) > 0.05  # not the same normalisation


@SETTINGS
@given(sizes=sizes_st, seed=seeds, binary=st.booleans())
def test_grpo_passk_equals_verl(sizes, seed, binary):
    batch, meta = ref.make_peer_batch(seed, sizes, binary=binary)
    resp = ref.responses(batch, meta)
    expected = ref.broadcast(ref.passk(resp.scores, resp.index, eps=1e-6), resp)
    assert_tokens(advantages("grpo_passk", batch, meta), resp, expected)


@SETTINGS_40
@given(sizes=st.lists(st.integers(1, 8), min_size=1, max_size=5), seed=seeds, binary=st.booleans())
@example(sizes=[1, 3, 1], seed=0, binary=True)
def test_maxrl_equals_skyrl_singletons_included(sizes, seed, binary):
    """The README's list of groups in, SkyRL's `compute_maxrl_advantage` on every token out."""
    groups = ref.make_peer_groups(seed, sizes, binary=binary)
    resp = ref.responses(*concat_batch(groups))
    expected = ref.broadcast(ref.maxrl(resp.scores, resp.index, eps=1e-6), resp)
    assert_tokens(actor("maxrl").compute_advantages(groups)["advantages"], resp, expected)


def _pass_rate_batch(n: int, successes: list[int]) -> tuple[dict, object, list[float]]:
    """One group of n binary samples per entry, with that many successes."""
    batch, meta = ref.make_peer_batch(11, [n] * len(successes))
    rewards = [1.0 if i < k else 0.0 for k in successes for i in range(n)]
    batch["rewards"] = torch.tensor(rewards)
    return batch, meta, rewards


def _positive_weight(adv: torch.Tensor, resp: ref.Responses, rows: range) -> float:
    """The summed advantage of the group's correct samples (first generated token of each)."""
    return sum(max(float(adv[b, resp.actions[b][0]]), 0.0) for b in rows)


def test_maxrl_weights_prompts_by_one_over_the_pass_rate_grpo_does_not():
    """MaxRL's group weight is 1/p times the plain policy gradient's Σ(r - p); GRPO's is 1/std.

    Pass rates 1/8 and 7/8 have the same GRPO std, so GRPO weights the hard and the easy
    prompt alike; MaxRL weights the hard one p_easy / p_hard = 7 times more.
    """
    n, successes = 8, [1, 2, 4, 7]
    batch, meta, rewards = _pass_rate_batch(n, successes)
    resp = ref.responses(batch, meta)
    maxrl = advantages("maxrl", batch, meta)
    grpo = advantages("grpo", batch, meta)
    ratio_max, ratio_grpo = {}, {}
    for g, k in enumerate(successes):
        rows, p = range(g * n, (g + 1) * n), k / n
        centred = sum(max(rewards[b] - p, 0.0) for b in rows)  # Σ (r - p)^+ = k (1 - p)
        ratio_max[k] = _positive_weight(maxrl, resp, rows) / centred
        ratio_grpo[k] = _positive_weight(grpo, resp, rows) / centred
        assert ratio_max[k] == pytest.approx(1.0 / (p + 1e-6), rel=1e-5)
    assert ratio_max[1] / ratio_max[7] == pytest.approx(7.0, rel=1e-5)
    assert ratio_grpo[1] / ratio_grpo[7] == pytest.approx(1.0, rel=1e-5)
    assert ratio_max[1] / ratio_max[2] == pytest.approx(2.0, rel=1e-5)
    assert ratio_grpo[1] / ratio_grpo[2] == pytest.approx(math.sqrt(2 * 6 / (1 * 7)), rel=1e-5)  # std ratio


# ---------------------------------------------------------------------------
# Token-reward estimators: ReMax, REINFORCE++ (with the KL reward), PPO/GAE
# ---------------------------------------------------------------------------


@SETTINGS
@given(sizes=sizes_st, seed=seeds, binary=st.booleans(), kl=st.sampled_from([0.0, 0.001, 0.1]), kind=kinds)
def test_remax_equals_verl(sizes, seed, binary, kl, kind):
    batch, meta = ref.make_peer_batch(seed, sizes, binary=binary, baselines=True)
    resp = ref.responses(batch, meta, kind)
    tok = ref.token_rewards(resp, resp.scores, kl)
    expected = ref.remax(tok, [float(b) for b in batch["reward_baselines"]])
    out = advantages("remax", batch, meta, f"actor.kl_ctl={kl}", f"actor.kl_estimator={kind}")
    assert_tokens(out, resp, expected)


@SETTINGS
@given(
    sizes=sizes_st,
    seed=seeds,
    binary=st.booleans(),
    kl=st.sampled_from([0.0, 0.01, 0.1]),
    kind=kinds,
    gamma=st.sampled_from([1.0, 0.9]),
)
def test_reinforce_plus_plus_equals_openrlhf(sizes, seed, binary, kl, kind, gamma):
    batch, meta = ref.make_peer_batch(seed, sizes, binary=binary, max_turns=3 if gamma == 1.0 else 1)
    resp = ref.responses(batch, meta, kind)
    returns = ref.cumulative_returns(ref.token_rewards(resp, resp.scores, kl), gamma)
    assume_whitenable(returns)
    expected = ref.whiten(returns, unbiased=False)
    out = advantages(
        "reinforce_plus_plus",
        batch,
        meta,
        f"actor.kl_ctl={kl}",
        f"actor.kl_estimator={kind}",
        f"actor.discount={gamma}",
    )
    assert_tokens(out, resp, expected)


@SETTINGS
@given(sizes=sizes_st, seed=seeds, binary=st.booleans(), kl=st.sampled_from([0.0, 0.01]))
def test_reinforce_plus_plus_unbiased_equals_verl(sizes, seed, binary, kl):
    batch, meta = ref.make_peer_batch(seed, sizes, binary=binary)
    resp = ref.responses(batch, meta)
    returns = ref.cumulative_returns(ref.token_rewards(resp, resp.scores, kl), 1.0)
    assume_whitenable(returns)
    expected = ref.whiten(returns, unbiased=True)
    out = advantages("reinforce_plus_plus", batch, meta, f"actor.kl_ctl={kl}", "actor.adv_norm.std_unbiased=true")
    assert_tokens(out, resp, expected)


@SETTINGS
@given(sizes=sizes_st, seed=seeds, binary=st.booleans(), kl=st.sampled_from([0.0, 0.01, 0.1]), kind=kinds)
def test_reinforce_plus_plus_baseline_equals_openrlhf(sizes, seed, binary, kl, kind):
    batch, meta = ref.make_peer_batch(seed, sizes, binary=binary)
    resp = ref.responses(batch, meta, kind)
    centred = ref.grpo(resp.scores, resp.index, norm_by_std=False)  # rewards - rewards.mean(-1)
    returns = ref.cumulative_returns(ref.token_rewards(resp, centred, kl), 1.0)
    assume_whitenable(returns)
    expected = ref.whiten(returns, unbiased=False)
    out = advantages("reinforce_plus_plus_baseline", batch, meta, f"actor.kl_ctl={kl}", f"actor.kl_estimator={kind}")
    assert_tokens(out, resp, expected)


@SETTINGS
@given(sizes=sizes_st, seed=seeds, binary=st.booleans())
def test_reinforce_plus_plus_baseline_unbiased_equals_verl(sizes, seed, binary):
    batch, meta = ref.make_peer_batch(seed, sizes, binary=binary)
    resp = ref.responses(batch, meta)
    centred = ref.broadcast(ref.grpo(resp.scores, resp.index, norm_by_std=False), resp)
    assume_whitenable(centred)
    expected = ref.whiten(centred, unbiased=True)
    out = advantages("reinforce_plus_plus_baseline", batch, meta, "actor.adv_norm.std_unbiased=true")
    assert_tokens(out, resp, expected)


@SETTINGS
@given(
    sizes=sizes_st,
    seed=seeds,
    binary=st.booleans(),
    kl=st.sampled_from([0.0, 0.001, 0.05]),
    gamma=st.sampled_from([1.0, 0.95]),
    lam=st.sampled_from([1.0, 0.95, 0.0]),
)
def test_ppo_gae_equals_verl(sizes, seed, binary, kl, gamma, lam):
    # Rows end with a generated token: token GAE reads the outcome score there (see module doc).
    batch, meta = ref.make_peer_batch(seed, sizes, binary=binary, trailing_env=False)
    batch["is_truncated"] = torch.zeros_like(batch["is_truncated"])  # verl never bootstraps
    resp = ref.responses(batch, meta)
    adv = ref.gae(ref.token_rewards(resp, resp.scores, kl), resp.values, gamma, lam)
    assume_whitenable(adv)
    expected = ref.whiten(adv, unbiased=True)
    out = advantages("ppo", batch, meta, f"actor.kl_ctl={kl}", f"actor.discount={gamma}", f"actor.gae_lambda={lam}")
    assert_tokens(out, resp, expected)


# ---------------------------------------------------------------------------
# Split rollouts: group statistics over logical rollouts, every row gets its rollout's value
# ---------------------------------------------------------------------------


def _per_rollout(name: str, roll: ref.Rollouts) -> list[float]:
    r, idx = roll.rewards, roll.index
    return {
        "grpo": lambda: ref.grpo(r, idx, eps=1e-6),
        "dr_grpo": lambda: ref.grpo(r, idx, norm_by_std=False),
        "rloo": lambda: ref.rloo(r, idx),
        "opo": lambda: ref.opo(r, roll.lengths, idx),
        "gpg": lambda: ref.gpg_paper(r, idx),
        "grpo_passk": lambda: ref.passk(r, idx, eps=1e-6),
        "maxrl": lambda: ref.maxrl(r, idx, eps=1e-6),
    }[name]()


@SETTINGS
@given(
    sizes=sizes_st,
    seed=seeds,
    binary=st.booleans(),
    name=st.sampled_from(["grpo", "dr_grpo", "rloo", "opo", "gpg", "grpo_passk", "maxrl"]),
)
def test_split_rollouts_use_logical_group_statistics(sizes, seed, binary, name):
    batch, meta = ref.make_peer_batch(seed, sizes, binary=binary, split=True)
    assert meta.rollout_groups is not None
    resp = ref.responses(batch, meta)
    roll = ref.rollouts(batch, meta)
    values = _per_rollout(name, roll)
    per_row = [0.0] * len(resp.actions)
    for value, rows in zip(values, roll.rows):
        for i in rows:
            per_row[i] = value
    assert_tokens(advantages(name, batch, meta), resp, ref.broadcast(per_row, resp))


# ---------------------------------------------------------------------------
# Documented differences
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("spread", [1e-1, 1e-2, 3e-3])
@pytest.mark.parametrize("unbiased", [False, True])
def test_whitening_eps_gap_is_bounded(spread, unbiased):
    """Near-degenerate batches: ours and the references differ by at most the eps terms."""
    batch, meta = ref.make_peer_batch(7, [3, 4], binary=False)
    batch["rewards"] = 1.0 + spread * torch.linspace(-1, 1, batch["rewards"].shape[0])
    resp = ref.responses(batch, meta)
    returns = ref.cumulative_returns(ref.token_rewards(resp, resp.scores, 0.0), 1.0)
    expected = ref.whiten(returns, unbiased=unbiased)
    out = advantages(
        "reinforce_plus_plus", batch, meta, "actor.kl_ctl=0.0", f"actor.adv_norm.std_unbiased={str(unbiased).lower()}"
    )
    var = ref.token_variance(returns)
    n = sum(len(a) for a in resp.actions)
    var = var * n / (n - 1) if unbiased else var
    bound = 1e-8 / math.sqrt(var) + (1e-8 / (2 * var) if unbiased else 0.0)
    for b, positions in enumerate(resp.actions):
        got = out[b, positions].double()
        want = torch.tensor(expected[b], dtype=torch.float64)
        assert torch.all((got - want).abs() <= bound * want.abs() * 1.01 + 1e-6)


@pytest.mark.parametrize("name", ["grpo", "rloo", "opo", "gpg"])
def test_singleton_group_is_its_own_baseline(name):
    """verl gives a lone sample its raw reward (mean 0, std 1); we give it 0 (no relative signal)."""
    batch, meta = ref.make_peer_batch(3, [1, 3], binary=False)
    resp = ref.responses(batch, meta)
    out = advantages(name, batch, meta)
    lone = resp.actions[0]
    assert torch.all(out[0, lone] == 0)
    verl = {
        "grpo": ref.grpo(resp.scores, resp.index),
        "rloo": ref.rloo(resp.scores, resp.index),
        "opo": ref.opo(resp.scores, [float(len(a)) for a in resp.actions], resp.index),
    }
    if name in verl:
        assert verl[name][0] == pytest.approx(resp.scores[0] / (1 + 1e-6) if name == "grpo" else resp.scores[0])
