"""Stateful stages: the StageState object, KRPO and single-stream SPO across steps.

Each equals its plain-loop reference (`estimators_reference.py`, written from the
authors' code) step after step, with variable group sizes, prompts drawn again
in later steps and several times within a step, and split rollouts; the state
survives a state_dict round trip, and a failed call leaves it as it was.
"""

from __future__ import annotations

import estimators_reference as eref
import numpy as np
import peer_reference as ref
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from areal_adv.api.cli_args import PPOActorConfig
from areal_adv.trainer.ppo.actor import PPOActor
from areal_adv.trainer.ppo.stage_state import StageState, StageStateError
from areal_adv.utils.data import concat_batch
from areal_adv.utils.dynamic_import import PluginResolutionError

SETTINGS = settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def config(outcome: dict, **actor) -> PPOActorConfig:
    fields = dict(
        kl_ctl=0.0,
        discount=1.0,
        reward_clip=1e9,
        reward_norm=None,
        adv_norm=None,
        advantage={"outcome_reward_shaping": outcome, "estimator": {"implementation": "reinforce_return"}},
    )
    fields.update(actor)
    return PPOActorConfig(**fields)


def keyed_batch(seed: int, sizes: list[int], keys: list[int], *, binary: bool = True, split: bool = False):
    groups = ref.make_peer_groups(seed, sizes, binary=binary, split=split)
    for group, key in zip(groups, keys):
        group["prompt_keys"] = torch.full((group["input_ids"].shape[0],), key, dtype=torch.long)
    return concat_batch(groups)


def per_group_rewards(batch: dict, meta) -> list[list[float]]:
    r = ref.rollouts(batch, meta)
    out: list[list[float]] = [[] for _ in meta.traj_group_sizes]
    for g, reward in zip(r.index, r.rewards):
        out[g].append(reward)
    return out


def row_values(per_rollout: list[list[float]], batch: dict, meta) -> torch.Tensor:
    """Each row's value: its logical rollout's (rows of a rollout share their reward here)."""
    r = ref.rollouts(batch, meta)
    flat = [v for group in per_rollout for v in group]
    out = torch.zeros(batch["input_ids"].shape[0], dtype=torch.float64)
    for value, rows in zip(flat, r.rows):
        out[rows] = value
    return out


def steps_st(max_steps: int = 4):
    """A few steps, each a list of (group size, prompt key) with keys from a small pool."""
    group = st.tuples(st.integers(1, 6), st.integers(0, 3))
    return st.lists(st.lists(group, min_size=1, max_size=4), min_size=1, max_size=max_steps)


# ---------------------------------------------------------------------------
# KRPO
# ---------------------------------------------------------------------------


@SETTINGS
@given(
    sizes=st.lists(st.integers(1, 8), min_size=1, max_size=5),
    seed=st.integers(0, 100_000),
    binary=st.booleans(),
    split=st.booleans(),
)
def test_krpo_fresh_filter_equals_the_authors_group_advantages(sizes, seed, binary, split):
    actor = PPOActor(config({"implementation": "krpo", "kwargs": {"carry_over": False}}))
    batch, meta = keyed_batch(seed, sizes, list(range(len(sizes))), binary=binary, split=split)
    expected = [eref.krpo_group(rs, eref.KalmanFilter()) for rs in per_group_rewards(batch, meta)]
    out = actor.compute_advantages(batch, meta)
    torch.testing.assert_close(out["rewards"].double(), row_values(expected, batch, meta), rtol=1e-5, atol=1e-5)
    assert len(actor.stage_states["outcome_reward_shaping"]) == 0  # nothing carried


@SETTINGS
@given(steps=steps_st(), seed=st.integers(0, 100_000), binary=st.booleans())
def test_krpo_carry_over_equals_a_persistent_filter_per_prompt(steps, seed, binary):
    params = {"process_var": 1e-3, "meas_var": 0.05, "init_mean": 0.5, "init_var": 0.5}
    actor = PPOActor(config({"implementation": "krpo", "kwargs": params}))
    reference = eref.PersistentKRPO(**params)
    for i, step in enumerate(steps):
        sizes, keys = [s for s, _ in step], [k for _, k in step]
        batch, meta = keyed_batch(seed + i, sizes, keys, binary=binary)
        expected = reference.step(list(zip(keys, per_group_rewards(batch, meta))))
        out = actor.compute_advantages(batch, meta)
        torch.testing.assert_close(out["rewards"].double(), row_values(expected, batch, meta), rtol=1e-5, atol=1e-5)
    state = actor.stage_states["outcome_reward_shaping"]
    stored = dict(zip(state.get("prompt_keys").tolist(), state.get("values").tolist()))
    assert stored.keys() == reference.filters.keys()
    for key, (x, p) in reference.filters.items():
        assert stored[key] == pytest.approx([x, p], rel=1e-9, abs=1e-12)


def test_krpo_chains_a_prompts_groups_in_list_order_of_their_rewards():
    """Two groups of one prompt in a step, one a prefix of the other: the shorter is chained first."""
    params = {"process_var": 1e-2, "meas_var": 0.1}
    actor = PPOActor(config({"implementation": "krpo", "kwargs": params}))
    reference = eref.PersistentKRPO(**params)
    groups = ref.make_peer_groups(0, [3, 2], binary=False)
    groups[0]["rewards"] = torch.tensor([1.0, 0.0, 1.0])
    groups[1]["rewards"] = torch.tensor([1.0, 0.0])
    for group in groups:
        group["prompt_keys"] = torch.full((group["input_ids"].shape[0],), 4, dtype=torch.long)
    batch, meta = concat_batch(groups)
    reference.step([(4, [1.0, 0.0, 1.0]), (4, [1.0, 0.0])])
    actor.compute_advantages(batch, meta)
    stored = actor.stage_states["outcome_reward_shaping"].get("values")[0].tolist()
    assert stored == pytest.approx(list(reference.filters[4]), rel=1e-12)
    other = eref.PersistentKRPO(**params)
    other.step([(4, [1.0, 0.0]), (4, [1.0, 0.0, 1.0])])
    assert other.filters[4] == reference.filters[4]  # the order is canonical, not the batch's


def test_krpo_split_rollouts_share_their_rollouts_baseline():
    actor = PPOActor(config({"implementation": "krpo"}))
    batch, meta = keyed_batch(3, [3, 4], [5, 6], binary=False, split=True)
    assert meta.rollout_groups is not None and meta.n_logical < batch["input_ids"].shape[0]
    reference = eref.PersistentKRPO()
    expected = reference.step(list(zip([5, 6], per_group_rewards(batch, meta))))
    out = actor.compute_advantages(batch, meta)
    torch.testing.assert_close(out["rewards"].double(), row_values(expected, batch, meta), rtol=1e-5, atol=1e-5)


def test_krpo_errors_name_the_stage_and_field():
    actor = PPOActor(config({"implementation": "krpo"}))
    batch, meta = keyed_batch(1, [2, 2], [1, 2])
    no_keys = {k: v for k, v in batch.items() if k != "prompt_keys"}
    with pytest.raises(ValueError, match=r"'krpo'.*no 'prompt_keys'.*one integer key per row"):
        actor.compute_advantages(no_keys, meta)
    mixed = dict(batch, prompt_keys=torch.tensor([1, 9, 2, 2]))
    with pytest.raises(ValueError, match=r"'prompt_keys' differ within prompt group 0"):
        actor.compute_advantages(mixed, meta)
    floats = dict(batch, prompt_keys=batch["prompt_keys"].float())
    with pytest.raises(ValueError, match=r"'prompt_keys' has dtype torch.float32, expected an integer"):
        actor.compute_advantages(floats, meta)
    for kwargs, message in (
        ({"meas_var": 0}, "meas_var must be > 0"),
        ({"carry_over": 1}, "carry_over must be true"),
        ({"process_var": -1.0}, "process_var must be >= 0"),
    ):
        bad = PPOActor(config({"implementation": "krpo", "kwargs": kwargs}))
        with pytest.raises(ValueError, match=message):
            bad.compute_advantages(batch, meta)


# ---------------------------------------------------------------------------
# SPO
# ---------------------------------------------------------------------------


@SETTINGS
@given(steps=steps_st(5), seed=st.integers(0, 100_000), kl=st.booleans())
def test_spo_equals_the_authors_tracker(steps, seed, kl):
    """One sample per prompt group (single stream); prompts recur across and within steps."""
    kwargs = {"rho_mode": "kl"} if kl else {"rho": 0.8}
    actor = PPOActor(config({"implementation": "spo", "kwargs": kwargs}))
    tracker = eref.SPOTracker()
    rng = np.random.default_rng(seed)
    for i, step in enumerate(steps):
        keys = [k for _, k in step]
        batch, meta = keyed_batch(seed + i, [1] * len(keys), keys, binary=True)
        drift = torch.tensor(rng.random(len(keys)) * 0.2)
        if kl:
            batch["policy_drift"] = drift
        rhos = [eref.spo_rho_from_drift(float(d)) for d in drift] if kl else [0.8] * len(keys)
        expected = tracker.step(keys, [float(r) for r in batch["rewards"]], rhos)
        out = actor.compute_advantages(batch, meta)
        torch.testing.assert_close(
            out["rewards"].double(), torch.tensor(expected, dtype=torch.float64), rtol=1e-5, atol=1e-5
        )
    state = actor.stage_states["outcome_reward_shaping"]
    stored = dict(zip(state.get("prompt_keys").tolist(), state.get("values").tolist()))
    assert stored.keys() == tracker.ab.keys()
    for key, ab in tracker.ab.items():
        assert stored[key] == pytest.approx(list(ab), rel=1e-12)


def test_spo_groups_of_several_samples_use_the_pre_step_value_and_add_every_sample():
    actor = PPOActor(config({"implementation": "spo", "kwargs": {"normalize": False}}))
    batch, meta = keyed_batch(4, [3, 2], [1, 2])
    tracker = eref.SPOTracker()
    prompts = [1, 1, 1, 2, 2]
    expected = tracker.step(prompts, [float(r) for r in batch["rewards"]], [0.875] * 5, normalize=False)
    out = actor.compute_advantages(batch, meta)
    torch.testing.assert_close(out["rewards"].double(), torch.tensor(expected, dtype=torch.float64))
    assert actor.stage_states["outcome_reward_shaping"].get("values").tolist() == [
        list(tracker.ab[1]),
        list(tracker.ab[2]),
    ]


def test_spo_errors():
    actor = PPOActor(config({"implementation": "spo"}))
    batch, meta = keyed_batch(1, [1, 1], [1, 2], binary=False)
    with pytest.raises(ValueError, match=r"'spo'.*needs success rewards in \[0, 1\]"):
        actor.compute_advantages(dict(batch, rewards=torch.tensor([0.5, 1.5])), meta)
    kl = PPOActor(config({"implementation": "spo", "kwargs": {"rho_mode": "kl"}}))
    ok = dict(batch, rewards=torch.tensor([0.0, 1.0]))
    with pytest.raises(ValueError, match=r"rho_mode 'kl' reads the batch's 'policy_drift'"):
        kl.compute_advantages(ok, meta)
    with pytest.raises(ValueError, match=r"'policy_drift'\[1\] is -1.0"):
        kl.compute_advantages(dict(ok, policy_drift=torch.tensor([0.1, -1.0])), meta)
    for kwargs, message in (
        ({"rho": 1.5}, r"rho must lie in \[0, 1\]"),
        ({"rho_mode": "x"}, "rho_mode must be"),
        ({"rho_min": 0.9, "rho_max": 0.8}, "rho_min"),
        ({"prior_alpha": 0}, "prior_alpha"),
    ):
        with pytest.raises(ValueError, match=message):
            PPOActor(config({"implementation": "spo", "kwargs": kwargs})).compute_advantages(ok, meta)


# ---------------------------------------------------------------------------
# The state object: round trip, rollback, custom stages
# ---------------------------------------------------------------------------


def test_state_round_trip_continues_identically():
    cfg = config({"implementation": "krpo"})
    first, batches = PPOActor(cfg), [keyed_batch(s, [3, 2, 4], [s % 2, 5, 7]) for s in range(4)]
    for batch, meta in batches[:2]:
        first.compute_advantages(batch, meta)
    saved = {name: s.state_dict() for name, s in first.stage_states.items()}
    saved = torch.load(_roundtrip(saved), weights_only=True)
    second = PPOActor(cfg)
    for name, state in second.stage_states.items():
        state.load_state_dict(saved[name])
    for batch, meta in batches[2:]:
        torch.testing.assert_close(
            second.compute_advantages(batch, meta)["rewards"],
            first.compute_advantages(batch, meta)["rewards"],
            rtol=0,
            atol=0,
        )
    assert (
        second.stage_states["outcome_reward_shaping"].fingerprint()
        == first.stage_states["outcome_reward_shaping"].fingerprint()
    )


def _roundtrip(obj) -> object:
    import io

    buffer = io.BytesIO()
    torch.save(obj, buffer)
    buffer.seek(0)
    return buffer


def test_a_failed_call_leaves_the_state_as_it_was():
    cfg = config({"implementation": "krpo"})
    cfg.advantage.estimator = type(cfg.advantage.estimator)("state_plugins.failing_estimator")
    cfg.validate()
    actor = PPOActor(cfg)
    state = actor.stage_states["outcome_reward_shaping"]
    before = state.fingerprint()
    batch, meta = keyed_batch(2, [2, 3], [1, 2])
    with pytest.raises(RuntimeError, match="estimator broke"):
        actor.compute_advantages(batch, meta)
    assert state.fingerprint() == before and len(state) == 0


def test_custom_stage_declaring_state_gets_one_and_keeps_it():
    actor = PPOActor(config({"implementation": "state_plugins.running_mean", "kwargs": {"decay": 0.5}}))
    state = actor.stage_states["outcome_reward_shaping"]
    assert isinstance(state, StageState) and state.implementation == "state_plugins.running_mean"
    batch, meta = keyed_batch(5, [2, 2], [1, 2], binary=False)
    first = actor.compute_advantages(batch, meta)["rewards"]
    torch.testing.assert_close(first, batch["rewards"])
    second = actor.compute_advantages(batch, meta)["rewards"]
    torch.testing.assert_close(second, batch["rewards"] - 0.5 * float(batch["rewards"].mean()))
    assert state.get("calls") == 2
    assert PPOActor(config({"implementation": "identity"})).stage_states == {}


def test_state_is_reserved_and_checked():
    with pytest.raises(PluginResolutionError, match=r"kwargs may not set 'state'"):
        PPOActor(config({"implementation": "state_plugins.running_mean", "kwargs": {"state": 1}}))
    state = StageState("outcome_reward_shaping", "krpo")
    with pytest.raises(StageStateError, match=r"expected a tensor or a plain value"):
        state.set("x", object())
    with pytest.raises(StageStateError, match=r"expected a finite number"):
        state.set("x", [1.0, float("inf")])
    other = StageState("outcome_reward_shaping", "spo")
    other.set("x", torch.ones(2))
    with pytest.raises(StageStateError, match=r"holds the state of 'spo', but the stage is now 'krpo'"):
        state.load_state_dict(other.state_dict())
    with pytest.raises(StageStateError, match=r"expected the dict of StageState.state_dict"):
        state.load_state_dict({"values": 3})
