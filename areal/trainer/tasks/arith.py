"""Task (a): single-turn arithmetic with a verifiable 1/0 reward."""

from __future__ import annotations

import random
from dataclasses import dataclass

from areal.trainer.tasks.base import Episode, Task, TurnOutcome
from areal.trainer.tasks.specs import ArithSpec
from areal.trainer.tokenizer import BOS, build_word_tokenizer, encode_words

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


def arith_reward(response_tokens: list[str], answer: int, eos: str) -> float:
    """1.0 iff the response, up to an optional `<eos>`, spells the answer's digits."""
    if eos in response_tokens:
        response_tokens = response_tokens[: response_tokens.index(eos)]
    return 1.0 if response_tokens == list(str(answer)) else 0.0


@dataclass(frozen=True)
class ArithProblem:
    a: int
    b: int
    answer: int


class ArithEpisode(Episode):
    def __init__(self, task: ArithTask, problem: ArithProblem) -> None:
        self._task = task
        self.problem = problem
        self.prompt_ids = task.prompt_ids(problem)
        self._reward = 0.0

    def step(self, turn_ids: list[int]) -> TurnOutcome:
        tokens = self._task.tokenizer.convert_ids_to_tokens(turn_ids)
        self._reward = arith_reward(tokens, self.problem.answer, self._task.tokenizer.eos_token)
        return TurnOutcome(done=True)

    @property
    def reward(self) -> float:
        return self._reward


class ArithTask(Task):
    """`<bos> a + b =` → the answer's digits.

    The answer field is fixed-width (`max_turn_tokens` = digits of the largest
    answer): the turn ends at `<eos>` or when the field is full.
    """

    name = "arith"
    max_turns = 1

    def __init__(self, spec: ArithSpec) -> None:
        self.spec = spec
        self.symbol = _SYMBOLS[spec.op]
        self.tokenizer = build_word_tokenizer([*"0123456789", self.symbol, "="])
        operands = range(spec.min_operand, spec.max_operand + 1)
        largest = max(arith_answer(a, b, spec.op) for a in operands for b in operands)
        self.max_turn_tokens = len(str(largest))

    def sample_problem(self, rng: random.Random) -> ArithProblem:
        a = rng.randint(self.spec.min_operand, self.spec.max_operand)
        b = rng.randint(self.spec.min_operand, self.spec.max_operand)
        return ArithProblem(a, b, arith_answer(a, b, self.spec.op))

    def prompt_ids(self, problem: ArithProblem) -> list[int]:
        text = f"{BOS} {' '.join(str(problem.a))} {self.symbol} {' '.join(str(problem.b))} ="
        return encode_words(self.tokenizer, text)

    def new_episode(self, problem: ArithProblem, *, process_rewards: bool = False) -> ArithEpisode:
        if process_rewards:
            raise ValueError("the arith task has no process-reward scorer")
        return ArithEpisode(self, problem)

    def max_sequence_length(self, budget: int) -> int:
        digits = len(str(self.spec.max_operand))
        return 3 + 2 * digits + min(budget, self.max_turn_tokens)
