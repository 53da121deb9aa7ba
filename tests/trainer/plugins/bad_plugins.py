"""Misbehaving task and reward plugins: each error must name the plugin and, at run time, the row."""

from __future__ import annotations

import math
import random
from typing import Any

from areal_adv.trainer.rollout.tasks import StepResult

NOT_CALLABLE = 3


def reward_wrong_length(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float]:
    return [0.0] * (len(completions) - 1)


def reward_nan_on_row_two(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float]:
    return [math.nan if i == 2 else 0.0 for i in range(len(completions))]


def reward_raises(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float]:
    raise ZeroDivisionError("boom")


def reward_without_prompts(completions: list[Any]) -> list[float]:
    return [0.0] * len(completions)


def reward_with_scale(prompts: list[Any], completions: list[Any], *, scale: float) -> list[float]:
    return [scale] * len(completions)


def reward_needs_column(prompts: list[Any], completions: list[Any], answer: list[Any]) -> list[float]:
    return [1.0 if str(c).strip() == str(a) else 0.0 for c, a in zip(completions, answer)]


class _Rows:
    vocabulary = ("a", "b")

    def sample(self, rng: random.Random, split: str) -> dict[str, Any]:
        return {"n": rng.randint(0, 1)}


class NanScoreTask(_Rows):
    def prompt(self, row: dict[str, Any]) -> str:
        return "a"

    def score(self, row: dict[str, Any], completion: str) -> float:
        return math.nan


class MultiTurnWithoutEnvironment(_Rows):
    multi_turn = True


class BadStepEnv:
    def reset(self) -> str:
        return "a"

    def step(self, action: str) -> Any:
        return {"reward": 1.0}


class BadStepTask(_Rows):
    multi_turn = True

    def environment(self, row: dict[str, Any]) -> BadStepEnv:
        return BadStepEnv()


class IntPromptTask(_Rows):
    def prompt(self, row: dict[str, Any]) -> Any:
        return 42

    def score(self, row: dict[str, Any], completion: str) -> float:
        return 0.0


def make_nan_score_task() -> NanScoreTask:
    return NanScoreTask()


def make_multi_turn_without_environment() -> MultiTurnWithoutEnvironment:
    return MultiTurnWithoutEnvironment()


def make_bad_step_task() -> BadStepTask:
    return BadStepTask()


def make_int_prompt_task() -> IntPromptTask:
    return IntPromptTask()


def make_task_raises(level: int = 1) -> Any:
    raise RuntimeError(f"factory failed at level {level}")


def make_no_prompt_source() -> Any:
    class NoSample:
        def score(self, row: dict[str, Any], completion: str) -> float:
            return 0.0

    return NoSample()


def step_result_ok() -> StepResult:
    return StepResult(done=True)


def outcome_raises(inputs: Any) -> Any:
    """An advantage stage (outcome_reward_shaping) with a bug."""
    raise RuntimeError("stage boom")


class RaisingScoreTask(_Rows):
    def prompt(self, row: dict[str, Any]) -> str:
        return "a"

    def score(self, row: dict[str, Any], completion: str) -> float:
        raise KeyError("score boom")


def make_raising_score_task() -> RaisingScoreTask:
    return RaisingScoreTask()


class RaisingSampleTask(_Rows):
    def sample(self, rng: random.Random, split: str) -> dict[str, Any]:
        raise ValueError("sample boom")

    def prompt(self, row: dict[str, Any]) -> str:
        return "a"

    def score(self, row: dict[str, Any], completion: str) -> float:
        return 0.0


def make_raising_sample_task() -> RaisingSampleTask:
    return RaisingSampleTask()
