"""Plugins for the multi-reward and stateful-stage tests, referenced by dotted path (`state_plugins.<name>`)."""

from __future__ import annotations

import torch

from areal_adv.trainer.ppo.advantage import OutcomeResult
from areal_adv.trainer.ppo.stage_state import StageState

SEEN: dict[str, object] = {}


def component_spy(inputs):
    """Records what the outcome stage sees, returns the plain sum of the components."""
    SEEN["keys"], SEEN["weights"] = inputs.meta.reward_keys, inputs.meta.reward_weights
    SEEN["rewards"] = inputs.data["rewards"].clone()
    return OutcomeResult(rewards=inputs.data["rewards"].sum(dim=1))


def component_passthrough(inputs):
    """Wrong: returns the [B, K] components instead of one reward per row."""
    return OutcomeResult(rewards=inputs.data["rewards"] * 2)


def running_mean(inputs, *, state: StageState, decay: float = 0.5):
    """A custom stateful stage: subtracts a running mean of past batch rewards, then updates it."""
    rewards = inputs.data["rewards"].float()
    mean = state.get("mean", 0.0)
    state.set("mean", decay * mean + (1.0 - decay) * float(rewards.mean()))
    state.set("calls", state.get("calls", 0) + 1)
    return OutcomeResult(rewards=rewards - mean)


def failing_estimator(inputs):
    raise RuntimeError("estimator broke")


def state_writer_in_place(inputs, *, state: StageState):
    """Writes a tensor into the state, for the in-place/rollback tests."""
    table = state.get("table")
    state.set("table", torch.zeros(3) if table is None else table + 1)
    return OutcomeResult(rewards=inputs.data["rewards"].float())
