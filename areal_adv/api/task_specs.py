"""Typed, validated parameters of the built-in tasks (`task.kwargs`).

Torch-free and free of user code, so that `load_config` validates a built-in
task's kwargs at load time, with errors naming `task.implementation` or
`task.kwargs.<key>`. A task plugin (a dotted path) is only checked for shape
here; its factory is imported and called on every rank at trainer start-up.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from areal_adv.api.config_checks import ConfigError, check_json_value, is_import_path, is_integer
from areal_adv.utils.suggest import did_you_mean


def _int_in(name: str, value: Any, low: int, high: int) -> None:
    if not is_integer(value, low=low, high=high):
        raise ConfigError(f"task.kwargs.{name}: got {value!r}, expected an integer in [{low}, {high}]")


def _optional_text(name: str, value: Any) -> None:
    if value is not None and not isinstance(value, str):
        raise ConfigError(f"task.kwargs.{name}: got {value!r}, expected a string or null")


def _bool(name: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise ConfigError(f"task.kwargs.{name}: got {value!r}, expected true or false")


@dataclass(frozen=True)
class ArithSpec:
    """Single-turn `a <op> b =` with a, b in [min_operand, max_operand].

    The answer is written in decimal digits; with the built-in word tokenizer the
    answer field is fixed-width (digits of the largest answer), so the episode
    ends after that many tokens or at `<eos>`. With the default operands every
    answer is one digit, which puts chance near 1/vocab.
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


@dataclass(frozen=True)
class DatasetTaskSpec:
    """Single-turn prompts taken from `data.train` (column `data.prompt_key`), scored by `reward:`.

    `chat: true` wraps a plain-text prompt as one user message (after an
    optional `system_prompt`) and renders it with the model's chat template;
    prompts that already are message lists always use the template.
    """

    chat: bool = False
    system_prompt: str | None = None

    def __post_init__(self) -> None:
        _bool("chat", self.chat)
        _optional_text("system_prompt", self.system_prompt)


@dataclass(frozen=True)
class ReasoningGymSpec:
    """A reasoning-gym procedural dataset, scored by its own `score_answer`.

    `dataset` is the reasoning-gym name (e.g. `basic_arithmetic`); `size` and
    `seed` (null: the run seed) are reasoning-gym's own; every other key goes
    to that dataset's config (`dataset_config`). Held-out evaluation prompts
    come from a second dataset seeded past the training indices. The question
    is the user message (`chat`), after `system_prompt` (a key of
    reasoning-gym's `SYSTEM_PROMPTS`, literal text, or null); the answer is read
    from `<answer_tag>...</answer_tag>` (null: the whole completion).
    """

    dataset: str
    size: int = 1000
    seed: int | None = None
    chat: bool = True
    system_prompt: str | None = "default"
    answer_tag: str | None = "answer"
    dataset_config: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.dataset, str) or not self.dataset:
            raise ConfigError(f"task.kwargs.dataset: got {self.dataset!r}, expected a reasoning-gym dataset name")
        _int_in("size", self.size, 1, 10**9)
        if self.seed is not None:
            _int_in("seed", self.seed, 0, 2**32 - 1)
        _bool("chat", self.chat)
        _optional_text("system_prompt", self.system_prompt)
        _optional_text("answer_tag", self.answer_tag)
        check_json_value("task.kwargs", self.dataset_config)


TASK_SPECS: dict[str, type] = {
    "arith": ArithSpec,
    "guess": GuessSpec,
    "dataset": DatasetTaskSpec,
    "reasoning_gym": ReasoningGymSpec,
}
BUILTIN_TASKS: tuple[str, ...] = tuple(TASK_SPECS)
_PROCESS_SCORERS = frozenset({"guess"})
_OPEN_KWARGS = frozenset({"reasoning_gym"})  # unknown keys go to the dataset's own config


def build_task_spec(name: Any, kwargs: dict[str, Any], field: str = "task.implementation") -> Any:
    """Validate a built-in task's name and kwargs; return the typed spec (`field`: the key that named it)."""
    if name not in TASK_SPECS:
        raise ConfigError(
            f"{field}: got {name!r}, expected one of {list(BUILTIN_TASKS)} or a dotted import "
            "path to a task factory such as 'my_package.my_module.make_task'"
        )
    spec_type = TASK_SPECS[name]
    known = {f.name for f in dataclasses.fields(spec_type)} - {"dataset_config"}
    kwargs = dict(kwargs)
    if name in _OPEN_KWARGS:
        if "dataset_config" in kwargs:
            raise ConfigError("task.kwargs.dataset_config: pass the dataset's own options as plain task.kwargs keys")
        extra = {k: kwargs.pop(k) for k in sorted(set(kwargs) - known)}
        if "dataset" not in kwargs:
            raise ConfigError("task.kwargs.dataset: missing; reasoning_gym needs a dataset name, e.g. basic_arithmetic")
        return spec_type(**kwargs, dataset_config=extra)
    unknown = sorted(set(kwargs) - known)
    if unknown:
        raise ConfigError(
            f"task.kwargs: unknown keys {unknown} for task {name!r}, expected a subset of "
            f"{sorted(known)}{did_you_mean(unknown, known)}"
        )
    return spec_type(**kwargs)


def validate_task(implementation: Any, kwargs: Any, field: str = "task.implementation") -> None:
    """Load-time check: built-ins fully, plugins by shape (path and JSON kwargs) only."""
    if not isinstance(implementation, str) or not implementation:
        raise ConfigError(f"{field}: got {implementation!r}, expected a non-empty string")
    if not isinstance(kwargs, dict):
        raise ConfigError(f"task.kwargs: got {kwargs!r}, expected a mapping")
    check_json_value("task.kwargs", kwargs)
    if implementation in TASK_SPECS or not is_import_path(implementation):
        build_task_spec(implementation, kwargs, field)


def task_has_process_scorer(name: str) -> bool:
    """Known for built-ins at load time; a plugin declares it (checked at start-up)."""
    return name in _PROCESS_SCORERS
