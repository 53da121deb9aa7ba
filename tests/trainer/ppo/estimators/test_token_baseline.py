"""The optimal token baseline estimators: hand numbers, the zero tail, singletons, errors, field checks.

The equality with verl 0.9.1's own functions on random batches is in
tests/integrations/test_verl_token_baseline.py (it imports verl).
"""

from __future__ import annotations

import math

import pytest
import torch

from areal_adv.api.cli_args import PPOActorConfig
from areal_adv.trainer.ppo.actor import PPOActor
from areal_adv.trainer.ppo.checks.batch_checks import BatchError
from areal_adv.utils.data import concat_batch

NAMES = ("optimal_token_baseline", "tir_optimal_token_baseline")


def actor(name: str, **kwargs) -> PPOActor:
    return PPOActor(
        PPOActorConfig(
            kl_ctl=0.0,
            reward_norm=None,
            adv_norm=None,
            advantage={"estimator": {"implementation": name, "kwargs": kwargs}},
        )
    )


def group(layouts: list[str], rewards: list[float], *, pi: float = 0.5, spp: float = 0.5) -> dict:
    """Rows from layouts such as "pggeg": p prompt, g generated, e environment; every generated token has π, Σπ²."""
    T = max(len(x) for x in layouts)
    n = len(layouts)
    loss_mask = torch.zeros(n, T, dtype=torch.long)
    attention = torch.zeros(n, T, dtype=torch.long)
    for b, layout in enumerate(layouts):
        attention[b, : len(layout)] = 1
        loss_mask[b] = torch.tensor([c == "g" for c in layout] + [False] * (T - len(layout)))
    return {
        "input_ids": torch.ones(n, T, dtype=torch.long) * attention,
        "attention_mask": attention,
        "loss_mask": loss_mask,
        "logprobs": torch.where(loss_mask.bool(), math.log(pi), 0.0),
        "rewards": torch.tensor(rewards),
        "sum_pi_squared": torch.where(loss_mask.bool(), spp, 0.0),
    }


def on_tokens(out: torch.Tensor, batch: dict) -> list[list[float]]:
    """Each row's advantages at its generated tokens (aligned: token p at position p - 1)."""
    return [
        [round(float(out[b, p - 1]), 6) for p in batch["loss_mask"][b].nonzero()[:, 0].tolist()]
        for b in range(out.shape[0])
    ]


@pytest.mark.parametrize("name", NAMES)
def test_hand_numbers_and_the_zero_tail(name):
    # w = 1 - 2(0.5) + 0.5 = 0.5 per token. Row A (reward 0): G = [0, 0], W = [0.5, 1];
    # row B (reward 1): G = [1, 1, 1], W = [0.5, 1, 1.5]. B_0 = 0.5 / 1 = 0.5, B_1 = 1 / 2 = 0.5,
    # B_2 = 1.5 / (1.5 + eps) ~ 1 (B alone), which the zero tail replaces by 0.
    groups = [group(["pgg", "pggg"], [0.0, 1.0])]
    batch, _ = concat_batch(groups)
    assert on_tokens(actor(name).compute_advantages(groups)["advantages"], batch) == [[-0.5, -0.5], [0.5, 0.5, 1.0]]
    flat = on_tokens(actor(name, handle_zero_tail=False).compute_advantages(groups)["advantages"], batch)
    assert flat == [[-0.5, -0.5], [0.5, 0.5, 0.0]]


def test_lining_up_by_position_or_by_generated_token():
    # Row B has an environment token after its first generated one. By response position, B's second
    # generated token shares position 2 with A's third; by generated-token index, with A's second.
    groups = [group(["pggg", "pgegg"], [1.0, 0.0])]
    batch, _ = concat_batch(groups)
    by_position = on_tokens(actor(NAMES[0]).compute_advantages(groups)["advantages"], batch)
    by_token = on_tokens(actor(NAMES[1]).compute_advantages(groups)["advantages"], batch)
    # TIR: both have 3 generated tokens, W = [0.5, 1, 1.5] for both: B_k = 1/2 -> A +0.5, B -0.5 everywhere
    assert by_token == [[0.5, 0.5, 0.5], [-0.5, -0.5, -0.5]]
    # OTB: positions 0, 1, 2 for A (W_A = 0.5, 1, 1.5) and 0, 2, 3 for B (W_B = 0.5, 1, 1.5 there):
    # position 0: B_0 = 0.5 / 1 = 0.5; position 1 has A alone: B_1 = 1 / (1 + eps) ~ 1, A ~ 0;
    # position 2: B_2 = 1.5 / (1.5 + 1) = 0.6; position 3 has B alone: B_3 = 0 (both rows have 3
    # generated tokens, so no zero tail).
    assert by_position == [[0.5, 0.0, 0.4], [-0.5, -0.6, 0.0]]


@pytest.mark.parametrize("name", NAMES)
def test_a_singleton_group_keeps_its_return(name):
    groups = [group(["pgg"], [0.7]), group(["pgg", "pg"], [1.0, 0.0])]
    batch, _ = concat_batch(groups)
    assert on_tokens(actor(name).compute_advantages(groups)["advantages"], batch)[0] == [0.7, 0.7]


@pytest.mark.parametrize("name", NAMES)
def test_is_weights_scale_the_variance_proxy_and_the_caller_batch_is_not_mutated(name):
    groups = [group(["pgg", "pgg"], [1.0, 0.0])]
    # weight 2 on row A's tokens: W_A = 4 x W_B, so B_t = (4 * 1 + 0) / 5 = 0.8 everywhere
    groups[0]["rollout_is_weights"] = torch.tensor([[0.0, 2.0, 2.0], [0.0, 1.0, 1.0]])
    before = {k: v.clone() for k, v in groups[0].items()}
    batch, _ = concat_batch(groups)
    assert on_tokens(actor(name).compute_advantages(groups)["advantages"], batch) == [[0.2, 0.2], [-0.8, -0.8]]
    assert all(torch.equal(before[k], groups[0][k]) for k in before)


@pytest.mark.parametrize("name", NAMES)
def test_errors_name_the_estimator_and_what_was_expected(name):
    groups = [group(["pgg", "pgg"], [1.0, 0.0])]
    without = [{k: v for k, v in groups[0].items() if k != "sum_pi_squared"}]
    with pytest.raises(ValueError, match=rf"estimator '{name}': the batch has no 'sum_pi_squared'"):
        actor(name).compute_advantages(without)
    with pytest.raises(ValueError, match=rf"'{name}'.*actor\.discount must be 1\.0, got 0\.9"):
        PPOActor(
            PPOActorConfig(
                kl_ctl=0.0, discount=0.9, reward_norm=None, advantage={"estimator": {"implementation": name}}
            )
        ).compute_advantages(groups)
    with pytest.raises(ValueError, match=rf"'{name}': handle_zero_tail must be true or false, got 1"):
        actor(name, handle_zero_tail=1).compute_advantages(groups)
    with pytest.raises(ValueError, match=rf"'{name}': eps must be a finite number > 0, got 0"):
        actor(name, eps=0).compute_advantages(groups)


@pytest.mark.parametrize(
    "field,value,match",
    [
        (
            "sum_pi_squared",
            1.5,
            r"sum_pi_squared: expected sums of squared probabilities in \[0, 1\] .* found 1\.5 "
            r"at row 0, position 1",
        ),
        ("sum_pi_squared", float("nan"), r"sum_pi_squared: .* found nan"),
        ("rollout_is_weights", -1.0, r"rollout_is_weights: expected finite importance weights >= 0 .* found -1\.0"),
    ],
)
def test_field_values_are_checked_on_generated_tokens(field, value, match):
    groups = [group(["pgg", "pgg"], [1.0, 0.0])]
    groups[0].setdefault("rollout_is_weights", torch.ones(2, 3))
    groups[0][field][0, 1] = value
    with pytest.raises(BatchError, match=match):
        actor(NAMES[0]).compute_advantages(groups)
    groups[0][field][0, 1] = 0.5
    groups[0][field][0, 0] = value  # the prompt position: not read, not checked
    actor(NAMES[0]).compute_advantages(groups)
    batch, meta = concat_batch(groups)
    batch[field] = batch[field][:, :2]
    with pytest.raises(BatchError, match=rf"{field}: expected a tensor of shape \(2, 3\) like input_ids"):
        actor(NAMES[0]).compute_advantages(batch, meta)


@pytest.mark.parametrize("name", NAMES)
def test_a_sum_pi_squared_below_pi_squared_is_refused_naming_the_field_and_row(name):
    """No distribution has Σπ² < π_t²: such a batch stops with the field, row and position, not a clamped w."""
    groups = [group(["pgg", "pgg"], [1.0, 0.0], pi=0.9, spp=0.85)]
    groups[0]["sum_pi_squared"][1, 2] = 0.5  # below 0.9² = 0.81, though within [0, 1]
    with pytest.raises(BatchError) as info:
        actor(name).compute_advantages(groups)
    message = str(info.value)
    assert message.startswith("sum_pi_squared: expected at least pi_t^2 = exp(old log-prob)^2 on generated tokens")
    assert "found 0.5 < pi_t^2 = 0.81 at row 1, position 2" in message


@pytest.mark.parametrize("name", NAMES)
def test_a_sum_pi_squared_a_few_ulps_below_pi_squared_is_rounding(name):
    """A near-deterministic token whose Σπ² reads a few float32 ulps under π_t² (two passes' rounding) runs."""
    logp = -1e-4  # pi_t = exp(logp), pi_t^2 = exp(2 logp): Σπ² a few ulps below it
    spp = float(torch.tensor(math.exp(2 * logp), dtype=torch.float32)) - 3 * torch.finfo(torch.float32).eps
    groups = [group(["pgg", "pgg"], [1.0, 0.0], pi=math.exp(logp), spp=spp)]
    assert float(groups[0]["sum_pi_squared"][0, 1]) < math.exp(2 * float(groups[0]["logprobs"][0, 1]))
    out = actor(name).compute_advantages(groups)["advantages"]
    assert bool(torch.isfinite(out).all())
    groups[0]["sum_pi_squared"][0, 1] = math.exp(2 * logp) * (1 - 1e-3)  # 0.1 % below: not rounding any more
    with pytest.raises(BatchError, match=r"sum_pi_squared: .* at row 0, position 1;"):
        actor(name).compute_advantages(groups)
