"""Graded TRL-style reward functions for multi-reward tests: values that differ between samples."""

from __future__ import annotations

from typing import Any


def _text(completion: Any) -> str:
    return completion if isinstance(completion, str) else completion[-1]["content"]


def char_length(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float]:
    """The completion's length in characters (a large-scale component)."""
    return [float(len(_text(c))) for c in completions]


def digit_share(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float]:
    """The share of the completion's characters that are digits, in [0, 1]."""
    return [sum(ch.isdigit() for ch in _text(c)) / max(len(_text(c)), 1) for c in completions]
