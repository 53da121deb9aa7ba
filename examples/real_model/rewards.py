"""The run's two reward components, in TRL's convention `fn(prompts, completions, ...) -> list[float]`.

`correct` is the task's accuracy: the answer is finished (the model ended it,
the token budget did not cut it) and its last integer is the sum, whatever
surrounds it ("7", "3 + 4 = 7", "The answer is 7." all count). Without the
first condition a cut-off restatement such as "To add 0 + 8, we need to" would
count for `0 + 8`. `number_only` is the format the system prompt asks for
("Answer with the number only."): the whole completion is one integer, right or
wrong. GDPO normalises the two separately; the other estimators see their
weighted sum.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

_INTEGER = re.compile(r"-?\d+")


def _text(completion: Any) -> str:
    """A completion as text (chat prompts give TRL's `[{"role": "assistant", "content": ...}]`)."""
    return completion if isinstance(completion, str) else completion[-1]["content"]


def last_integer(text: str) -> str | None:
    """The last integer in `text` (thousands separators removed), or None."""
    found = _INTEGER.findall(text.replace(",", ""))
    return found[-1] if found else None


def correct(
    prompts: list[Any],
    completions: list[Any],
    answer: list[str],
    completion_ids: list[list[int]],
    end_ids: Sequence[int] | None = None,
) -> list[float]:
    """1.0 when the completion ended with one of `end_ids` (None: any ending) and its last integer is `answer`.

    The trainer keeps the stop token that ended a completion as its last id
    (`completion_ids`); a completion cut by the token budget ends with an
    ordinary token. `end_ids` are the model's stop tokens (SmolLM2: 1 and 2).
    """
    ends = None if end_ids is None else set(end_ids)
    return [
        1.0 if (ends is None or (ids and ids[-1] in ends)) and last_integer(_text(c)) == str(a).strip() else 0.0
        for c, a, ids in zip(completions, answer, completion_ids)
    ]


def number_only(prompts: list[Any], completions: list[Any]) -> list[float]:
    """1.0 when the completion, stripped, is a single integer (the asked-for format), else 0.0."""
    return [1.0 if _INTEGER.fullmatch(_text(c).strip()) else 0.0 for c in completions]
