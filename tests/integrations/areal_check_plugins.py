"""Plugins as users write them: a stage against the `areal.*` paths (areal_checks.py), and a GAE-lambda function
against this package's attribute names that also runs inside AReaL's own actor (areal2_reference.CASES)."""

import math

import torch
from areal.trainer.ppo.advantage import OutcomeResult, OutcomeRewardInputs

#: the module of every input type the stage was called with (ours, whatever path the plugin imported)
CALLS: list[str] = []


def halve_outcome(inputs: OutcomeRewardInputs) -> OutcomeResult:
    CALLS.append(type(inputs).__module__)
    return OutcomeResult(rewards=inputs.data["rewards"] * 0.5)


def attribute_style_lambda(ctx, *, q: float):
    """A GAE-lambda function written against this package's attribute names; `GAELambdaContext.of` lets it run on
    AReaL's plain dict as well (the turn-unit `relative_position` rule, written out)."""
    from areal_adv.trainer.ppo.gae import GAELambdaContext

    ctx = GAELambdaContext.of(ctx)
    assert ctx.timestep_unit == "turn", ctx.timestep_unit
    steps = ctx.timestep_lengths
    lam = torch.exp(math.log(q) / (steps - 1).clamp_min(1).to(torch.float32))
    return torch.where(steps > 1, lam, torch.where(steps == 1, torch.ones_like(lam), torch.zeros_like(lam)))
