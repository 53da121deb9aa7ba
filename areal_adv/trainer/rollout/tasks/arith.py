"""Task (a): single-turn arithmetic with a verifiable 1/0 reward, in text."""

from __future__ import annotations

import random
from typing import Any

from areal_adv.api.task_specs import ArithSpec
from areal_adv.trainer.rollout.tasks.base import Task

_SYMBOLS = {"add": "+", "sub_abs": "-", "mod10": "%"}


def arith_answer(a: int, b: int, op: str) -> int:
    """The ground truth; `sub_abs` keeps answers non-negative, `mod10` single-digit."""
    if op == "add":
        return a + b
    if op == "sub_abs":
        return abs(a - b)
    if op == "mod10":
        return (a + b) % 10
    raise ValueError(f"unknown op {op!r}")


def arith_reward(completion: str, answer: int | str) -> float:
    """1.0 iff the completion, whitespace removed, is the answer's decimal digits."""
    return 1.0 if "".join(completion.split()) == str(answer) else 0.0


class ArithTask(Task):
    """`a + b =` (digits space-separated, one word each) -> the answer's digits.

    With the word tokenizer of the random-init model the answer field is
    fixed-width (`max_turn_tokens` = digits of the largest answer): the turn
    ends at `<eos>` or when the field is full.
    """

    name = "arith"

    def __init__(self, spec: ArithSpec) -> None:
        self.spec = spec
        self.symbol = _SYMBOLS[spec.op]
        self.vocabulary = (*"0123456789", self.symbol, "=")
        operands = range(spec.min_operand, spec.max_operand + 1)
        largest = max(arith_answer(a, b, spec.op) for a in operands for b in operands)
        self.max_turn_tokens = len(str(largest))

    def sample(self, rng: random.Random, split: str) -> dict[str, Any]:
        a = rng.randint(self.spec.min_operand, self.spec.max_operand)
        b = rng.randint(self.spec.min_operand, self.spec.max_operand)
        return {"a": a, "b": b, "answer": str(arith_answer(a, b, self.spec.op))}

    def prompt(self, row: dict[str, Any]) -> str:
        return f"{' '.join(str(row['a']))} {self.symbol} {' '.join(str(row['b']))} ="

    def score(self, row: dict[str, Any], completion: str) -> float:
        return arith_reward(completion, row["answer"])
