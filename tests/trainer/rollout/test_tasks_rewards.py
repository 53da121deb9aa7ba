"""Scoring, environments and specs of the built-in tasks (text in, text out)."""

from __future__ import annotations

import random

import pytest
from runtime_helpers import make_runtime

from areal_adv.api.config_checks import ConfigError
from areal_adv.api.task_specs import build_task_spec
from areal_adv.api.train_args import TaskConfig
from areal_adv.trainer.rollout.tasks import make_task
from areal_adv.trainer.rollout.tasks.arith import arith_answer, arith_reward
from areal_adv.trainer.rollout.tasks.guess import feedback_word, is_consistent, parse_guess


def task(name: str, **kwargs):
    return make_task(TaskConfig(implementation=name, kwargs=kwargs))


# -- arith ------------------------------------------------------------------------------------


@pytest.mark.parametrize("a,b,op,expected", [(3, 4, "add", 7), (2, 9, "sub_abs", 7), (7, 8, "mod10", 5)])
def test_arith_answer(a: int, b: int, op: str, expected: int) -> None:
    assert arith_answer(a, b, op) == expected


def test_arith_reward_reads_the_digits_of_the_text() -> None:
    assert arith_reward("7", 7) == 1.0
    assert arith_reward(" 7 ", "7") == 1.0
    assert arith_reward("1 8", 18) == 1.0  # the word tokenizer decodes digits space-separated
    assert arith_reward("18", 18) == 1.0
    assert arith_reward("6", 7) == 0.0
    assert arith_reward("", 7) == 0.0
    assert arith_reward("77", 7) == 0.0
    assert arith_reward("7.", 7) == 0.0


def test_arith_prompt_score_and_word_tokenizer() -> None:
    runtime, _ = make_runtime("arith", {"max_operand": 4})
    assert runtime.max_turn_tokens == 1  # answers 0..8: one digit
    row = {"a": 3, "b": 4, "answer": "7"}
    ep = runtime.open(row, 0)
    assert ep.prompt == "3 + 4 ="
    assert runtime.tokenizer.decode(ep.prompt_ids) == "<bos> 3 + 4 ="
    assert runtime.step(ep, "7").done and runtime.step(ep, "7").reward == 1.0
    assert runtime.step(runtime.open(row, 0), "8").reward == 0.0
    eos = runtime.tokenizer.eos_token_id
    seven = runtime.tokenizer.convert_tokens_to_ids("7")
    assert runtime.codec.decode([seven, eos]) == "7"  # the stop token never reaches the scorer


def test_arith_two_digit_answers_widen_the_answer_field() -> None:
    runtime, _ = make_runtime("arith", {"max_operand": 9})
    assert runtime.max_turn_tokens == 2
    ep = runtime.open({"a": 9, "b": 9, "answer": "18"}, 0)
    assert runtime.tokenizer.decode(ep.prompt_ids) == "<bos> 9 + 9 ="
    ids = runtime.tokenizer.encode("1 8", add_special_tokens=False)
    assert runtime.step(ep, runtime.codec.decode(ids)).reward == 1.0


def test_arith_problems_are_seeded_and_in_range() -> None:
    t = task("arith", min_operand=1, max_operand=3)
    a = [t.sample(random.Random(5), "train") for _ in range(3)]
    b = [t.sample(random.Random(5), "train") for _ in range(3)]
    assert a == b
    rng = random.Random(0)
    for _ in range(50):
        row = t.sample(rng, "train")
        assert 1 <= row["a"] <= 3 and 1 <= row["b"] <= 3 and row["answer"] == str(row["a"] + row["b"])


# -- guess ------------------------------------------------------------------------------------


def test_guess_parsing_and_feedback() -> None:
    assert parse_guess("3", 8) == 3
    assert parse_guess("3 5", 8) == 3  # the first word is the guess
    assert parse_guess("9", 8) is None  # out of range
    assert parse_guess("higher", 8) is None
    assert parse_guess("", 8) is None
    assert feedback_word(3, 5) == "higher"
    assert feedback_word(6, 5) == "lower"
    assert feedback_word(5, 5) is None
    assert feedback_word(None, 5) == "invalid"
    assert is_consistent(4, 2, 6) and not is_consistent(1, 2, 6) and not is_consistent(None, 0, 7)


def test_guess_environment_feedback_rewards_and_process_scores() -> None:
    env = task("guess", num_range=8, max_turns=4).environment({"hidden": 5})
    assert env.reset() == "guess"
    first = env.step("3")
    assert not first.done and first.observation.split() == ["higher"] and first.reward == 0.0
    assert first.process_score == 1.0
    second = env.step("2")  # inconsistent: feedback said higher than 3
    assert second.observation.split() == ["higher"] and second.process_score == 0.0
    third = env.step("5")
    assert third.done and third.observation is None and third.process_score == 1.0 and third.reward == 1.0


def test_guess_episode_fails_after_max_turns_without_trailing_feedback() -> None:
    env = task("guess", num_range=8, max_turns=2).environment({"hidden": 0})
    assert env.step("").observation.split() == ["invalid"]
    last = env.step("7")
    assert last.done and last.observation is None and last.reward == 0.0


def test_guess_signed_process_reward() -> None:
    env = task("guess", num_range=8, process_reward="signed").environment({"hidden": 6})
    assert env.step("4").process_score == 1.0
    assert env.step("1").process_score == -1.0


def test_guess_end_of_turn_word_is_a_stop_token_and_skipped_in_text() -> None:
    runtime, _ = make_runtime("guess", {})
    eot = runtime.tokenizer.convert_tokens_to_ids("<eot>")
    assert eot in runtime.stop_token_ids and runtime.pad_token_id == 0
    three = runtime.tokenizer.convert_tokens_to_ids("3")
    assert runtime.codec.decode([three, eot]) == "3"
    ep = runtime.open({"hidden": 3}, 0)
    assert runtime.tokenizer.decode(ep.prompt_ids) == "<bos> guess"


# -- specs ------------------------------------------------------------------------------------


def test_unknown_task_name_names_the_field() -> None:
    with pytest.raises(ConfigError, match=r"task\.implementation: got 'chess'"):
        build_task_spec("chess", {})


def test_unknown_task_kwarg_names_the_field() -> None:
    with pytest.raises(ConfigError, match=r"task\.kwargs: unknown keys \['digits'\]"):
        build_task_spec("arith", {"digits": 3})


def test_bad_task_kwarg_value_names_the_field() -> None:
    with pytest.raises(ConfigError, match=r"task\.kwargs\.max_turns"):
        build_task_spec("guess", {"max_turns": 0})
    with pytest.raises(ConfigError, match=r"task\.kwargs\.op"):
        build_task_spec("arith", {"op": "mul"})


def test_name_is_an_alias_of_implementation() -> None:
    assert TaskConfig(name="guess").implementation == "guess"
    assert TaskConfig(implementation="guess").name == "guess"
    with pytest.raises(ConfigError, match=r"task\.name: got 'arith' but task\.implementation is 'guess'"):
        TaskConfig(name="arith", implementation="guess")


def test_reasoning_gym_spec_passes_dataset_options_through() -> None:
    spec = build_task_spec("reasoning_gym", {"dataset": "basic_arithmetic", "size": 50, "max_terms": 3})
    assert spec.dataset_config == {"max_terms": 3} and spec.size == 50
    with pytest.raises(ConfigError, match=r"task\.kwargs\.dataset: missing"):
        build_task_spec("reasoning_gym", {"size": 3})
