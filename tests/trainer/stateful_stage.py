"""A stage that keeps state across steps, for checkpoint tests (imported by dotted path).

`running_baseline` subtracts a running mean of past batch rewards from every
reward and updates the mean afterwards, so a resumed run only equals the
uninterrupted one when the stage's state is checkpointed and restored.
"""

from __future__ import annotations

from areal_adv.trainer.ppo.advantage import OutcomeResult, OutcomeRewardInputs


class RunningBaseline:
    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.mean, self.calls = 0.0, 0

    def __call__(self, inputs: OutcomeRewardInputs, *, decay: float = 0.5) -> OutcomeResult:
        rewards = inputs.data["rewards"]
        shaped = rewards - self.mean
        self.mean = decay * self.mean + (1.0 - decay) * float(rewards.float().mean())
        self.calls += 1
        return OutcomeResult(rewards=shaped)

    def state_dict(self) -> dict:
        return {"mean": self.mean, "calls": self.calls}

    def load_state_dict(self, state: dict) -> None:
        self.mean, self.calls = float(state["mean"]), int(state["calls"])


running_baseline = RunningBaseline()
