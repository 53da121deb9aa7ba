"""Plugins that resolve (they import and take their kwargs) but break their contract when run."""

from __future__ import annotations

from areal_adv.trainer.ppo.advantage import AdvantageResult, OutcomeResult, compute_default_advantages
from areal_adv.trainer.ppo.advantage_algorithms import TemporalResult, token_gae


def outcome_wrong_shape(inputs, *, factor: float = 1.0):
    return OutcomeResult(rewards=inputs.data["rewards"].float()[:-1] * factor)


def estimator_int_dtype(inputs):
    r = token_gae(inputs)
    return TemporalResult(advantages=r.advantages.long(), returns=r.returns, total_rewards=r.total_rewards)


def process_wrong_shape(inputs):
    return inputs.advantages[:, :-1]


def replacement_float_truncation(inputs):
    r = compute_default_advantages(inputs)
    return AdvantageResult(**{**r.__dict__, "extras": {**r.extras, "is_truncated": r.extras["is_truncated"].float()}})


def needs_split_rollouts(inputs):
    """Works only when the batch has split rollouts (as the per_turn export has)."""
    assert inputs.meta.rollout_groups is not None, "expected split rollouts"
    return OutcomeResult(rewards=inputs.data["rewards"].float())


def needs_process_rewards(inputs):
    assert inputs.token_rewards is not None, "expected process rewards"
    return inputs.advantages + inputs.token_rewards


# reward functions that import and take their kwargs, but fail when called (validate --dry-run)


def reward_raises(prompts, completions, **kwargs):
    raise ZeroDivisionError("a bug in the reward function")


def reward_one_value_short(prompts, completions, **kwargs):
    return [1.0] * (len(completions) - 1)


def reward_nan(prompts, completions, **kwargs):
    return [float("nan")] * len(completions)


def reward_needs_solution(prompts, completions, solution, **kwargs):
    """Names a column `solution` that examples/custom_task/data/*.jsonl does not have (it has `answer`)."""
    return [1.0 if c.strip() == s else 0.0 for c, s in zip(completions, solution)]


def reward_answer_or_default(prompts, completions, answer, solution=None):
    """`solution` has a default, so data without that column is fine."""
    return [float(c.strip() == a) for c, a in zip(completions, answer)]


def reward_multiline_error(prompts, completions, **kwargs):
    raise ValueError("first line\n  second line")


def reward_nan_when_empty(prompts, completions, **kwargs):
    """Fine on any text, NaN on an empty completion (a policy that stops at once)."""
    return [1.0 if c.strip() else float("nan") for c in completions]


def reward_raises_when_long(prompts, completions, *, max_chars: int, **kwargs):
    """Raises on a completion longer than `max_chars` (e.g. one cut at the generation budget)."""
    for c in completions:
        if len(c) > max_chars:
            raise ValueError(f"no closing tag in {len(c)} characters")
    return [1.0] * len(completions)


#: The completion-id lengths `reward_records_lengths` saw, call by call.
SEEN_LENGTHS: list[list[int]] = []


def reward_records_lengths(prompts, completions, completion_ids, **kwargs):
    SEEN_LENGTHS.append([len(ids) for ids in completion_ids])
    return [0.0] * len(completions)
