"""Stage functions that express peer frameworks' estimators (OPO, GPG, pass@k, ReMax, REINFORCE).

Registered by name in `areal.api.builtin_stages.PEER_STAGE_IMPLEMENTATIONS`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

OUTCOME: dict[str, Callable[..., Any]] = {}
ESTIMATORS: dict[str, Callable[..., Any]] = {}
