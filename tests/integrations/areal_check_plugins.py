"""A plugin written against the `areal.*` paths, as a user of the specification writes it (areal_checks.py)."""

from areal.trainer.ppo.advantage import OutcomeResult, OutcomeRewardInputs

#: the module of every input type the stage was called with (ours, whatever path the plugin imported)
CALLS: list[str] = []


def halve_outcome(inputs: OutcomeRewardInputs) -> OutcomeResult:
    CALLS.append(type(inputs).__module__)
    return OutcomeResult(rewards=inputs.data["rewards"] * 0.5)
