"""A task with a random stream of its own (a noisy scorer), for the checkpoint tests (imported by dotted path).

Its score flips the right answer's reward with probability `flip`, drawn from the task's own
`random.Random`: a resumed run equals the uninterrupted one only when a checkpoint saves that stream's
position (`state_dict`) and the resume restores it (`load_state_dict`).
"""

from __future__ import annotations

import random
from typing import Any

from areal_adv.api.task_specs import ArithSpec
from areal_adv.trainer.rollout.tasks.arith import ArithTask


class NoisyArith(ArithTask):
    """Keeps its stream but offers no state: a resumed run starts the stream afresh."""

    def __init__(self, flip: float, seed: int) -> None:
        super().__init__(ArithSpec())
        self.flip, self.rng = flip, random.Random(seed)

    def score(self, row: dict[str, Any], completion: str) -> float:
        right = super().score(row, completion)
        return 1.0 - right if self.rng.random() < self.flip else right


class NoisyArithWithState(NoisyArith):
    def state_dict(self) -> dict[str, Any]:
        version, internal, gauss = self.rng.getstate()
        return {"rng": [version, list(internal), gauss]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        version, internal, gauss = state["rng"]
        self.rng.setstate((version, tuple(internal), gauss))


def make_noisy_arith(flip: float = 0.5, seed: int = 0, keeps_state: bool = True) -> NoisyArith:
    return (NoisyArithWithState if keeps_state else NoisyArith)(flip, seed)
