"""Turn configured import paths into callables, with errors that name the stage.

Configs carry only dotted paths and JSON kwargs; each actor worker calls
`resolve_function` when it starts, so a typo fails at start-up, not mid-training.
"""

from __future__ import annotations

import functools
import importlib
import inspect
from collections.abc import Callable, Mapping
from typing import Any


class PluginResolutionError(ImportError):
    """A configured function path could not be resolved into a usable callable."""

    def __init__(self, stage: str, path: str, reason: str):
        self.stage = stage
        self.path = path
        self.reason = reason
        super().__init__(f"{stage}: cannot use {path!r}: {reason}")


def import_object(path: str, *, stage: str) -> Any:
    """Import `pkg.module.attr` (the longest importable module prefix wins)."""
    parts = path.split(".")
    if len(parts) < 2 or not all(p.isidentifier() for p in parts):
        raise PluginResolutionError(stage, path, "expected a dotted path 'package.module.function'")
    last_error: BaseException | None = None
    for split in range(len(parts) - 1, 0, -1):
        module_name = ".".join(parts[:split])
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            # Only swallow "this prefix is not a module"; a missing dependency
            # *inside* the user's module must be reported as such.
            if exc.name is not None and not module_name.startswith(exc.name) and exc.name != module_name:
                raise PluginResolutionError(
                    stage, path, f"importing module {module_name!r} failed: {exc}"
                ) from exc
            last_error = exc
            continue
        except (Exception, SystemExit) as exc:  # the user's module raised (or exited) while importing
            raise PluginResolutionError(
                stage, path, f"importing module {module_name!r} raised {type(exc).__name__}: {exc}"
            ) from exc
        obj: Any = module
        for attr in parts[split:]:
            if not hasattr(obj, attr):
                raise PluginResolutionError(
                    stage, path, f"module {module_name!r} has no attribute {'.'.join(parts[split:])!r}"
                )
            obj = getattr(obj, attr)
        return obj
    raise PluginResolutionError(stage, path, f"no module named {parts[0]!r} ({last_error})")


def bind_kwargs(
    fn: Callable[..., Any], kwargs: Mapping[str, Any], *, stage: str, path: str, n_positional: int = 1
) -> Callable[..., Any]:
    """Check that `fn(<n_positional inputs>, **kwargs)` is a valid call, then bind kwargs."""
    if not callable(fn):
        raise PluginResolutionError(stage, path, f"resolved to a {type(fn).__name__}, which is not callable")
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return functools.partial(fn, **kwargs) if kwargs else fn
    try:
        signature.bind(*([None] * n_positional), **kwargs)
    except TypeError as exc:
        params = ", ".join(str(p) for p in signature.parameters.values())
        raise PluginResolutionError(
            stage, path, f"its signature ({params}) cannot take the configured kwargs {sorted(kwargs)}: {exc}"
        ) from None
    return functools.partial(fn, **kwargs) if kwargs else fn


def resolve_function(
    path: str, kwargs: Mapping[str, Any] | None = None, *, stage: str, n_positional: int = 1
) -> Callable[..., Any]:
    """Import `path`, check it is callable with the kwargs, and return it bound."""
    fn = import_object(path, stage=stage)
    return bind_kwargs(fn, dict(kwargs or {}), stage=stage, path=path, n_positional=n_positional)
