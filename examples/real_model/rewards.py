"""The run's two reward components, in TRL's convention `fn(prompts, completions, answer) -> list[float]`.

`correct` is the task's accuracy: the completion's last integer equals the
answer, whatever surrounds it ("7", "3 + 4 = 7", "The answer is 7." all count).
`number_only` is the format the system prompt asks for ("Answer with the number
only."): the whole completion is one integer, right or wrong. GDPO normalises
the two separately; the other estimators see their weighted sum.
"""

from __future__ import annotations

import re
from typing import Any

_INTEGER = re.compile(r"-?\d+")


def _text(completion: Any) -> str:
    """A completion as text (chat prompts give TRL's `[{"role": "assistant", "content": ...}]`)."""
    return completion if isinstance(completion, str) else completion[-1]["content"]


def last_integer(text: str) -> str | None:
    """The last integer in `text` (thousands separators removed), or None."""
    found = _INTEGER.findall(text.replace(",", ""))
    return found[-1] if found else None


def correct(prompts: list[Any], completions: list[Any], answer: list[str]) -> list[float]:
    """1.0 when the completion's last integer is the row's `answer`, else 0.0."""
    return [1.0 if last_integer(_text(c)) == str(a).strip() else 0.0 for c, a in zip(completions, answer)]


def number_only(prompts: list[Any], completions: list[Any]) -> list[float]:
    """1.0 when the completion, stripped, is a single integer (the asked-for format), else 0.0."""
    return [1.0 if _INTEGER.fullmatch(_text(c).strip()) else 0.0 for c in completions]
