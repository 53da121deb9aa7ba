"""Response-only (verl/TRL) <-> padded pipeline layout: exact both ways, groups reordered and restored."""

from __future__ import annotations

import random

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from areal_adv.integrations.response_layout import (
    LayoutError,
    ResponseBatch,
    to_pipeline,
    to_response,
    turn_ids_from_mask,
)

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def random_batch(seed: int, B: int, R: int) -> ResponseBatch:
    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([rng.randint(0, R) for _ in range(B)])
    mask = (torch.rand(B, R, generator=gen) > 0.3).float() * (torch.arange(R)[None, :] < lengths[:, None])
    groups = [rng.randint(0, max(1, B // 2)) for _ in range(B)]  # interleaved, as after verl's balancing
    return ResponseBatch(
        response_mask=mask,
        rewards=torch.randn(B, generator=gen),
        group_ids=[f"uid-{g}" for g in groups],
        lengths=lengths,
        values=torch.randn(B, R, generator=gen),
        logprobs=-torch.rand(B, R, generator=gen),
        ref_logprobs=-torch.rand(B, R, generator=gen),
        token_rewards=torch.randn(B, R, generator=gen) * mask,
        reward_baselines=torch.randn(B, generator=gen),
    )


def loop_turn_ids(mask: torch.Tensor) -> torch.Tensor:
    out = torch.full(mask.shape, -1, dtype=torch.long)
    for b in range(mask.shape[0]):
        turn, previous = -1, False
        for j in range(mask.shape[1]):
            on = bool(mask[b, j])
            if on and not previous:
                turn += 1
            if on:
                out[b, j] = turn
            previous = on
    return out


@SETTINGS
@given(seed=st.integers(0, 10_000), B=st.integers(1, 9), R=st.integers(1, 8))
def test_pipeline_layout_is_the_response_layout_shifted_by_one_prompt_token(seed, B, R):
    batch = random_batch(seed, B, R)
    converted = to_pipeline(batch)
    data = converted.data
    order = list(range(B)) if converted.order is None else converted.order.tolist()
    first_seen = list(dict.fromkeys(batch.group_ids))
    assert order == sorted(range(B), key=lambda i: (first_seen.index(batch.group_ids[i]), i))  # stable grouping
    keys = [batch.group_ids[i] for i in order]
    assert list(converted.meta.traj_group_sizes) == [keys.count(k) for k in dict.fromkeys(keys)]
    idx = torch.tensor(order)

    def aligned(t):  # what the pipeline does to unshifted fields
        return torch.roll(t, shifts=-1, dims=-1)[:, :R]

    assert data["input_ids"].shape == (B, R + 1)
    assert torch.equal(aligned(data["loss_mask"]), batch.response_mask[idx])
    assert torch.equal(aligned(data["logprobs"]), batch.logprobs[idx])
    assert torch.equal(aligned(data["token_rewards"]), batch.token_rewards[idx])
    assert torch.equal(aligned(data["turn_ids"]), loop_turn_ids(batch.response_mask)[idx])
    assert torch.equal(data["values"][:, :R], batch.values[idx])  # already aligned: stored as is
    assert torch.equal(data["ref_logp"][:, :R], batch.ref_logprobs[idx])
    assert torch.equal(data["attention_mask"].sum(1).long(), batch.lengths[idx] + 1)
    assert torch.equal(data["is_truncated"], batch.lengths[idx] == R)
    assert torch.equal(data["rewards"], batch.rewards[idx])
    assert torch.equal(data["reward_baselines"], batch.reward_baselines[idx])
    # and back: an aligned [B, R+1] output returns to the caller's rows, zero off the mask
    back = to_response(converted, data["values"], batch.response_mask)
    assert torch.equal(back, batch.values * batch.response_mask)


def test_turn_ids_from_mask_counts_runs_of_generated_tokens():
    mask = torch.tensor([[1, 1, 0, 1, 0, 0, 1], [0, 1, 1, 1, 0, 0, 0], [0, 0, 0, 0, 0, 0, 0]])
    assert turn_ids_from_mask(mask).tolist() == [[0, 0, -1, 1, -1, -1, 2], [-1, 0, 0, 0, -1, -1, -1], [-1] * 7]
    assert torch.equal(turn_ids_from_mask(mask), loop_turn_ids(mask))


def test_layout_errors_name_the_engine_field():
    mask = torch.ones(2, 3)
    names = (("values", "data.batch['values']"), ("group_ids", "uid"), ("lengths", "attention_mask"))
    with pytest.raises(LayoutError, match=r"data\.batch\['values'\]: expected shape \(2, 3\), got \(2, 4\)"):
        to_pipeline(ResponseBatch(mask, torch.zeros(2), ["a", "b"], values=torch.zeros(2, 4), names=names))
    with pytest.raises(LayoutError, match=r"uid: got 1 group ids, expected one per row \(2\)"):
        to_pipeline(ResponseBatch(mask, torch.zeros(2), ["a"], names=names))
    with pytest.raises(LayoutError, match=r"attention_mask: row 1 has length 2, expected between its last generated"):
        to_pipeline(ResponseBatch(mask, torch.zeros(2), ["a", "a"], lengths=torch.tensor([3, 2]), names=names))
    with pytest.raises(LayoutError, match=r"response_mask: expected a non-empty \[B, R\] tensor"):
        to_pipeline(ResponseBatch(torch.ones(0, 3), torch.zeros(0), []))


def test_verl_outcome_rewards_sum_one_score_and_refuse_dense_rows():
    from areal_adv.integrations.verl.layout import group_ids, outcome_rewards

    rewards = torch.tensor([[0.0, 0.0, 1.5], [0.0, -2.0, 0.0], [0.0, 0.0, 0.0]])
    assert outcome_rewards(rewards).tolist() == [1.5, -2.0, 0.0]
    dense = rewards.clone()
    dense[0, 0] = 0.1
    with pytest.raises(LayoutError, match=r"row 0 has 2 non-zero entries \(response positions \[0, 2\]\)"):
        outcome_rewards(dense)
    nan = rewards.clone()
    nan[2, 1] = float("nan")
    with pytest.raises(LayoutError, match=r"row 2, response position 1 is nan"):
        outcome_rewards(nan)
    import numpy as np

    assert group_ids(np.array(["a", "b", "a"], dtype=object), 3) == ["a", "b", "a"]
    with pytest.raises(LayoutError, match=r"uid: verl passed no uid index"):
        group_ids(None, 3)
