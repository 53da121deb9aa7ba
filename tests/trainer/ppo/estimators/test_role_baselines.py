"""RAE (SPIRAL's role-conditioned advantage): equal to the authors' EMA loop, step after step.

Each step is a list of games (prompt groups); a game's rollouts play roles 0, 1,
0, ... and games come from a small pool of game ids, so (game, role) pairs recur
within and across steps. Rows of a split rollout share their rollout's baseline.
The state survives a checkpoint round trip bit for bit.
"""

from __future__ import annotations

import io

import peer_reference as ref
import pytest
import selfplay_reference as sref
import torch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from areal_adv.api.cli_args import PPOActorConfig
from areal_adv.trainer.ppo.actor import PPOActor
from areal_adv.utils.data import concat_batch

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def rae_config(**kwargs) -> PPOActorConfig:
    return PPOActorConfig(
        kl_ctl=0.0,
        reward_clip=1e9,
        reward_norm=None,
        adv_norm=None,
        advantage={
            "outcome_reward_shaping": {"implementation": "rae", "kwargs": kwargs},
            "estimator": {"implementation": "reinforce_return"},
        },
    )


def selfplay_batch(seed: int, games: list[tuple[int, int]], *, split: bool = False, binary: bool = False):
    """games: (number of rollouts, game id) per prompt group; rollout k plays role k % 2."""
    groups = ref.make_peer_groups(seed, [n for n, _ in games], binary=binary, split=split)
    batch, meta = concat_batch(groups)
    rollout = meta.logical_row_index()
    group = meta.logical_group_index()
    first = torch.zeros(meta.n_logical, dtype=torch.long).scatter_reduce(
        0, group, torch.arange(meta.n_logical), reduce="amin", include_self=False
    )
    role = (torch.arange(meta.n_logical) - first[group]) % 2
    game = torch.tensor([g for _, g in games], dtype=torch.long)[group]
    batch["role_ids"], batch["game_ids"] = role[rollout], game[rollout]
    return batch, meta


def samples(batch, meta) -> list[tuple[int, int, float]]:
    r = ref.rollouts(batch, meta)
    return [
        (int(batch["game_ids"][rows[0]]), int(batch["role_ids"][rows[0]]), reward)
        for rows, reward in zip(r.rows, r.rewards)
    ]


def per_row(values: list[float], batch, meta) -> torch.Tensor:
    out = torch.zeros(batch["input_ids"].shape[0], dtype=torch.float64)
    for value, rows in zip(values, ref.rollouts(batch, meta).rows):
        out[rows] = value
    return out


steps_st = st.lists(
    st.lists(st.tuples(st.integers(1, 4), st.integers(0, 2)), min_size=1, max_size=4), min_size=1, max_size=5
)
MAX_DIFF: list[float] = [0.0]


@SETTINGS
@given(steps=steps_st, seed=st.integers(0, 10_000), split=st.booleans(), decay=st.sampled_from([0.95, 0.5, 0.99]))
@example(steps=[[(2, 0)], [(2, 0), (2, 0)]], seed=0, split=False, decay=0.95)  # a seat twice in one step
def test_rae_equals_spirals_ema_loop(steps, seed, split, decay):
    actor = PPOActor(rae_config(decay=decay))
    reference = sref.RoleBaselines(decay)
    for i, games in enumerate(steps):
        batch, meta = selfplay_batch(seed + i, games, split=split)
        expected = per_row(reference.step(samples(batch, meta)), batch, meta)
        got = actor.compute_advantages(batch, meta)["rewards"].double()
        MAX_DIFF[0] = max(MAX_DIFF[0], float((got - expected).abs().max()))
        torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-6)
    state = actor.stage_states["outcome_reward_shaping"]
    keys, values = state.get("keys").tolist(), state.get("values")[:, 0].tolist()
    stored = {(k // 2**31, k % 2**31): v for k, v in zip(keys, values)}
    assert stored == {key: ema.value for key, ema in reference.emas.items()}  # bit for bit


def test_rae_ids_default_and_errors():
    batch, meta = selfplay_batch(1, [(2, 0), (2, 0)])
    del batch["game_ids"]  # one game
    out = PPOActor(rae_config()).compute_advantages(batch, meta)
    torch.testing.assert_close(
        out["rewards"].double(),
        per_row(
            sref.RoleBaselines().step(
                [(0, r, x) for _, r, x in samples({**batch, "game_ids": torch.zeros_like(batch["role_ids"])}, meta)]
            ),
            batch,
            meta,
        ),
        rtol=1e-6,
        atol=1e-6,
    )
    with pytest.raises(ValueError, match=r"'rae'.*no 'role_ids'"):
        PPOActor(rae_config()).compute_advantages({k: v for k, v in batch.items() if k != "role_ids"}, meta)
    with pytest.raises(ValueError, match=r"'role_ids' is torch.float32"):
        PPOActor(rae_config()).compute_advantages({**batch, "role_ids": batch["role_ids"].float()}, meta)
    with pytest.raises(ValueError, match=r"'role_ids'\[0\] is -1"):
        PPOActor(rae_config()).compute_advantages({**batch, "role_ids": batch["role_ids"] - 1}, meta)
    with pytest.raises(ValueError, match=r"decay must be a number in \(0, 1\)"):
        PPOActor(rae_config(decay=1.0)).compute_advantages(batch, meta)


def test_rae_rows_of_one_rollout_must_share_a_seat():
    batch, meta = selfplay_batch(3, [(2, 0), (3, 1)], split=True)
    rollout = meta.logical_row_index()
    shared = torch.nonzero(torch.bincount(rollout) > 1)
    if shared.numel() == 0:
        pytest.skip("no split rollout with two rows in this seed")
    row = int(torch.nonzero(rollout == int(shared[0, 0]))[1, 0])
    roles = batch["role_ids"].clone()
    roles[row] = 5
    with pytest.raises(ValueError, match="one rollout plays one seat"):
        PPOActor(rae_config()).compute_advantages({**batch, "role_ids": roles}, meta)


def test_rae_state_save_load_next_call_is_bit_equal():
    steps = [[(2, 0), (2, 1)], [(2, 1), (4, 0)], [(2, 0), (2, 0)], [(3, 1)]]
    batches = [selfplay_batch(10 + i, games) for i, games in enumerate(steps)]
    first = PPOActor(rae_config())
    for batch, meta in batches[:2]:
        first.compute_advantages(batch, meta)
    buffer = io.BytesIO()
    torch.save(first.state_dict(), buffer)
    buffer.seek(0)
    second = PPOActor(rae_config())
    second.load_state_dict(torch.load(buffer, weights_only=True))
    for batch, meta in batches[2:]:
        a, b = first.compute_advantages(batch, meta), second.compute_advantages(batch, meta)
        assert torch.equal(a["rewards"], b["rewards"]) and torch.equal(a["advantages"], b["advantages"])
    assert first.state_fingerprints() == second.state_fingerprints()
