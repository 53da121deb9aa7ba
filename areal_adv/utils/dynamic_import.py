"""Turn configured import paths into callables, with errors that name the stage.

Configs carry only dotted paths and JSON kwargs; each actor worker calls
`resolve_function` when it starts, so a typo fails at start-up, not mid-training.

Plugins are looked up in the caller's folder: `import_object` puts the working
directory on `sys.path` first (as `python -m` does), so a package next to the
user's config imports from every entry point alike (`scripts/train.sh`, the
`areal-adv` console script, a torchrun rank, a verl or TRL script run by path).
"""

from __future__ import annotations

import functools
import importlib
import inspect
import os
import sys
from collections.abc import Callable, Mapping
from typing import Any

from areal_adv.utils.suggest import did_you_mean


class PluginResolutionError(ImportError):
    """A configured function path could not be resolved into a usable callable."""

    def __init__(self, stage: str, path: str, reason: str):
        self.stage = stage
        self.path = path
        self.reason = reason
        super().__init__(f"{stage}: cannot use {path!r}: {reason}")


def caller_folder_importable() -> None:
    """Put the working directory first on `sys.path` unless it is there already (what `python -m` does)."""
    cwd = os.path.realpath(os.getcwd())
    if not any(os.path.realpath(entry or ".") == cwd for entry in sys.path):
        sys.path.insert(0, cwd)


def _names_in(module: Any) -> list[str]:
    """The public attributes of `module` and, for a package, its submodules (found without importing them)."""
    import pkgutil

    names = [n for n in dir(module) if not n.startswith("_")]
    if hasattr(module, "__path__"):
        names += [info.name for info in pkgutil.iter_modules(module.__path__)]
    return sorted(set(names))


def _missing_attribute(module_name: str, module: Any, rest: list[str]) -> str | None:
    """Why `module.<rest...>` does not resolve (None: it does)."""
    obj: Any = module
    for depth, attr in enumerate(rest):
        if not hasattr(obj, attr):
            owner = ".".join([module_name, *rest[:depth]])
            hint = did_you_mean(attr, _names_in(obj))
            if depth < len(rest) - 1:  # the name is followed by more: it was meant as a module
                return f"no module named {f'{owner}.{attr}'!r}, and {owner!r} has no attribute {attr!r}{hint}"
            return f"module {owner!r} has no attribute {attr!r}{hint}"
        obj = getattr(obj, attr)
    return None


def import_object(path: str, *, stage: str) -> Any:
    """Import `pkg.module.attr` (the longest importable module prefix wins), the caller's folder included."""
    parts = path.split(".")
    if len(parts) < 2 or not all(p.isidentifier() for p in parts):
        raise PluginResolutionError(stage, path, "expected a dotted path 'package.module.function'")
    caller_folder_importable()
    last_error: BaseException | None = None
    for split in range(len(parts) - 1, 0, -1):
        module_name = ".".join(parts[:split])
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            # Only swallow "this prefix is not a module"; a missing dependency
            # *inside* the user's module must be reported as such.
            if exc.name is not None and not module_name.startswith(exc.name) and exc.name != module_name:
                raise PluginResolutionError(stage, path, f"importing module {module_name!r} failed: {exc}") from exc
            last_error = exc
            continue
        except (Exception, SystemExit) as exc:  # the user's module raised (or exited) while importing
            raise PluginResolutionError(
                stage, path, f"importing module {module_name!r} raised {type(exc).__name__}: {exc}"
            ) from exc
        problem = _missing_attribute(module_name, module, parts[split:])
        if problem is not None:
            raise PluginResolutionError(stage, path, problem)
        obj: Any = module
        for attr in parts[split:]:
            obj = getattr(obj, attr)
        return obj
    raise PluginResolutionError(
        stage,
        path,
        f"no module named {parts[0]!r} ({last_error}; looked in the working "
        f"directory {os.getcwd()} and the installed packages)",
    )


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
        names = [
            n
            for n, p in signature.parameters.items()
            if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        ]
        hint = did_you_mean([k for k in sorted(kwargs) if k not in names], names)
        raise PluginResolutionError(
            stage, path, f"its signature ({params}) cannot take the configured kwargs {sorted(kwargs)}: {exc}{hint}"
        ) from None
    return functools.partial(fn, **kwargs) if kwargs else fn


def resolve_function(
    path: str, kwargs: Mapping[str, Any] | None = None, *, stage: str, n_positional: int = 1
) -> Callable[..., Any]:
    """Import `path`, check it is callable with the kwargs, and return it bound."""
    fn = import_object(path, stage=stage)
    return bind_kwargs(fn, dict(kwargs or {}), stage=stage, path=path, n_positional=n_positional)
