"""A task bound to the model's tokenizer and the reward set: what the rollout talks to.

Every task looks like an environment to the rollout: a single-turn task is an
environment that finishes after one turn with the task's score as its reward.
Every call into task code is wrapped so that a failure names the task, the
method and the row.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any

from areal_adv.trainer.lm.codec import ChatCodec, Text, check_text
from areal_adv.trainer.rollout.reward_functions import FLOAT32_MAX, RewardBreakdown, RewardSet, fits_float32
from areal_adv.trainer.rollout.tasks.base import StepResult


class TaskError(RuntimeError):
    """Task code raised or returned something unusable; the message names the task, method and row."""


def _snippet(value: Any) -> str:
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


class _SingleTurn:
    """A single-turn task as a one-step environment (reward = the task's score, if it scores)."""

    def __init__(self, runtime: TaskRuntime, row: dict[str, Any]) -> None:
        self._runtime, self._row = runtime, row

    def reset(self) -> Any:
        task = self._runtime.task
        if callable(getattr(task, "prompt", None)):
            return task.prompt(self._row)
        key = self._runtime.prompt_key
        if key not in self._row:
            raise KeyError(f"the row has no prompt column {key!r} (data.prompt_key; columns: {sorted(self._row)})")
        return self._row[key]

    def step(self, action: str) -> StepResult:
        score = self._runtime.task.score(self._row, action) if self._runtime.task_scores else 0.0
        return StepResult(reward=score, done=True)


@dataclass
class Episode:
    """An open episode: its environment, row, prompt (text or messages) and prompt ids."""

    env: Any
    row: dict[str, Any]
    index: int
    prompt: Text
    prompt_ids: list[int]


class TaskRuntime:
    """The task, the codec and the rewards of a run."""

    def __init__(
        self,
        task: Any,
        codec: ChatCodec,
        rewards: RewardSet,
        *,
        implementation: str,
        prompt_key: str = "prompt",
        max_length: int | None = None,
    ) -> None:
        self.task = task
        self.codec = codec
        self.rewards = rewards
        self.implementation = implementation
        self.prompt_key = prompt_key
        self.max_length = max_length
        self.multi_turn = bool(getattr(task, "multi_turn", False))
        self.task_scores = self.multi_turn or callable(getattr(task, "score", None))
        self.max_turn_tokens: int | None = getattr(task, "max_turn_tokens", None)

    # kept for callers that predate the runtime (checkpoints save the tokenizer)
    @property
    def tokenizer(self) -> Any:
        return self.codec.tokenizer

    @property
    def pad_token_id(self) -> int:
        return self.codec.pad_id

    @property
    def stop_token_ids(self) -> frozenset[int]:
        return self.codec.stop_ids

    def where(self, method: str, index: int, row: dict[str, Any] | None = None) -> str:
        shown = f" {_snippet(row)}" if row is not None else ""
        return f"task {self.implementation!r} {method}, row {index}{shown}"

    def open(self, row: dict[str, Any], index: int) -> Episode:
        """Start an episode for `row` (its `index` in the step, for error messages)."""
        method = "environment(row).reset()" if self.multi_turn else "prompt(row)"
        try:
            env = self.task.environment(row) if self.multi_turn else _SingleTurn(self, row)
            prompt = check_text(env.reset(), "the prompt")
            ids = self.codec.encode_prompt(prompt)
        except Exception as exc:
            raise TaskError(f"{self.where(method, index, row)}: {type(exc).__name__}: {exc}") from exc
        if not ids:
            raise TaskError(f"{self.where(method, index, row)}: the prompt encodes to no tokens")
        return Episode(env, row, index, prompt, ids)

    def step(self, episode: Episode, action: str) -> StepResult:
        """The environment's answer to one turn, checked."""
        method = "environment.step(action)" if self.multi_turn else "score(row, completion)"
        try:
            result = episode.env.step(action)
            if isinstance(result, tuple) and len(result) == 3:
                result = StepResult(observation=result[0], reward=result[1], done=result[2])
            if not isinstance(result, StepResult):
                raise TypeError(
                    f"returned {type(result).__name__}, expected a StepResult (or an (observation, reward, done) tuple)"
                )
            _check_result(result)
        except Exception as exc:
            raise TaskError(
                f"{self.where(method, episode.index, episode.row)}, completion {_snippet(action)!r}: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        return result

    def score(
        self, episodes: list[Episode], completions: list[str], completion_ids: list[list[int]], env_rewards: list[float]
    ) -> RewardBreakdown:
        prompts = [ep.prompt for ep in episodes]
        rows = [ep.row for ep in episodes]
        return self.rewards.score(rows, prompts, completions, completion_ids, env_rewards if self.task_scores else None)


def _check_result(result: StepResult) -> None:
    if (
        isinstance(result.reward, bool)
        or not isinstance(result.reward, numbers.Real)
        or not math.isfinite(float(result.reward))
    ):
        raise TypeError(f"returned reward {result.reward!r}, expected a finite number")
    if not fits_float32(float(result.reward)):
        raise TypeError(
            f"returned reward {result.reward!r}, expected a finite number within the float32 range "
            f"(|x| <= {FLOAT32_MAX:.3g}) of the batch's rewards"
        )
    if result.process_score is not None and (
        not isinstance(result.process_score, numbers.Real) or not fits_float32(float(result.process_score))
    ):
        raise TypeError(
            f"returned process_score {result.process_score!r}, expected null or a finite number within "
            f"the float32 range (|x| <= {FLOAT32_MAX:.3g}) of the batch's token_rewards"
        )
    if not isinstance(result.done, bool):
        raise TypeError(f"returned done={result.done!r}, expected true or false")
    if not result.done and result.observation is not None:
        check_text(result.observation, "the observation")
