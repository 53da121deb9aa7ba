"""Built-in GAE-lambda functions, with hand-computed numbers."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from areal_adv.trainer.ppo.estimators.lambda_fn import (
    BUILTIN_LAMBDAS,
    constant,
    constant_gae_lambda,
    relative_position,
    relative_position_gae_lambda,
    vapo_length_adaptive,
    vapo_length_adaptive_gae,
)
from areal_adv.trainer.ppo.gae import GAELambdaContext, compute_gae_lambda


def _ctx(lengths: list[int], unit: str = "token") -> GAELambdaContext:
    t = torch.tensor(lengths, dtype=torch.long)
    return GAELambdaContext(effective_token_lengths=t, turn_counts=t, timestep_lengths=t, timestep_unit=unit)


def test_builtin_names():
    assert BUILTIN_LAMBDAS == {
        "constant": constant,
        "vapo": vapo_length_adaptive,
        "relative_position": relative_position,
    }


def test_constant():
    lam = constant(_ctx([0, 3, 100]), value=0.9)
    assert lam.dtype == torch.float32 and lam.tolist() == pytest.approx([0.9, 0.9, 0.9])
    assert constant(_ctx([5, 6])).tolist() == [1.0, 1.0]


def test_vapo_length_adaptive():
    # alpha 0.05: L=100 -> 1 - 1/5 = 0.8; L=40 -> 0.5; L=20 -> 0; L=10 -> -1 -> clamped 0; L=0 -> 0 (AReaL's).
    lam = vapo_length_adaptive(_ctx([100, 40, 20, 10, 0]))
    assert lam.dtype == torch.float32
    assert lam.tolist() == pytest.approx([0.8, 0.5, 0.0, 0.0, 0.0])
    # alpha 1: L=4 -> 0.75, L=1 -> 0.
    assert vapo_length_adaptive(_ctx([4, 1]), alpha=1.0).tolist() == pytest.approx([0.75, 0.0])


def test_relative_position():
    # q 0.25: L=3 -> 0.25 ** (1/2) = 0.5; L=5 -> 0.25 ** (1/4) = sqrt(0.5); L=2 -> 0.25; L=1 -> 1; L=0 -> 0.
    lam = relative_position(_ctx([3, 5, 2, 1, 0]), q=0.25)
    assert lam.dtype == torch.float32
    assert lam.tolist() == pytest.approx([0.5, math.sqrt(0.5), 0.25, 1.0, 0.0])
    # default q 0.5, L=2 -> 0.5; q 1 -> 1 everywhere.
    assert relative_position(_ctx([2])).tolist() == [0.5]
    assert relative_position(_ctx([7, 2]), q=1.0).tolist() == [1.0, 1.0]


def test_builtins_through_compute_gae_lambda_in_turn_units():
    mask = torch.tensor([[1, 1, 1, 0, 1, 1, 0], [1, 1, 0, 0, 0, 0, 0]])
    ids = torch.tensor([[0, 0, 0, -1, 1, 1, -1], [0, 0, -1, -1, -1, -1, -1]])
    lam = compute_gae_lambda(
        relative_position, loss_mask=mask, turn_ids=ids, timestep_unit="turn", gae_lambda_kwargs={"q": 0.25}
    )
    assert lam.tolist() == pytest.approx([0.25, 1.0])  # 2 turns -> q; 1 turn -> 1
    lam = compute_gae_lambda(
        vapo_length_adaptive, loss_mask=mask, turn_ids=ids, timestep_unit="token", gae_lambda_kwargs={"alpha": 0.5}
    )
    assert lam.tolist() == pytest.approx([0.6, 0.0])  # 5 tokens -> 1 - 1/2.5; 2 tokens -> 0


@pytest.mark.parametrize(
    "fn, kwargs, pattern",
    [
        (constant, {"value": 1.5}, r"constant: value is 1.5, expected a finite number in \[0.0, 1.0\]"),
        (constant, {"value": math.nan}, r"constant: value is nan"),
        (constant, {"value": "high"}, r"constant: value is 'high' \(str\), expected a number"),
        (
            vapo_length_adaptive,
            {"alpha": 0.0},
            r"vapo_length_adaptive: alpha is 0.0, expected a finite number in \(0.0, inf\)",
        ),
        (vapo_length_adaptive, {"alpha": math.inf}, r"vapo_length_adaptive: alpha is inf"),
        (vapo_length_adaptive, {"alpha": True}, r"alpha is True \(bool\)"),
        (relative_position, {"q": 0.0}, r"relative_position: q is 0.0, expected a finite number in \(0.0, 1.0\]"),
        (relative_position, {"q": 1.1}, r"relative_position: q is 1.1"),
    ],
)
def test_kwarg_validation(fn, kwargs, pattern):
    with pytest.raises(ValueError, match=pattern):
        fn(_ctx([3]), **kwargs)


def test_unknown_kwarg_is_reported_with_the_source():
    from areal_adv.trainer.ppo.gae import LambdaFunctionError

    with pytest.raises(LambdaFunctionError) as err:
        compute_gae_lambda(
            constant,
            loss_mask=torch.ones(1, 3),
            timestep_unit="token",
            gae_lambda_kwargs={"valu": 0.5},
            source="actor.gae_lambda",
        )
    assert str(err.value).startswith("actor.gae_lambda: the GAE lambda function raised TypeError")
    assert "valu" in str(err.value) and isinstance(err.value.__cause__, TypeError)


# --- AReaL 2's functions of the same meaning ----------------------------------------------------------


def _areal_vapo(length: int, alpha: float) -> np.float32:
    """AReaL 2's `vapo_length_adaptive_gae` for one row, written out in float32 (areal/trainer/ppo/lambda_fn.py)."""
    if length <= 0:
        return np.float32(0.0)
    lam = np.float32(1.0) - np.float32(1.0) / (np.float32(alpha) * np.float32(length))
    return max(lam, np.float32(0.0))


def _areal_relative_position(length: int, q: float) -> np.float32:
    """AReaL 2's `relative_position_gae_lambda` for one row: exp(log q / (L - 1)), 1 for one step, 0 for none."""
    if length <= 0:
        return np.float32(0.0)
    if length == 1:
        return np.float32(1.0)
    return np.exp(np.float32(math.log(q)) / np.float32(length - 1), dtype=np.float32)


@given(
    lengths=st.lists(st.integers(0, 5000), min_size=1, max_size=40),
    alpha=st.floats(1e-3, 10.0),
    q=st.floats(1e-3, 1.0),
)
@settings(max_examples=150, deadline=None)
def test_the_builtins_equal_areal_2_s_functions_row_by_row(lengths: list[int], alpha: float, q: float) -> None:
    ctx = _ctx(lengths)
    vapo = vapo_length_adaptive(ctx, alpha=alpha)
    rel = relative_position(ctx, q=q)
    for i, length in enumerate(lengths):
        assert vapo[i].item() == pytest.approx(float(_areal_vapo(length, alpha)), rel=1e-6, abs=1e-7)
        assert rel[i].item() == pytest.approx(float(_areal_relative_position(length, q)), rel=1e-6, abs=1e-7)


def test_areal_2_s_names_are_the_same_functions_and_take_areal_s_plain_dict() -> None:
    assert constant_gae_lambda is constant and vapo_length_adaptive_gae is vapo_length_adaptive
    assert relative_position_gae_lambda is relative_position
    t = torch.tensor([0, 1, 4, 30])
    plain = {"effective_token_lengths": t, "turn_counts": torch.zeros_like(t), "timestep_lengths": t}  # AReaL's dict
    assert torch.equal(vapo_length_adaptive_gae(plain, alpha=0.5), vapo_length_adaptive(_ctx([0, 1, 4, 30]), alpha=0.5))
    assert torch.equal(relative_position_gae_lambda(plain, q=0.3), relative_position(_ctx([0, 1, 4, 30]), q=0.3))
    assert constant_gae_lambda(plain, value=0.7).tolist() == pytest.approx([0.7] * 4)


def test_a_config_written_for_areal_2_names_them_by_areal_s_path() -> None:
    """`actor.gae_lambda: areal.trainer.ppo.lambda_fn.vapo_length_adaptive_gae` resolves here, with no warning."""
    import warnings

    from areal_adv.api.cli_args import PPOActorConfig
    from areal_adv.trainer.ppo.stage_resolution import resolve_advantage

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        config = PPOActorConfig(
            gae_lambda="areal.trainer.ppo.lambda_fn.vapo_length_adaptive_gae", gae_lambda_kwargs={"alpha": 0.5}
        )
        resolved = resolve_advantage(config)
    assert resolved.gae_lambda is vapo_length_adaptive and dict(resolved.gae_lambda_kwargs) == {"alpha": 0.5}
