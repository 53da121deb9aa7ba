"""Candidate skill tasks for the real-model run: reasoning-gym datasets and verl's char_count recipe.

Each task is a list of rows `{prompt, answer, task, metadata}`: the question
(the user message), its answer as reasoning-gym states it, the task's name and
reasoning-gym's metadata (a JSON string, so every row has the same columns).
The system prompt asks for the bare answer; `strict` scoring takes the whole
completion as that answer. `lenient_answer` reads the answer out of a
completion in any wording (the last integer, or any word for a spelled
answer): scored the same way, it fixes the format, so a gain in it is a gain in
skill. `prefix` is the forced start of the answer the probe also scores.

`char_count` follows verl's recipe (examples of `recipe/char_count`): random
letters a-z joined by dashes, "How many {c} are there in word {w}?"; verl
trains SmolLM2-135M-Instruct on it (SFT, then GRPO). It is not a reasoning-gym
dataset; its answers are scored by reasoning-gym's default `score_answer`
(the one `letter_counting` uses).
"""

from __future__ import annotations

import json
import random
import re
import string
from dataclasses import dataclass, field
from functools import cache
from typing import Any

NUMBER_ONLY = "Answer with the number only."
WORD_ONLY = "Answer with the word only."
_INTEGER = re.compile(r"-?\d+")
_WORD = re.compile(r"[A-Za-z]+")


@dataclass(frozen=True)
class SkillTask:
    """One candidate: its generator (`dataset` + `config`), prompt, answer kind, token budget."""

    name: str
    dataset: str  # a reasoning-gym dataset name, or "char_count"
    config: dict[str, Any] = field(default_factory=dict)
    answer_kind: str = "integer"  # "integer" or "word": how `lenient_answer` reads a completion
    max_new_tokens: int = 16

    @property
    def system_prompt(self) -> str:
        return NUMBER_ONLY if self.answer_kind == "integer" else WORD_ONLY

    @property
    def prefix(self) -> str:
        return "The answer is " if self.answer_kind == "integer" else "The word spelled backward is: "


TASKS: dict[str, SkillTask] = {
    t.name: t
    for t in (
        SkillTask("spell_backward_3_6", "spell_backward", {"min_word_len": 3, "max_word_len": 6}, "word", 12),
        SkillTask("char_count_verl", "char_count", {"min_length": 5, "max_length": 10, "max_count": 4}),
        SkillTask("char_count_3_6", "char_count", {"min_length": 3, "max_length": 6, "max_count": 3}),
        SkillTask("spell_backward_3", "spell_backward", {"min_word_len": 3, "max_word_len": 3}, "word", 8),
        SkillTask(
            "basic_arithmetic_2digit_add",
            "basic_arithmetic",
            {
                "min_terms": 2,
                "max_terms": 2,
                "min_digits": 2,
                "max_digits": 2,
                "operators": ["+"],
                "allow_parentheses": False,
                "allow_negation": False,
            },
        ),
        SkillTask(
            "basic_arithmetic_1_2digit_add",
            "basic_arithmetic",
            {
                "min_terms": 2,
                "max_terms": 2,
                "min_digits": 1,
                "max_digits": 2,
                "operators": ["+"],
                "allow_parentheses": False,
                "allow_negation": False,
            },
        ),
        SkillTask("letter_counting_3_5words", "letter_counting", {"min_words": 3, "max_words": 5}),
        SkillTask("letter_counting_1word", "letter_counting", {"min_words": 1, "max_words": 1}),
        SkillTask("spell_backward_3_10", "spell_backward", {}, "word", 16),
        SkillTask(
            "basic_arithmetic_2digit_add_sub",
            "basic_arithmetic",
            {
                "min_terms": 2,
                "max_terms": 2,
                "min_digits": 2,
                "max_digits": 2,
                "operators": ["+", "-"],
                "allow_parentheses": False,
                "allow_negation": False,
            },
        ),
    )
}


def rows(task: SkillTask, seed: int, size: int) -> list[dict[str, str]]:
    """`size` rows of `task` generated from `seed` (deterministic)."""
    if task.dataset == "char_count":
        return char_count_rows(seed, size, name=task.name, **task.config)
    import reasoning_gym as rg

    config = {k: tuple(v) if isinstance(v, list) else v for k, v in task.config.items()}
    return [
        {
            "prompt": e["question"],
            "answer": str(e["answer"]),
            "task": task.name,
            "metadata": json.dumps(e["metadata"], default=str),
        }
        for e in rg.create_dataset(task.dataset, seed=seed, size=size, **config)
    ]


def char_count_rows(
    seed: int, size: int, min_length: int, max_length: int, max_count: int, name: str = "char_count_verl"
) -> list[dict[str, str]]:
    """verl's char_count: a random a-z word of uniform length with the target letter 0..max_count times."""
    rng, out = random.Random(seed), []
    for _ in range(size):
        length = rng.randint(min_length, max_length)
        target = rng.choice(string.ascii_lowercase)
        count = rng.randint(0, min(max_count, length))
        others = [rng.choice(string.ascii_lowercase.replace(target, "")) for _ in range(length - count)]
        letters = others + [target] * count
        rng.shuffle(letters)
        word = "-".join(letters)
        out.append(
            {
                "prompt": f"How many {target} are there in word {word}?",
                "answer": str(count),
                "task": name,
                "metadata": json.dumps({"word": word, "char": target}),
            }
        )
    return out


@cache
def scorer(task_name: str) -> Any:
    """The reasoning-gym dataset whose `score_answer` scores `task_name`'s answers."""
    import reasoning_gym as rg

    task = TASKS[task_name]
    dataset = "letter_counting" if task.dataset == "char_count" else task.dataset
    return rg.create_dataset(dataset, seed=0, size=1)


def score(task_name: str, answer: str | None, row_answer: str, metadata: str) -> float:
    """reasoning-gym's `score_answer` of `answer` for the row (None or empty: 0)."""
    entry = {"answer": row_answer, "metadata": json.loads(metadata)}
    return float(scorer(task_name).score_answer(answer=answer, entry=entry))


def lenient_answer(task_name: str, completion: str, row_answer: str) -> str | None:
    """The answer read from any wording: the last integer, or for words the answer when any word equals it."""
    if TASKS[task_name].answer_kind == "integer":
        found = _INTEGER.findall(completion.replace(",", ""))
        return found[-1] if found else None
    words = _WORD.findall(completion)
    match = [w for w in words if w.lower() == row_answer.lower()]
    return match[0] if match else (words[-1] if words else None)
