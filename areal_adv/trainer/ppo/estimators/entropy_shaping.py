"""Entropy-based advantage shaping (arXiv 2506.14758, "Reasoning with Exploration").

The paper adds a clipped, gradient-free entropy bonus to every token's advantage:

    A'_t = A_t + psi(H_t),   psi(H_t) = min(alpha * H_t.detach(), |A_t| / kappa)

H_t is the entropy of the policy's next-token distribution at token t. The clip
|A_t| / kappa (kappa >= 1) keeps the bonus at most the advantage's own magnitude,
so it never reverses an advantage's sign (kappa = 1 can bring a negative one to
0) and vanishes where A_t = 0. Here H_t is the
behaviour policy's entropy at sampling time (`token_entropy`, computed by the
trainer at prepare time), a constant, so the term carries no gradient.

As a `process_adv_shaping` stage it runs after `adv_norm`, on the final
advantages of any estimator; `then` first applies one of the process-reward
shapings (`additive` by default, which is the identity without process rewards),
so GRPO + GVPO + entropy shaping is one config.
"""

from __future__ import annotations

from typing import Any

import torch

from areal_adv.api.config_checks import is_number
from areal_adv.api.stage_registry import register_stage
from areal_adv.trainer.ppo import advantage_algorithms as algos
from areal_adv.trainer.ppo.stage_types import ProcessAdvantageInputs

__all__ = ["ENTROPY_THEN", "entropy_advantage"]

ENTROPY_THEN = ("additive", "gvpo", "process_weighted", "none")
_WHERE = "process_adv_shaping 'entropy_advantage'"


def _number(name: str, value: Any, *, low: float, strict: bool = False) -> float:
    if not is_number(value, low=low, low_open=strict):
        raise ValueError(f"{_WHERE}: {name} must be a finite number {'>' if strict else '>='} {low}, got {value!r}")
    return float(value)


def _then(inputs: ProcessAdvantageInputs, then: Any, then_kwargs: Any) -> torch.Tensor:
    if then not in ENTROPY_THEN:
        raise ValueError(f"{_WHERE}: then must be one of {list(ENTROPY_THEN)}, got {then!r}")
    if not isinstance(then_kwargs, dict) or (then_kwargs and then != "gvpo"):
        raise ValueError(
            f"{_WHERE}: then_kwargs must be a mapping, and only 'gvpo' takes any (got {then_kwargs!r} "
            f"for then={then!r})"
        )
    if then == "none":
        return inputs.advantages
    return algos.BUILTIN_PROCESS[then](inputs, **then_kwargs)


@register_stage("process_adv_shaping", "entropy_advantage")
def entropy_advantage(
    inputs: ProcessAdvantageInputs,
    *,
    alpha: float = 0.4,
    kappa: float = 2.0,
    then: str = "additive",
    then_kwargs: dict[str, Any] | None = None,
) -> torch.Tensor:
    """A + min(alpha * H, |A| / kappa) on generated tokens, after the `then` process shaping.

    "Reasoning with Exploration: An Entropy Perspective" (arXiv:2506.14758); no reference
    code is reproduced, the formula is the paper's definition.
    """
    alpha = _number("alpha", alpha, low=0.0)
    kappa = _number("kappa", kappa, low=1.0)
    entropy = inputs.token_entropy
    if entropy is None:
        raise ValueError(
            f"{_WHERE}: the batch has no 'token_entropy'; the shaping needs the behaviour policy's entropy at each "
            "generated token, [B, T] stored at the token like logprobs (the trainer adds it when this stage is "
            "configured)"
        )
    advantages = _then(inputs, then, {} if then_kwargs is None else then_kwargs)
    bonus = torch.minimum(alpha * entropy.detach().to(advantages.dtype), advantages.abs() / kappa)
    return torch.where(inputs.loss_mask.bool(), advantages + bonus, advantages)


entropy_advantage.batch_fields = ("token_entropy",)  # the trainer computes it for stages that read it
