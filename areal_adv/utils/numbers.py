"""What counts as a number in a config value or a stage's keyword argument: one definition for every layer.

The config layer (`areal_adv.api.config_checks`) re-exports these, and the utilities below it
(`batch_meta`) use them directly, so the check is the same on both sides.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["is_number", "is_real"]


def is_real(value: Any) -> bool:
    """An `int` or `float` that is not a bool (`True` is an int to Python, never a number to a config)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_number(
    value: Any,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
    allow_inf: bool = False,
) -> bool:
    """A real number (`True`/`False` are not), never NaN, finite unless `allow_inf`, within the bounds.

    The one place that says what a numeric option may hold: config sections and stage functions
    call it and keep their own messages (which name the field and the range).
    """
    if not is_real(value) or math.isnan(value):
        return False
    if math.isinf(value) and not allow_inf:
        return False
    if low is not None and (value < low or (low_open and value == low)):
        return False
    return high is None or (value < high if high_open else value <= high)
