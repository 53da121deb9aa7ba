"""Reward functions, environments and specs of the built-in synthetic tasks."""

from __future__ import annotations

import random

import pytest

from areal.api.cli_args import ConfigError
from areal.trainer.tasks import make_task
from areal.trainer.tasks.arith import ArithProblem, arith_answer, arith_reward
from areal.trainer.tasks.guess import GuessProblem, feedback_word, is_consistent, parse_guess
from areal.trainer.tasks.specs import build_task_spec


def ids(task, text: str) -> list[int]:
    return task.tokenizer.encode(text, add_special_tokens=False)


# -- arith ------------------------------------------------------------------------------------

@pytest.mark.parametrize("a,b,op,expected", [(3, 4, "add", 7), (2, 9, "sub_abs", 7), (7, 8, "mod10", 5)])
def test_arith_answer(a: int, b: int, op: str, expected: int) -> None:
    assert arith_answer(a, b, op) == expected


def test_arith_reward_exact_digits_with_optional_eos() -> None:
    assert arith_reward(["7"], 7, "<eos>") == 1.0
    assert arith_reward(["7", "<eos>"], 7, "<eos>") == 1.0
    assert arith_reward(["1", "2"], 12, "<eos>") == 1.0
    assert arith_reward(["1", "<eos>", "2"], 12, "<eos>") == 0.0
    assert arith_reward(["6"], 7, "<eos>") == 0.0
    assert arith_reward([], 7, "<eos>") == 0.0
    assert arith_reward(["7", "7"], 7, "<eos>") == 0.0


def test_arith_episode_prompt_and_reward() -> None:
    task = make_task("arith", {"max_operand": 4})
    assert task.max_turn_tokens == 1  # answers 0..8: one digit
    ep = task.new_episode(ArithProblem(3, 4, 7))
    assert task.tokenizer.decode(ep.prompt_ids) == "<bos> 3 + 4 ="
    out = ep.step(ids(task, "7"))
    assert out.done and out.feedback_ids == [] and ep.reward == 1.0 and ep.success
    ep = task.new_episode(ArithProblem(3, 4, 7))
    ep.step(ids(task, "8"))
    assert ep.reward == 0.0


def test_arith_two_digit_answers_widen_the_answer_field() -> None:
    task = make_task("arith", {"max_operand": 9})
    assert task.max_turn_tokens == 2
    ep = task.new_episode(ArithProblem(9, 9, 18))
    assert task.tokenizer.decode(ep.prompt_ids) == "<bos> 9 + 9 ="
    ep.step(ids(task, "1 8"))
    assert ep.reward == 1.0


def test_arith_problems_are_seeded_and_in_range() -> None:
    task = make_task("arith", {"min_operand": 1, "max_operand": 3})
    a = [task.sample_problem(random.Random(5)) for _ in range(3)]
    b = [task.sample_problem(random.Random(5)) for _ in range(3)]
    assert a == b
    rng = random.Random(0)
    for _ in range(50):
        p = task.sample_problem(rng)
        assert 1 <= p.a <= 3 and 1 <= p.b <= 3 and p.answer == p.a + p.b


# -- guess ------------------------------------------------------------------------------------

def test_guess_parsing_and_feedback() -> None:
    assert parse_guess(["3", "<eot>"], 8) == 3
    assert parse_guess(["9"], 8) is None  # out of range
    assert parse_guess(["higher"], 8) is None
    assert parse_guess([], 8) is None
    assert feedback_word(3, 5) == "higher"
    assert feedback_word(6, 5) == "lower"
    assert feedback_word(5, 5) is None
    assert feedback_word(None, 5) == "invalid"
    assert is_consistent(4, 2, 6) and not is_consistent(1, 2, 6) and not is_consistent(None, 0, 7)


def test_guess_episode_feedback_and_success() -> None:
    task = make_task("guess", {"num_range": 8, "max_turns": 4})
    ep = task.new_episode(GuessProblem(5), process_rewards=True)
    assert task.tokenizer.decode(ep.prompt_ids) == "<bos> guess"
    first = ep.step(ids(task, "3 <eot>"))
    assert not first.done and task.tokenizer.decode(first.feedback_ids) == "higher"
    assert first.process_score == 1.0
    second = ep.step(ids(task, "2 <eot>"))  # inconsistent: feedback said higher than 3
    assert task.tokenizer.decode(second.feedback_ids) == "higher" and second.process_score == 0.0
    third = ep.step(ids(task, "5"))
    assert third.done and third.feedback_ids == [] and third.process_score == 1.0
    assert ep.reward == 1.0 and ep.success


def test_guess_episode_fails_after_max_turns_without_trailing_feedback() -> None:
    task = make_task("guess", {"num_range": 8, "max_turns": 2})
    ep = task.new_episode(GuessProblem(0))
    assert task.tokenizer.decode(ep.step(ids(task, "<eot>")).feedback_ids) == "invalid"
    last = ep.step(ids(task, "7 <eot>"))
    assert last.done and last.feedback_ids == [] and last.process_score is None
    assert ep.reward == 0.0 and not ep.success


def test_guess_signed_process_reward() -> None:
    task = make_task("guess", {"num_range": 8, "process_reward": "signed"})
    ep = task.new_episode(GuessProblem(6), process_rewards=True)
    assert ep.step(ids(task, "4")).process_score == 1.0
    assert ep.step(ids(task, "1")).process_score == -1.0


def test_guess_stop_tokens_include_end_of_turn() -> None:
    task = make_task("guess", {})
    assert task.tokenizer.convert_tokens_to_ids("<eot>") in task.stop_token_ids
    assert task.pad_token_id == 0


# -- specs ------------------------------------------------------------------------------------

def test_unknown_task_name_names_the_field() -> None:
    with pytest.raises(ConfigError, match=r"task\.name: got 'chess'"):
        build_task_spec("chess", {})


def test_unknown_task_kwarg_names_the_field() -> None:
    with pytest.raises(ConfigError, match=r"task\.kwargs: unknown keys \['digits'\]"):
        build_task_spec("arith", {"digits": 3})


def test_bad_task_kwarg_value_names_the_field() -> None:
    with pytest.raises(ConfigError, match=r"task\.kwargs\.max_turns"):
        build_task_spec("guess", {"max_turns": 0})
    with pytest.raises(ConfigError, match=r"task\.kwargs\.op"):
        build_task_spec("arith", {"op": "mul"})


def test_arith_has_no_process_scorer() -> None:
    task = make_task("arith", {})
    with pytest.raises(ValueError, match="process-reward"):
        task.new_episode(ArithProblem(1, 1, 2), process_rewards=True)
