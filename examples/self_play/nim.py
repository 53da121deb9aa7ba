"""Nim as a two-seat task: a pile of stones, each move takes 1 or 2, whoever takes the last stone wins.

Each problem row fixes the pile and the seat the policy plays (`role_id` 0 moves
first, 1 second); the other seat is a scripted opponent that takes 1 or 2 stones
at random (seeded by the row, so every sample of a problem meets the same
opponent). This is SPIRAL's fixed-opponent mode; the seats win at different
rates by construction (with 3k + 1 stones the second player wins with perfect
play), which is what RAE's per-seat baseline corrects. The reward is zero-sum
as in SPIRAL: +1 for a win, -1 for a loss or an invalid move.
"""

from __future__ import annotations

import random
from typing import Any

from areal_adv.trainer.rollout.tasks import Environment, StepResult, Task

EOT = "<eot>"


class NimEnvironment(Environment):
    def __init__(self, stones: int, seat: int, seed: int) -> None:
        self.stones, self.seat = stones, seat
        self.opponent = random.Random(seed)

    def _opponent_move(self) -> int:
        take = min(self.stones, self.opponent.choice((1, 2)))
        self.stones -= take
        return take

    def reset(self) -> str:
        if self.seat == 0:
            return f"nim {self.stones} first"
        take = self._opponent_move()
        return f"nim {self.stones + take} second took {take} left {self.stones}"

    def step(self, action: str) -> StepResult:
        words = action.split()
        take = int(words[0]) if words and words[0] in ("1", "2") else 0
        if take == 0 or take > self.stones:
            return StepResult(reward=-1.0, done=True)  # an invalid move loses, as in SPIRAL
        self.stones -= take
        if self.stones == 0:
            return StepResult(reward=1.0, done=True)
        reply = self._opponent_move()
        if self.stones == 0:
            return StepResult(reward=-1.0, done=True)
        return StepResult(observation=f" took {reply} left {self.stones}")


class NimTask(Task):
    """Two seats of Nim; `role_id` / `game_id` on each row feed RAE's per-(game, seat) baselines."""

    name = "nim"
    multi_turn = True

    def __init__(self, low: int = 3, high: int = 7) -> None:
        if not 3 <= low <= high:  # the opponent's first move (at most 2) must leave the second seat a stone
            raise ValueError(f"make_nim_task: need 3 <= low <= high, got low={low}, high={high}")
        self.low, self.high = low, high
        self.vocabulary = (*[str(i) for i in range(high + 1)], "nim", "first", "second", "took", "left", EOT)
        self.stop_words = (EOT,)
        self.max_turn_tokens = 2

    def sample(self, rng: random.Random, split: str) -> dict[str, Any]:
        return {
            "stones": rng.randint(self.low, self.high),
            "role_id": rng.randint(0, 1),
            "game_id": "nim",
            "seed": rng.randrange(2**31),
        }

    def environment(self, row: dict[str, Any]) -> NimEnvironment:
        return NimEnvironment(int(row["stones"]), int(row["role_id"]), int(row["seed"]))


def make_nim_task(low: int = 3, high: int = 7) -> NimTask:
    return NimTask(low, high)
