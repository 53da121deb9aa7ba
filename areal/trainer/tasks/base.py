"""The environment protocol shared by single- and multi-turn tasks.

A task samples problems and opens an `Episode` per sampled trajectory. The
rollout loop alternates: the policy generates one turn (until a stop token or
`max_turn_tokens`), the episode answers with environment tokens (never trained
on) or finishes. Single-turn tasks are episodes that finish after one turn.
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

from transformers import PreTrainedTokenizerFast


@dataclass(frozen=True)
class TurnOutcome:
    """What the environment returns after one generated turn."""

    feedback_ids: list[int] = field(default_factory=list)
    done: bool = False
    process_score: float | None = None


class Episode(ABC):
    """One trajectory's environment state."""

    prompt_ids: list[int]

    @abstractmethod
    def step(self, turn_ids: list[int]) -> TurnOutcome:
        """Consume one generated turn; return feedback tokens or finish."""

    @property
    @abstractmethod
    def reward(self) -> float:
        """Outcome reward; meaningful once the episode is done (or cut off)."""

    @property
    def success(self) -> bool:
        return self.reward >= 1.0


class Task(ABC):
    """A synthetic verifiable task with its own word-level vocabulary."""

    name: str
    tokenizer: PreTrainedTokenizerFast
    max_turn_tokens: int
    max_turns: int
    has_process_scorer: bool = False

    @property
    def stop_token_ids(self) -> frozenset[int]:
        """Tokens that end a turn early (kept in the trajectory, trained on)."""
        return frozenset({self.tokenizer.eos_token_id})

    @property
    def pad_token_id(self) -> int:
        return self.tokenizer.pad_token_id

    @abstractmethod
    def sample_problem(self, rng: random.Random) -> Any:
        """One problem (the prompt group shares it)."""

    @abstractmethod
    def new_episode(self, problem: Any, *, process_rewards: bool = False) -> Episode:
        """A fresh episode for `problem`."""

    @abstractmethod
    def max_sequence_length(self, budget: int) -> int:
        """Upper bound on a trajectory's length given a generation budget."""
