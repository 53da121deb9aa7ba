"""Typed, validated parameters of each built-in task (`task.kwargs`).

Kept free of torch/transformers so that `load_config` can validate a task's
kwargs at load time, with errors naming `task.name` or `task.kwargs.<key>`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from areal.api.cli_args import ConfigError


def _int_in(name: str, value: Any, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ConfigError(f"task.kwargs.{name}: got {value!r}, expected an integer in [{low}, {high}]")


@dataclass(frozen=True)
class ArithSpec:
    """Single-turn `a <op> b =` with a, b in [min_operand, max_operand].

    The answer is written in decimal digits; `answer_tokens` (derived) is the
    fixed width of the answer field, so the episode ends after that many tokens
    or at `<eos>`. With the default operands every answer is one digit, which
    puts chance near 1/vocab.
    """

    min_operand: int = 0
    max_operand: int = 4
    op: str = "add"

    def __post_init__(self) -> None:
        _int_in("min_operand", self.min_operand, 0, 99)
        _int_in("max_operand", self.max_operand, self.min_operand, 99)
        if self.op not in ("add", "sub_abs", "mod10"):
            raise ConfigError(f"task.kwargs.op: got {self.op!r}, expected one of ['add', 'sub_abs', 'mod10']")


@dataclass(frozen=True)
class GuessSpec:
    """Multi-turn: find a hidden number in [0, num_range) within `max_turns` guesses.

    Each turn the policy writes a guess (ended by `<eot>` or `max_turn_tokens`);
    the environment answers `higher`, `lower` or `invalid`. The process scorer
    rates each turn 1 if the guess is consistent with all feedback so far, else
    0 (`process_reward: signed` maps that to +1 / -1 for GVPO-style shaping).
    """

    num_range: int = 8
    max_turns: int = 4
    max_turn_tokens: int = 2
    process_reward: str = "unit"

    def __post_init__(self) -> None:
        _int_in("num_range", self.num_range, 2, 64)
        _int_in("max_turns", self.max_turns, 1, 16)
        _int_in("max_turn_tokens", self.max_turn_tokens, 1, 8)
        if self.process_reward not in ("unit", "signed"):
            raise ConfigError(
                f"task.kwargs.process_reward: got {self.process_reward!r}, expected one of ['unit', 'signed']"
            )


TASK_SPECS: dict[str, type] = {"arith": ArithSpec, "guess": GuessSpec}
_PROCESS_SCORERS = frozenset({"guess"})


def build_task_spec(name: Any, kwargs: dict[str, Any]) -> Any:
    """Validate a task name and kwargs; return the typed spec."""
    if name not in TASK_SPECS:
        raise ConfigError(f"task.name: got {name!r}, expected one of {sorted(TASK_SPECS)}")
    spec_type = TASK_SPECS[name]
    known = {f.name for f in dataclasses.fields(spec_type)}
    unknown = sorted(set(kwargs) - known)
    if unknown:
        raise ConfigError(f"task.kwargs: unknown keys {unknown} for task {name!r}, expected a subset of {sorted(known)}")
    return spec_type(**dict(kwargs))


def task_has_process_scorer(name: str) -> bool:
    return name in _PROCESS_SCORERS
