"""`task.implementation` -> a task object: a built-in, or a plugin factory resolved at start-up.

Built-in task modules are imported only when built. A plugin path is imported
here, in each rank's own process (never at config load), its factory called
with `task.kwargs`, and the object it returns checked for the methods its kind
needs, so a bad plugin fails at start-up with the path in the message.
"""

from __future__ import annotations

import importlib
from typing import Any

from areal_adv.api.config_checks import is_integer
from areal_adv.api.task_specs import build_task_spec
from areal_adv.api.train_args import TaskConfig
from areal_adv.utils.dynamic_import import PluginResolutionError, resolve_function

_BUILTIN_CLASSES: dict[str, str] = {
    "arith": "areal_adv.trainer.rollout.tasks.arith.ArithTask",
    "guess": "areal_adv.trainer.rollout.tasks.guess.GuessTask",
    "dataset": "areal_adv.trainer.rollout.tasks.dataset.DatasetTask",
    "reasoning_gym": "areal_adv.trainer.rollout.tasks.reasoning_gym.ReasoningGymTask",
}
STAGE = "task.implementation"


def _builtin(name: str, kwargs: dict[str, Any], *, seed: int, prompt_key: str) -> Any:
    spec = build_task_spec(name, dict(kwargs))
    module, _, cls = _BUILTIN_CLASSES[name].rpartition(".")
    task_cls = getattr(importlib.import_module(module), cls)
    if name == "dataset":
        return task_cls(spec, prompt_key=prompt_key)
    if name == "reasoning_gym":
        return task_cls(spec, run_seed=seed)
    return task_cls(spec)


def _plugin(path: str, kwargs: dict[str, Any]) -> Any:
    factory = resolve_function(path, kwargs, stage=STAGE, n_positional=0)
    try:
        task = factory()
    except Exception as exc:
        raise PluginResolutionError(
            STAGE, path, f"calling the factory with task.kwargs={kwargs} raised {type(exc).__name__}: {exc}"
        ) from exc
    check_task_object(task, path)
    return task


def _bad(path: str, reason: str) -> TypeError:
    return TypeError(f"{STAGE}: {path!r} returned a task that {reason} (see 'Writing a task' in docs/training.md)")


def check_task_object(task: Any, path: str) -> None:
    """The methods and attributes the rollout will use, with the expected kinds."""
    multi_turn = getattr(task, "multi_turn", False)
    if not isinstance(multi_turn, bool):
        raise _bad(path, f"has multi_turn={multi_turn!r}, expected true or false")
    for method in ("sample", "prompt", "score", "environment"):
        value = getattr(task, method, None)
        if value is not None and not callable(value):
            raise _bad(path, f"has a non-callable {method!r} attribute")
    if multi_turn and not callable(getattr(task, "environment", None)):
        raise _bad(path, "is multi_turn but has no environment(row) method")
    if multi_turn and callable(getattr(task, "score", None)):
        raise _bad(
            path, "is multi_turn and has score(); a multi-turn task is scored by its environment's per-turn rewards"
        )
    cap = getattr(task, "max_turn_tokens", None)
    if cap is not None and not is_integer(cap, low=1):
        raise _bad(path, f"has max_turn_tokens={cap!r}, expected null or an integer >= 1")
    for attr in ("vocabulary", "stop_words"):
        words = getattr(task, attr, None)
        if words is not None and (isinstance(words, str) or not all(isinstance(w, str) for w in words)):
            raise _bad(path, f"has {attr}={words!r:.80}, expected null or a list of strings")
    if not isinstance(getattr(task, "has_process_scorer", False), bool):
        raise _bad(path, "has a non-boolean has_process_scorer")


def make_task(cfg: TaskConfig, *, seed: int = 1, prompt_key: str = "prompt") -> Any:
    """The task object of `cfg` (built-in or plugin)."""
    name = cfg.implementation
    if not cfg.is_plugin:
        return _builtin(name, cfg.kwargs, seed=seed, prompt_key=prompt_key)
    return _plugin(name, cfg.kwargs)
