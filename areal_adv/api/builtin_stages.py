"""Names of the built-in stage implementations, per stage (no torch import here).

The config layer checks names against this table without importing any stage
code. The table is derived from the `@register_stage` decorators on the stage
functions (`areal_adv.api.stage_registry`); anything not listed is treated as a
dotted import path.
"""

from __future__ import annotations

from areal_adv.api.stage_registry import builtin_stage_names

__all__ = ["BUILTIN_STAGE_IMPLEMENTATIONS"]

BUILTIN_STAGE_IMPLEMENTATIONS: dict[str, tuple[str, ...]] = builtin_stage_names()
