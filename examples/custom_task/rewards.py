"""Example reward functions in TRL's convention: fn(prompts, completions, **columns) -> list[float].

`columns` are the dataset's other fields (here `answer`); for chat prompts the
completions are `[{"role": "assistant", "content": ...}]`, as in TRL.
"""

from __future__ import annotations

from typing import Any


def _text(completion: Any) -> str:
    return completion if isinstance(completion, str) else completion[-1]["content"]


def exact_answer(prompts: list[Any], completions: list[Any], answer: list[str], **kwargs: Any) -> list[float]:
    """1.0 when the completion, stripped, is the row's `answer`."""
    return [1.0 if _text(c).strip() == str(a).strip() else 0.0 for c, a in zip(completions, answer)]


def brevity(prompts: list[Any], completions: list[Any], *, max_chars: int = 8, **kwargs: Any) -> list[float]:
    """-1 per character beyond `max_chars`, scaled to [-1, 0]: a shaping term for short answers."""
    return [-min(max(len(_text(c)) - max_chars, 0) / max_chars, 1.0) for c in completions]
