"""The skill task's reward components, in TRL's convention `fn(prompts, completions, ...) -> list[float]`.

Every component is reasoning-gym's own `score_answer` (through skill_tasks.py,
which knows each row's dataset from its `task` column). `score` is the training
reward: the score of the whole completion, which is the answer in the format
the system prompt asks for (reasoning-gym gives partial credit, e.g. to a
reversed word with a right prefix). `solved` is the strict accuracy (that score
is 1.0); `solved_lenient` the format-fixed accuracy (the answer read out of any
wording scores 1.0). The last two carry weight 0 in the run: they are measured
at every evaluation, not trained on. A completion the token budget cut off
scores 0 in the strict components (`end_ids`: the model's stop tokens).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from examples.real_model import skill_tasks


def _text(completion: Any) -> str:
    """A completion as text (chat prompts give TRL's `[{"role": "assistant", "content": ...}]`)."""
    return completion if isinstance(completion, str) else completion[-1]["content"]


def _finished(ids: Sequence[int], end_ids: Sequence[int] | None) -> bool:
    return end_ids is None or (len(ids) > 0 and ids[-1] in set(end_ids))


def score(
    prompts: list[Any],
    completions: list[Any],
    answer: list[str],
    task: list[str],
    metadata: list[str],
    completion_ids: list[list[int]],
    end_ids: Sequence[int] | None = None,
) -> list[float]:
    """reasoning-gym's `score_answer` of the stripped completion; 0 for one the token budget cut off."""
    return [
        skill_tasks.score(t, _text(c).strip(), a, m) if _finished(ids, end_ids) else 0.0
        for c, a, t, m, ids in zip(completions, answer, task, metadata, completion_ids)
    ]


def solved(
    prompts: list[Any],
    completions: list[Any],
    answer: list[str],
    task: list[str],
    metadata: list[str],
    completion_ids: list[list[int]],
    end_ids: Sequence[int] | None = None,
) -> list[float]:
    """1.0 when `score` is 1.0: the finished completion is exactly the answer (the strict accuracy)."""
    return [
        1.0 if s == 1.0 else 0.0 for s in score(prompts, completions, answer, task, metadata, completion_ids, end_ids)
    ]


def solved_lenient(
    prompts: list[Any], completions: list[Any], answer: list[str], task: list[str], metadata: list[str]
) -> list[float]:
    """1.0 when the answer read from any wording scores 1.0 (the format-fixed accuracy; cut-offs count too)."""
    out = []
    for c, a, t, m in zip(completions, answer, task, metadata):
        read = skill_tasks.lenient_answer(t, _text(c), a)
        out.append(1.0 if skill_tasks.score(t, read, a, m) == 1.0 else 0.0)
    return out
