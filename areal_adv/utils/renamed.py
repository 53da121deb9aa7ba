"""Former names of renamed functions, still importable from their module with a DeprecationWarning."""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["renamed_attributes"]


def renamed_attributes(module: str, renamed: Mapping[str, str]) -> Callable[[str], Any]:
    """A module `__getattr__` that resolves each former name in `renamed` to its new one, with a warning."""

    def __getattr__(name: str) -> Any:
        if name in renamed:
            new = renamed[name]
            warnings.warn(f"{module}.{name} is deprecated; use {new}", DeprecationWarning, stacklevel=2)
            return getattr(sys.modules[module], new)
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    return __getattr__
