"""Task (b): guess a hidden number in a few turns with higher/lower feedback.

The environment's words (`higher`, `lower`, `invalid`) are appended between
turns as observation text and are never trained on. The optional process
scorer rates each turn by whether its guess is still consistent with all the
feedback so far.
"""

from __future__ import annotations

import random
from typing import Any

from areal_adv.api.task_specs import GuessSpec
from areal_adv.trainer.rollout.tasks.base import Environment, StepResult, Task

EOT, HIGHER, LOWER, INVALID, PROMPT = "<eot>", "higher", "lower", "invalid", "guess"


def parse_guess(text: str, num_range: int) -> int | None:
    """The guess is the turn's first word when it is a number in [0, num_range)."""
    words = text.split()
    if not words or not words[0].isdigit():
        return None
    value = int(words[0])
    return value if value < num_range else None


def feedback_word(guess: int | None, hidden: int) -> str | None:
    """`None` means correct; otherwise the word the environment answers."""
    if guess is None:
        return INVALID
    if guess == hidden:
        return None
    return HIGHER if hidden > guess else LOWER


def is_consistent(guess: int | None, low: int, high: int) -> bool:
    """A guess is consistent when it lies in the interval the feedback still allows."""
    return guess is not None and low <= guess <= high


class GuessEnvironment(Environment):
    def __init__(self, spec: GuessSpec, hidden: int) -> None:
        self.spec = spec
        self.hidden = hidden
        self.low, self.high = 0, spec.num_range - 1
        self.turns = 0

    def reset(self) -> str:
        return PROMPT

    def state_key(self) -> tuple[int, int, int]:
        """The state a turn acts in (GiGPO's anchor): the interval the feedback still allows, and the turn."""
        return (self.low, self.high, self.turns)

    def step(self, action: str) -> StepResult:
        guess = parse_guess(action, self.spec.num_range)
        score = self._score(guess)
        self.turns += 1
        word = feedback_word(guess, self.hidden)
        if word is None:
            return StepResult(reward=1.0, done=True, process_score=score)
        if word == HIGHER:
            self.low = max(self.low, guess + 1)
        elif word == LOWER:
            self.high = min(self.high, guess - 1)
        if self.turns >= self.spec.max_turns:
            return StepResult(done=True, process_score=score)
        return StepResult(observation=f" {word}", process_score=score)

    def _score(self, guess: int | None) -> float:
        good = is_consistent(guess, self.low, self.high)
        if self.spec.process_reward == "signed":
            return 1.0 if good else -1.0
        return 1.0 if good else 0.0


class GuessTask(Task):
    """Prompt `guess`; each turn is a number, optionally ended by `<eot>`."""

    name = "guess"
    multi_turn = True
    has_process_scorer = True

    def __init__(self, spec: GuessSpec) -> None:
        self.spec = spec
        numbers = [str(i) for i in range(spec.num_range)]
        self.vocabulary = (*numbers, EOT, HIGHER, LOWER, INVALID, PROMPT)
        self.stop_words = (EOT,)
        self.max_turn_tokens = spec.max_turn_tokens

    def sample(self, rng: random.Random, split: str) -> dict[str, Any]:
        return {"hidden": rng.randrange(self.spec.num_range)}

    def environment(self, row: dict[str, Any]) -> GuessEnvironment:
        return GuessEnvironment(self.spec, int(row["hidden"]))
