"""The task interface: text in, text out, for single- and multi-turn tasks.

A task turns a *row* (a dict: a dataset row, or a problem the task generated)
into a prompt and scores the policy's text. Single-turn tasks implement
`prompt(row)` and `score(row, completion)`; multi-turn tasks implement
`environment(row)`, an `Environment` whose `reset()` gives the prompt and whose
`step(action)` answers each generated turn with an observation, a per-turn
reward and `done`. Procedural tasks also implement `sample(rng, split)`.
Prompts and observations are strings or chat messages; the rollout tokenizes
them with the model's tokenizer. Subclassing these bases is optional: the
trainer checks a plugin's object for the methods it needs at start-up.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, ClassVar

from areal_adv.trainer.lm.codec import Text


@dataclass(frozen=True)
class StepResult:
    """The environment's answer to one generated turn.

    `reward` is this turn's contribution to the episode reward (the episode's
    outcome is the sum over turns); `process_score` is an optional per-turn
    process reward, placed on the turn's tokens as `token_rewards` when
    `rollout.prm.enabled`. `observation` (text or messages) is appended after
    the turn unless `done`; it is context only (loss_mask 0).
    """

    observation: Text | None = None
    reward: float = 0.0
    done: bool = False
    process_score: float | None = None


class Environment:
    """One episode of a multi-turn task."""

    def reset(self) -> Text:
        """The episode's prompt (text or chat messages)."""
        raise NotImplementedError

    def step(self, action: str) -> StepResult:
        """Consume one generated turn (decoded text, special tokens skipped)."""
        raise NotImplementedError


class Task:
    """Optional base class of a task; every attribute below has a usable default.

    `max_turn_tokens` caps one turn (null: the episode's budget); `vocabulary`
    and `stop_words` only serve the random-init model's word tokenizer (a task
    without a vocabulary gets a byte-level tokenizer there).
    """

    name: ClassVar[str] = "task"
    multi_turn: ClassVar[bool] = False
    has_process_scorer: ClassVar[bool] = False
    max_turn_tokens: int | None = None
    vocabulary: tuple[str, ...] | None = None
    stop_words: tuple[str, ...] = ()

    def sample(self, rng: random.Random, split: str) -> dict[str, Any]:
        """A fresh row (`split` is `train` or `eval`); tasks without it need `data.train`."""
        raise NotImplementedError

    # A task that keeps state of its own across steps (a random stream its environments draw from, a
    # curriculum) defines `state_dict()` -> plain values (numbers, strings, lists, dicts) and
    # `load_state_dict(state)`: every checkpoint saves each rank's copy, and a resume at the same world size
    # restores it, so the resumed run equals the uninterrupted one. Without them a resumed run starts the
    # task afresh.
