"""Task (b): guess a hidden number in a few turns with higher/lower feedback.

Environment tokens (`higher`, `lower`, `invalid`) are appended between turns and
are never trained on. The optional process scorer rates each turn by whether its
guess is still consistent with all the feedback so far.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from areal.trainer.tasks.base import Episode, Task, TurnOutcome
from areal.trainer.tasks.specs import GuessSpec
from areal.trainer.tokenizer import BOS, build_word_tokenizer, encode_words

EOT, HIGHER, LOWER, INVALID, PROMPT = "<eot>", "higher", "lower", "invalid", "guess"


def parse_guess(tokens: list[str], num_range: int) -> int | None:
    """The guess is the turn's first token when it is an in-vocabulary number."""
    if not tokens or not tokens[0].isdigit():
        return None
    value = int(tokens[0])
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


@dataclass(frozen=True)
class GuessProblem:
    hidden: int


class GuessEpisode(Episode):
    def __init__(self, task: GuessTask, problem: GuessProblem, process_rewards: bool) -> None:
        self._task = task
        self.hidden = problem.hidden
        self.prompt_ids = encode_words(task.tokenizer, f"{BOS} {PROMPT}")
        self._process = process_rewards
        self.low, self.high = 0, task.spec.num_range - 1
        self.turns = 0
        self.found = False

    def step(self, turn_ids: list[int]) -> TurnOutcome:
        tokens = self._task.tokenizer.convert_ids_to_tokens(turn_ids)
        guess = parse_guess(tokens, self._task.spec.num_range)
        score = self._score(guess) if self._process else None
        self.turns += 1
        word = feedback_word(guess, self.hidden)
        if word is None:
            self.found = True
            return TurnOutcome(done=True, process_score=score)
        if word == HIGHER:
            self.low = max(self.low, guess + 1)
        elif word == LOWER:
            self.high = min(self.high, guess - 1)
        if self.turns >= self._task.spec.max_turns:
            return TurnOutcome(done=True, process_score=score)
        return TurnOutcome(feedback_ids=encode_words(self._task.tokenizer, word), process_score=score)

    def _score(self, guess: int | None) -> float:
        good = is_consistent(guess, self.low, self.high)
        if self._task.spec.process_reward == "signed":
            return 1.0 if good else -1.0
        return 1.0 if good else 0.0

    @property
    def reward(self) -> float:
        return 1.0 if self.found else 0.0


class GuessTask(Task):
    """Prompt `<bos> guess`; each turn is a number token, optionally ended by `<eot>`."""

    name = "guess"
    has_process_scorer = True

    def __init__(self, spec: GuessSpec) -> None:
        self.spec = spec
        numbers = [str(i) for i in range(spec.num_range)]
        self.tokenizer = build_word_tokenizer([*numbers, EOT, HIGHER, LOWER, INVALID, PROMPT])
        self.max_turn_tokens = spec.max_turn_tokens
        self.max_turns = spec.max_turns

    @property
    def stop_token_ids(self) -> frozenset[int]:
        return frozenset({self.tokenizer.convert_tokens_to_ids(EOT), self.tokenizer.eos_token_id})

    def sample_problem(self, rng: random.Random) -> GuessProblem:
        return GuessProblem(rng.randrange(self.spec.num_range))

    def new_episode(self, problem: GuessProblem, *, process_rewards: bool = False) -> GuessEpisode:
        return GuessEpisode(self, problem, process_rewards)

    def max_sequence_length(self, budget: int) -> int:
        generated = min(budget, self.spec.max_turns * self.max_turn_tokens)
        return 2 + generated + (self.spec.max_turns - 1)
