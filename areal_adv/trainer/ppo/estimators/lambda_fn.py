"""Built-in GAE-lambda functions: ``fn(ctx: GAELambdaContext, **kwargs) -> Tensor[B]``.

Why per-row lambdas: long responses need a lambda close to 1 so the final
reward still reaches early tokens, while short ones can afford more bias
reduction (VAPO's length-adaptive GAE). Each function reads the lengths in
the unit of the estimator actually used (`ctx["timestep_lengths"]`: tokens for
token GAE, turns for turn GAE) and returns float32 values in [0, 1] on the
context's device. Config files refer to them by the short names in
`BUILTIN_LAMBDAS` or by their import path.

They compute what AReaL 2's functions of the same meaning compute
(`areal/trainer/ppo/lambda_fn.py`: `constant_gae_lambda`, `vapo_length_adaptive_gae`,
`relative_position_gae_lambda`; those names are aliases here), bit for bit, empty rows
included, and they index the context, so they also run inside AReaL's own actor, which
hands them a plain dict: `actor.gae_lambda:
areal_adv.trainer.ppo.estimators.lambda_fn.vapo_length_adaptive` with `gae_lambda_kwargs:
{alpha: 0.05}` works in both.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import torch

from areal_adv.api.config_checks import is_real

__all__ = [
    "BUILTIN_LAMBDAS",
    "constant",
    "constant_gae_lambda",
    "relative_position",
    "relative_position_gae_lambda",
    "vapo_length_adaptive",
    "vapo_length_adaptive_gae",
]


def constant(ctx: Mapping[str, torch.Tensor], value: float = 1.0) -> torch.Tensor:
    """The same lambda for every row."""
    value = _check_kwarg("constant", "value", value, low=0.0, high=1.0)
    return torch.full_like(ctx["timestep_lengths"], value, dtype=torch.float32)


def vapo_length_adaptive(ctx: Mapping[str, torch.Tensor], alpha: float = 0.05) -> torch.Tensor:
    """VAPO: lambda = 1 - 1 / (alpha * L), clamped at 0; a row without steps (L = 0) gets 0.

    VAPO's length-adaptive GAE (arXiv:2504.05118).

    Rows shorter than 1/alpha steps get lambda 0 (pure TD); longer rows
    approach 1 so the sum of the TD-error weights grows with the length.
    Computed in float32, in AReaL's order of operations.
    """
    alpha = _check_kwarg("vapo_length_adaptive", "alpha", alpha, low=0.0, low_open=True)
    lengths = ctx["timestep_lengths"]
    lam = (1.0 - 1.0 / (alpha * lengths.to(torch.float32).clamp_min(1.0))).clamp_min(0.0)
    return torch.where(lengths > 0, lam, torch.zeros_like(lam))


def relative_position(ctx: Mapping[str, torch.Tensor], q: float = 0.5) -> torch.Tensor:
    """lambda = q ** (1 / (L - 1)), so the first step's weight on the last TD error is q.

    With discount 1 a terminal reward keeps q ** ((L - k) / (L - 1)) at step k: the same
    share at the same relative position, whatever the row's length (AReaL's
    `relative_position_gae_lambda`). A one-step row has nothing to decay over and gets 1;
    a row without steps gets 0. Computed as exp(log q / (L - 1)) in float32, as AReaL does.
    """
    q = _check_kwarg("relative_position", "q", q, low=0.0, high=1.0, low_open=True)
    lengths = ctx["timestep_lengths"]
    lam = torch.exp(math.log(q) / (lengths - 1).clamp_min(1).to(torch.float32))
    one_step = torch.where(lengths == 1, torch.ones_like(lam), torch.zeros_like(lam))
    return torch.where(lengths > 1, lam, one_step)


#: AReaL 2's names for the same functions (`areal.trainer.ppo.lambda_fn`), so its configs run here unchanged.
constant_gae_lambda = constant
vapo_length_adaptive_gae = vapo_length_adaptive
relative_position_gae_lambda = relative_position

BUILTIN_LAMBDAS: dict[str, Callable[..., torch.Tensor]] = {
    "constant": constant,
    "vapo": vapo_length_adaptive,
    "relative_position": relative_position,
}


def _check_kwarg(
    fn: str,
    name: str,
    value: Any,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
) -> float:
    """A finite real number in range, else a ValueError naming the function and kwarg."""
    if not is_real(value):
        raise ValueError(f"{fn}: {name} is {value!r} ({type(value).__name__}), expected a number")
    value = float(value)
    too_low = low is not None and (value < low or (low_open and value == low))
    too_high = high is not None and value > high
    if not math.isfinite(value) or too_low or too_high:
        lo = "" if low is None else ("(" if low_open else "[") + f"{low}, "
        hi = "inf)" if high is None else f"{high}]"
        raise ValueError(f"{fn}: {name} is {value!r}, expected a finite number in {lo or '(-inf, '}{hi}")
    return value
