"""Rewards from task and reward-function plugins must fit the batch's float32 tensors, or be named.

A finite float64 beyond float32's range (a reward function returning 1e39, a
weighted sum of large components, a multi-turn environment whose per-turn
rewards add up past 3.4e38) would become inf when the trainer exports the
batch; the pipeline would then report `rewards` without saying which plugin
produced it. These errors name the function or task method and the row.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
from runtime_helpers import make_runtime

from areal_adv.trainer.rollout.episodes import EpisodeRecord, export_episodes
from areal_adv.trainer.rollout.reward_functions import (
    FLOAT32_MAX,
    RewardFunction,
    RewardFunctionError,
    RewardSet,
    check_values,
)
from areal_adv.trainer.rollout.tasks.base import StepResult
from areal_adv.trainer.rollout.tasks.runtime import Episode, TaskError

PROMPTS = ["1 + 1 =", "2 + 2 =", "3 + 3 ="]
ROWS = [{"a": 1, "answer": "2"}, {"a": 2, "answer": "4"}, {"a": 3, "answer": "6"}]


def constant(*values: float):
    def fn(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float]:
        return list(values)

    return fn


def function(name: str, fn: Any, weight: float = 1.0) -> RewardFunction:
    return RewardFunction(name, f"reward[0] ({name}) 'tests.{name}'", fn, weight, None)


def score(reward_set: RewardSet, task_scores: list[float] | None = None):
    rows, prompts = copy.deepcopy(ROWS), list(PROMPTS)
    out = reward_set.score(rows, prompts, ["2", "4", "6"], [[1], [2], [3]], task_scores)
    return out, rows, prompts


@pytest.mark.parametrize("value", [1e39, -3.5e38, 1e300])
def test_a_reward_function_value_beyond_float32_names_the_function_and_row(value: float) -> None:
    reward_set = RewardSet([function("huge", constant(0.0, value, 1.0))], None)
    with pytest.raises(
        RewardFunctionError, match=r"reward\[0\] \(huge\) .*row 1 \(prompt '2 \+ 2 =', completion '4'\).*float32 range"
    ):
        score(reward_set)


def test_the_largest_float32_value_is_accepted_and_stays_finite_in_the_batch() -> None:
    reward_set = RewardSet([function("edge", constant(FLOAT32_MAX, -FLOAT32_MAX, 0.5))], None)
    out, _, _ = score(reward_set)
    assert torch.isfinite(out.total.to(torch.float32)).all()


@pytest.mark.parametrize(
    "values,weights,needle",
    [
        ((3e38, 3e38), (1.0, 1.0), "a=3e+38 x 1.0, b=3e+38 x 1.0"),  # each fits, the sum does not
        ((1e30, 0.0), (1e10, 1.0), "a=1e+30 x 10000000000.0"),  # a weight lifts a fitting value past the range
        ((3e38, 0.0), (1e300, 1.0), "is inf"),  # float64 itself overflows
    ],
)
def test_a_weighted_sum_beyond_float32_names_every_component(values, weights, needle) -> None:
    fns = [function(name, constant(v, 0.0, 0.0), w) for name, v, w in zip("ab", values, weights)]
    with pytest.raises(
        RewardFunctionError, match=r"reward: row 0 \(prompt '1 \+ 1 =', completion '2'\): the weighted sum"
    ) as info:
        score(RewardSet(fns, None))
    assert needle in str(info.value)


def test_a_task_score_summed_over_turns_beyond_float32_names_the_task() -> None:
    """Each turn's reward fits; the episode's sum (the task's component) does not."""
    reward_set = RewardSet([], "guess")
    with pytest.raises(RewardFunctionError, match=r"row 2 .*task score 'guess' \(summed over the episode's turns\)"):
        score(reward_set, [1.0, 0.0, float(torch.tensor(3e38, dtype=torch.float64) * 2)])


def test_scoring_leaves_the_rows_and_prompts_unchanged_when_it_fails() -> None:
    reward_set = RewardSet([function("huge", constant(1e39, 0.0, 0.0))], None)
    rows, prompts = copy.deepcopy(ROWS), list(PROMPTS)
    with pytest.raises(RewardFunctionError):
        reward_set.score(rows, prompts, ["2", "4", "6"], [[1], [2], [3]], None)
    assert rows == ROWS and prompts == PROMPTS


def test_check_values_keeps_accepting_integers_and_ordinary_floats() -> None:
    assert check_values([1, -2, 0.5], 3, "reward[0]", PROMPTS) == [1.0, -2.0, 0.5]


class _Env:
    def __init__(self, result: StepResult) -> None:
        self.result = result

    def reset(self) -> str:
        return "go"

    def step(self, action: str) -> StepResult:
        return self.result


@pytest.fixture(scope="module")
def guess_runtime():
    runtime, _ = make_runtime("guess", {"num_range": 4, "max_turns": 2})
    return runtime


@pytest.mark.parametrize(
    "result,needle",
    [
        (
            StepResult(reward=1e39, done=True),
            "returned reward 1e+39, expected a finite number within the float32 range",
        ),
        (
            StepResult(reward=1.0, done=True, process_score=-1e39),
            "returned process_score -1e+39, expected null or a finite number within the float32 range",
        ),
        (StepResult(reward=1.0, done=True, process_score=float("inf")), "returned process_score inf"),
    ],
)
def test_a_step_result_beyond_float32_names_the_task_method(guess_runtime, result: StepResult, needle: str) -> None:
    episode = Episode(_Env(result), {"hidden": 1}, 0, "guess", [1])
    with pytest.raises(TaskError, match=r"environment\.step\(action\), row 0") as info:
        guess_runtime.step(episode, "1")
    assert needle in str(info.value)


def test_float32_rewards_exported_from_fitting_records_are_finite() -> None:
    record = EpisodeRecord.start([1, 2])
    record.add_turn([3], [-0.5], None)
    record.reward = FLOAT32_MAX
    batch = export_episodes([record], 0)
    assert torch.isfinite(batch["rewards"]).all()
