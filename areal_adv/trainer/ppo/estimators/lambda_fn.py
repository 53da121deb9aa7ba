"""Built-in GAE-lambda functions: ``fn(ctx: GAELambdaContext, **kwargs) -> Tensor[B]``.

Why per-row lambdas: long responses need a lambda close to 1 so the final
reward still reaches early tokens, while short ones can afford more bias
reduction (VAPO's length-adaptive GAE). Each function reads the lengths in
the unit of the estimator actually used (`ctx.timestep_lengths`: tokens for
token GAE, turns for turn GAE) and returns float32 values in [0, 1] on the
context's device. Config files refer to them by the short names in
`BUILTIN_LAMBDAS` or by their import path.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from areal_adv.api.config_checks import is_real
from areal_adv.trainer.ppo.gae import GAELambdaContext

__all__ = ["BUILTIN_LAMBDAS", "constant", "relative_position", "vapo_length_adaptive"]


def constant(ctx: GAELambdaContext, value: float = 1.0) -> torch.Tensor:
    """The same lambda for every row."""
    value = _check_kwarg("constant", "value", value, low=0.0, high=1.0)
    return torch.full_like(ctx.timestep_lengths, value, dtype=torch.float32)


def vapo_length_adaptive(ctx: GAELambdaContext, alpha: float = 0.05) -> torch.Tensor:
    """VAPO: lambda = 1 - 1 / (alpha * L), clamped to [0, 1]; L = 0 gives 1.

    VAPO's length-adaptive GAE (arXiv:2504.05118).

    Rows shorter than 1/alpha steps get lambda 0 (pure TD); longer rows
    approach 1 so the sum of the TD-error weights grows with the length.
    """
    alpha = _check_kwarg("vapo_length_adaptive", "alpha", alpha, low=0.0, low_open=True)
    length = ctx.timestep_lengths.to(torch.float64)
    lam = 1.0 - 1.0 / (alpha * length.clamp(min=1.0))
    lam = torch.where(length > 0, lam, torch.ones_like(lam))
    return lam.clamp(0.0, 1.0).to(torch.float32)


def relative_position(ctx: GAELambdaContext, q: float = 0.5) -> torch.Tensor:
    """lambda = q ** (1 / (L - 1)), so the first step's weight on the last TD error is q.

    This package's own rule (no paper): it fixes the weight the first step of a row gives
    its last TD error, whatever the row's length.

    Rows with L <= 1 have nothing to look ahead to and get 1.
    """
    q = _check_kwarg("relative_position", "q", q, low=0.0, high=1.0, low_open=True)
    length = ctx.timestep_lengths.to(torch.float64)
    lam = q ** (1.0 / (length - 1.0).clamp(min=1.0))
    return torch.where(length > 1, lam, torch.ones_like(lam)).to(torch.float32)


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
