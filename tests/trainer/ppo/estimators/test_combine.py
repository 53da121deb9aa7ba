"""`combine`: weighted sums of estimators and the on-policy distillation term, against ROLL's mixed OPD.

ROLL (`roll/utils/functionals.py:compute_advantage` with `use_opd`) computes the
GRPO advantage (group-normalised score, REINFORCE return) and subtracts
`opd_kl_coef * compute_approx_kl(logp, teacher_logp, kl_penalty)` on every response
token. The preset `grpo_distill` and hand-written `combine` configs go through
`PPOActor.compute_advantages` and are compared with that loop token by token.
"""

from __future__ import annotations

import math
from pathlib import Path

import peer_reference as ref
import pytest
import torch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from areal_adv.api.cli_args import NormConfig, PPOActorConfig, load_config
from areal_adv.trainer.ppo.actor import PPOActor
from areal_adv.utils.data import concat_batch
from areal_adv.utils.dynamic_import import PluginResolutionError

SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
PRESET = Path(__file__).resolve().parents[4] / "examples" / "presets" / "grpo_distill.yaml"
MAX_DIFF = [0.0]


def roll_kl(logp: float, teacher: float, kind: str) -> float:
    """ROLL's compute_approx_kl, per token ('kl', 'mse', 'k3' as k1, k2, k3)."""
    r = logp - teacher
    if kind == "k1":
        return r
    if kind == "k2":
        return 0.5 * r * r
    return max(-10.0, min(10.0, math.exp(-r) + r - 1.0))


def with_teacher(seed: int, sizes: list[int], field: str = "ref_logp"):
    batch, meta = concat_batch(ref.make_peer_groups(seed, sizes, binary=seed % 2 == 0))
    gen = torch.Generator().manual_seed(seed)
    batch[field] = -torch.rand(batch["input_ids"].shape, generator=gen) * 3
    return batch, meta


def roll_opd(batch: dict, meta, coef: float, kind: str, field: str = "ref_logp") -> list[list[float]]:
    resp = ref.responses(batch, meta)
    grpo = ref.broadcast(ref.grpo(resp.scores, resp.index, eps=1e-6), resp)
    out = []
    for b, (positions, adv) in enumerate(zip(resp.actions, grpo)):
        out.append(
            [
                a - coef * roll_kl(float(batch["logprobs"][b, t + 1]), float(batch[field][b, t]), kind)
                for t, a in zip(positions, adv)
            ]
        )
    return out


def check(adv: torch.Tensor, batch, meta, expected: list[list[float]]) -> None:
    for b, (positions, exp) in enumerate(zip(ref.responses(batch, meta).actions, expected)):
        got, want = adv[b, positions].double(), torch.tensor(exp, dtype=torch.float64)
        if positions:
            MAX_DIFF[0] = max(MAX_DIFF[0], float((got - want).abs().max()))
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def combine_config(terms: list[dict]) -> PPOActorConfig:
    return PPOActorConfig(
        kl_ctl=0.0,
        reward_clip=1e9,
        discount=1.0,
        adv_norm=None,
        reward_norm=NormConfig(mean_level="group", std_level="group", eps=1e-6),
        advantage={"estimator": {"implementation": "combine", "kwargs": {"terms": terms}}},
    )


def test_preset_equals_rolls_mixed_distillation_on_30_batches():
    actor = PPOActor(load_config(PRESET).actor)
    for seed in range(30):
        batch, meta = with_teacher(seed, [2 + seed % 4, 3, 2 + seed % 3])  # groups of >= 2: singletons differ (docs)
        check(actor.compute_advantages(batch, meta)["advantages"], batch, meta, roll_opd(batch, meta, 0.1, "k1"))


@SETTINGS
@given(
    sizes=st.lists(st.integers(2, 6), min_size=1, max_size=4),
    seed=st.integers(0, 10_000),
    coef=st.sampled_from([0.0, 0.05, 1.0]),
    kind=st.sampled_from(["k1", "k2", "k3"]),
    field=st.sampled_from(["ref_logp", "teacher_logp"]),
)
@example(sizes=[2], seed=0, coef=1.0, kind="k3", field="teacher_logp")
def test_combine_equals_rolls_mixed_distillation(sizes, seed, coef, kind, field):
    batch, meta = with_teacher(seed, sizes, field)
    actor = PPOActor(
        combine_config(
            [
                {"estimator": "reinforce_return", "weight": 1.0},
                {"term": "distillation", "teacher": field, "kl_estimator": kind, "weight": coef},
            ]
        )
    )
    check(actor.compute_advantages(batch, meta)["advantages"], batch, meta, roll_opd(batch, meta, coef, kind, field))


def test_two_estimators_sum_with_their_weights_and_returns_come_from_the_first():
    batch, meta = with_teacher(3, [3, 4])
    batch["values"] = torch.randn(batch["input_ids"].shape, generator=torch.Generator().manual_seed(1))
    cfg = combine_config([{"estimator": "token_gae", "weight": 0.5}, {"estimator": "reinforce_return", "weight": 2.0}])
    out = PPOActor(cfg).compute_advantages(batch, meta)
    single = {}
    for name in ("token_gae", "reinforce_return"):
        c = combine_config([{"estimator": name}])
        single[name] = PPOActor(c).compute_advantages(batch, meta)
    torch.testing.assert_close(
        out["advantages"],
        0.5 * single["token_gae"]["advantages"] + 2.0 * single["reinforce_return"]["advantages"],
        rtol=1e-6,
        atol=1e-6,
    )
    assert torch.equal(out["returns"], single["token_gae"]["returns"])


@pytest.mark.parametrize(
    "terms, message",
    [
        ([], "non-empty list of terms"),
        ([{"term": "distillation"}], "at least one estimator term"),
        ([{"estimator": "reinforce_return", "term": "distillation"}], "exactly one of 'estimator'"),
        ([{"estimator": "reinforce_return", "weight": "big"}], r"terms\[0\]: weight must be a finite number"),
        (
            [{"estimator": "reinforce_return"}, {"term": "distillation", "teacher": "critic"}],
            r"terms\[1\]: a per-token term",
        ),
        ([{"estimator": "combine"}], "cannot itself be 'combine'"),
        ([{"estimator": "no_such.module.fn"}], "no_such"),
        ([{"estimator": "reinforce_return", "kwargs": {"nope": 1}}], "nope"),
    ],
)
def test_bad_terms_fail_when_the_actor_is_built(terms, message):
    with pytest.raises((PluginResolutionError, ValueError), match=message):
        PPOActor(combine_config(terms))


def test_a_missing_teacher_field_names_it():
    batch, meta = with_teacher(1, [2, 2])
    actor = PPOActor(
        combine_config(
            [{"estimator": "reinforce_return"}, {"term": "distillation", "teacher": "teacher_logp", "weight": 0.1}]
        )
    )
    with pytest.raises(Exception, match="reads the batch's 'teacher_logp'"):
        actor.compute_advantages(batch, meta)
