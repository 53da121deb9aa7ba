"""Two example task plugins: a single-turn task and a multi-turn environment.

Point a config at a factory (`task.implementation: examples.custom_task.tasks.make_max_task`);
every rank imports it at start-up and calls it with `task.kwargs`. Tasks speak
text: the trainer encodes prompts and observations with the model's tokenizer
and decodes completions before they reach `score` or `step`.
"""

from __future__ import annotations

import random
from typing import Any

from areal_adv.trainer.rollout.tasks import Environment, StepResult, Task


class MaxTask(Task):
    """Single turn: `max 3 7 2 =` -> `7`. Procedural (`sample`), scored by `score`."""

    name = "max"

    def __init__(self, length: int = 3, high: int = 9) -> None:
        self.length, self.high = length, high
        self.vocabulary = (*[str(i) for i in range(high + 1)], "max", "=")  # for the random-init model only
        self.max_turn_tokens = 1  # the answer is one word

    def sample(self, rng: random.Random, split: str) -> dict[str, Any]:
        values = [rng.randint(0, self.high) for _ in range(self.length)]
        return {"values": values, "answer": str(max(values))}

    def prompt(self, row: dict[str, Any]) -> str:
        return "max " + " ".join(map(str, row["values"])) + " ="

    def score(self, row: dict[str, Any], completion: str) -> float:
        return 1.0 if completion.strip() == row["answer"] else 0.0


def make_max_task(length: int = 3, high: int = 9) -> MaxTask:
    return MaxTask(length, high)


class ReachEnvironment(Environment):
    """Start at 0; each turn add `1` or `2`; land exactly on the target to win."""

    def __init__(self, target: int, max_turns: int) -> None:
        self.target, self.max_turns = target, max_turns
        self.position, self.turns = 0, 0

    def reset(self) -> str:
        return f"reach {self.target}"

    def step(self, action: str) -> StepResult:
        words = action.split()
        move = int(words[0]) if words and words[0] in ("1", "2") else 0
        self.position += move
        self.turns += 1
        on_track = 1.0 if move and self.position <= self.target else 0.0  # a per-turn process score
        if self.position == self.target:
            return StepResult(reward=1.0, done=True, process_score=on_track)
        if self.position > self.target or self.turns >= self.max_turns:
            return StepResult(reward=0.0, done=True, process_score=on_track)
        return StepResult(observation=f" at {self.position}", process_score=on_track)


class ReachTask(Task):
    """Multi-turn: reach a target in steps of 1 or 2; observations are `at <k>`."""

    name = "reach"
    multi_turn = True
    has_process_scorer = True

    def __init__(self, low: int = 3, high: int = 6, max_turns: int = 6) -> None:
        self.low, self.high, self.max_turns = low, high, max_turns
        self.vocabulary = (*[str(i) for i in range(high + 3)], "reach", "at", "<eot>")
        self.stop_words = ("<eot>",)
        self.max_turn_tokens = 2

    def sample(self, rng: random.Random, split: str) -> dict[str, Any]:
        return {"target": rng.randint(self.low, self.high)}

    def environment(self, row: dict[str, Any]) -> ReachEnvironment:
        return ReachEnvironment(int(row["target"]), self.max_turns)


def make_reach_task(low: int = 3, high: int = 6, max_turns: int = 6) -> ReachTask:
    return ReachTask(low, high, max_turns)
