"""The one registry of built-in advantage-stage functions (no torch import here).

Each built-in stage function is named where it is defined, with `@register_stage(stage, name)`
right above it; registering a name twice raises an error naming both functions. The stage
modules register into `STAGE_REGISTRY` when they are imported (the trainer imports them all
in `areal_adv.trainer.ppo.stage_resolution`).

The config layer must check names without importing torch or any stage code, so
`builtin_stage_names` reads the same decorators from the modules' source, and
`StageRegistry.functions` compares the two once the modules are imported: a function
registered any other way (not with a literal decorator in one of `BUILTIN_STAGE_MODULES`)
fails there instead of being unknown to the config.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

__all__ = [
    "BUILTIN_STAGE_MODULES",
    "SELECTORS",
    "STAGE_REGISTRY",
    "STAGES",
    "StageRegistry",
    "builtin_stage_names",
    "register_stage",
]

F = TypeVar("F", bound=Callable[..., Any])

#: The replaceable stages of `actor.advantage`, in pipeline order.
STAGES: tuple[str, ...] = ("compute", "outcome_reward_shaping", "estimator", "process_adv_shaping")

#: Names that select a behaviour rather than a registered function: `default` is the built-in pipeline,
#: `auto` the stage's default implementation (chosen by the trainer from the rest of the config).
SELECTORS: dict[str, tuple[str, ...]] = {
    "compute": ("default",),
    "outcome_reward_shaping": ("auto",),
    "estimator": ("auto",),
    "process_adv_shaping": ("auto",),
}

#: The modules that define built-in stage functions; the config lists each stage's names in this order.
BUILTIN_STAGE_MODULES: tuple[str, ...] = (
    "areal_adv.trainer.ppo.advantage_algorithms",
    "areal_adv.trainer.ppo.estimators.peer_algorithms",
    "areal_adv.trainer.ppo.estimators.gdpo",
    "areal_adv.trainer.ppo.estimators.stateful_baselines",
    "areal_adv.trainer.ppo.estimators.role_baselines",
    "areal_adv.trainer.ppo.estimators.step_credit",
    "areal_adv.trainer.ppo.estimators.token_baseline",
    "areal_adv.trainer.ppo.estimators.combine",
    "areal_adv.trainer.ppo.estimators.entropy_shaping",
)

_DECORATOR = "register_stage"


def _label(fn: Callable[..., Any]) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


class StageRegistry:
    """Built-in stage functions by (stage, name); a name is registered once."""

    def __init__(self) -> None:
        self._functions: dict[str, dict[str, Callable[..., Any]]] = {stage: {} for stage in STAGES}

    def register(self, stage: str, name: str) -> Callable[[F], F]:
        """Decorator: file `fn` under `name` for `stage`; a second function under the same name raises."""
        if stage not in self._functions:
            raise ValueError(f"register_stage: stage {stage!r} is not one of {list(STAGES)}")
        if name in SELECTORS[stage] or not name.isidentifier():
            raise ValueError(
                f"register_stage: name {name!r} for stage {stage!r} must be an identifier other than "
                f"{list(SELECTORS[stage])}"
            )

        def decorate(fn: F) -> F:
            known = self._functions[stage].get(name)
            if known is not None:
                raise ValueError(
                    f"register_stage: {stage} {name!r} is registered twice, by {_label(known)} and by {_label(fn)}"
                )
            self._functions[stage][name] = fn
            return fn

        return decorate

    def names(self, stage: str) -> tuple[str, ...]:
        """The registered names of `stage`, in registration order."""
        return tuple(self._functions[stage])

    def defined_in(self, stage: str, module: str) -> dict[str, Callable[..., Any]]:
        """The functions of `stage` that `module` registered, by name."""
        return {name: fn for name, fn in self._functions[stage].items() if fn.__module__ == module}

    def functions(self, stage: str) -> dict[str, Callable[..., Any]]:
        """The registered functions of `stage`, in the config's order, checked against the names it accepts.

        Call it once the built-in modules are imported: a name the config accepts with no function
        behind it, or a function the config would reject, raises here rather than at a user's run.
        """
        expected = builtin_stage_names()[stage][len(SELECTORS[stage]) :]
        if set(self.names(stage)) != set(expected):
            raise RuntimeError(
                f"stage registry: {stage} has functions for {sorted(self.names(stage))}, but the "
                f"`@{_DECORATOR}` decorators in {list(BUILTIN_STAGE_MODULES)} name {sorted(expected)}"
            )
        return {name: self._functions[stage][name] for name in expected}


#: The registry the built-in modules register into.
STAGE_REGISTRY = StageRegistry()
register_stage = STAGE_REGISTRY.register


def _module_path(module: str) -> Path:
    """The source file of an `areal_adv` module, found without importing it (or its package)."""
    root = Path(__file__).resolve().parents[1]  # the `areal_adv` package
    return root.joinpath(*module.split(".")[1:]).with_suffix(".py")


def _decorated_names(module: str) -> list[tuple[str, str]]:
    """(stage, name) of each `@register_stage("stage", "name")` on a top-level function of `module`."""
    found = []
    for node in ast.parse(_module_path(module).read_text(encoding="utf-8")).body:
        if not isinstance(node, ast.FunctionDef):
            continue
        for deco in node.decorator_list:
            if not (isinstance(deco, ast.Call) and isinstance(deco.func, ast.Name) and deco.func.id == _DECORATOR):
                continue
            args = [a.value for a in deco.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            if len(args) != 2 or len(deco.args) != 2 or deco.keywords:
                raise ValueError(f"{module}.{node.name}: @{_DECORATOR} takes two string literals (stage, name)")
            found.append((args[0], args[1]))
    return found


@functools.cache
def builtin_stage_names() -> dict[str, tuple[str, ...]]:
    """Every name the config accepts per stage: the selectors, then the registered names by module order."""
    names = {stage: list(SELECTORS[stage]) for stage in STAGES}
    for module in BUILTIN_STAGE_MODULES:
        for stage, name in _decorated_names(module):
            if stage not in names:
                raise ValueError(f"{module}: @{_DECORATOR} names stage {stage!r}, expected one of {list(STAGES)}")
            names[stage].append(name)
    return {stage: tuple(found) for stage, found in names.items()}
