"""Config-loading errors that name the key: per-override parsing and merge-error location.

OmegaConf reports some failures without the key they happened at: a merge of
an int into a structured node (`actor.adv_norm=2`), of a list into a mapping
(`...kwargs=[1, 2]`), or invalid YAML in a dotted override's value (a raw
`yaml.ScannerError`). These helpers parse each override on its own, so a YAML
error names the override, and, when a merge fails without a key, find the key
by merging the layer's entries one by one (only on failure, so loading costs
nothing extra). They know no schema and import nothing from `areal`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["LoadError", "merge_layer", "parse_override"]


class LoadError(ValueError):
    """A layer or override cannot be loaded; the message names the key (and the override)."""


def parse_override(item: str) -> dict[str, Any]:
    """One dotted `key=value` override as a nested dict; invalid YAML in the value names the override."""
    import yaml
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    key, value = item.split("=", 1)
    try:
        return OmegaConf.to_container(OmegaConf.from_dotlist([item]), resolve=False)
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or " ".join(str(exc).split())
        raise LoadError(
            f"override {item!r}: the value {value!r} of {key.strip()} is not valid YAML ({problem}); "
            "quote it, e.g. key='[1'"
        ) from None
    except OmegaConfBaseException as exc:
        raise LoadError(f"override {item!r}: {str(exc).splitlines()[0]}") from None


def _nest(path: tuple[str, ...], value: Any) -> dict[str, Any]:
    for key in reversed(path):
        value = {key: value}
    return value


def _merge_fails(merged: Any, path: tuple[str, ...], value: Any) -> bool:
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    try:
        OmegaConf.merge(merged, _nest(path, value))
    except (OmegaConfBaseException, TypeError, ValueError):
        return True
    return False


def locate(merged: Any, data: Mapping[str, Any], prefix: tuple[str, ...] = ()) -> tuple[str, ...] | None:
    """The deepest key of `data` whose value alone cannot be merged into `merged` (None: no single one)."""
    for key, value in data.items():
        path = (*prefix, str(key))
        if not _merge_fails(merged, path, value):
            continue
        if isinstance(value, Mapping) and value:
            return locate(merged, value, path) or path
        return path
    return None


def _declared_type(merged: Any, path: tuple[str, ...]) -> Any:
    """The annotated type of `path` in the structured config (walking dataclass fields below a null node)."""
    import dataclasses
    import typing

    from omegaconf import OmegaConf

    for depth in range(len(path) - 1, -1, -1):  # the deepest existing structured ancestor
        node = OmegaConf.select(merged, ".".join(path[:depth]), default=None) if depth else merged
        owner = OmegaConf.get_type(node) if OmegaConf.is_config(node) else None
        if owner is not None and dataclasses.is_dataclass(owner):
            break
    else:
        return None
    declared: Any = owner
    for key in path[depth:]:
        declared = _unwrap_optional(declared)
        if not dataclasses.is_dataclass(declared):
            return None
        declared = typing.get_type_hints(declared).get(key)
    return declared


def _unwrap_optional(declared: Any) -> Any:
    """`X | None` -> X (the first non-None member of a union); other types unchanged."""
    import types
    import typing

    if typing.get_origin(declared) in (typing.Union, types.UnionType):
        members = [a for a in typing.get_args(declared) if a is not type(None)]
        return members[0] if members else declared
    return declared


def _expected(merged: Any, path: tuple[str, ...]) -> str:
    import typing

    declared = _declared_type(merged, path)
    if declared is None:
        return "which the schema does not accept there"
    declared = _unwrap_optional(declared)
    origin = typing.get_origin(declared) or declared
    if origin is dict or (isinstance(origin, type) and issubclass(origin, Mapping)):
        return "expected a mapping"
    if origin in (list, tuple):
        return "expected a list"
    return f"expected {getattr(origin, '__name__', origin)}"


def merge_layer(merged: Any, data: Mapping[str, Any], source: str) -> Any:
    """`merged` with `data` merged in; a failure names the key, what was found and the source."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    try:
        return OmegaConf.merge(merged, data)
    except (OmegaConfBaseException, TypeError, ValueError) as exc:
        key = getattr(exc, "full_key", None)
        path = None if key else locate(merged, data)
        key = key or (".".join(path) if path else "config")
        detail = str(exc).splitlines()[0] if isinstance(exc, OmegaConfBaseException) else str(exc)
        if path and not isinstance(exc, OmegaConfBaseException):
            value = OmegaConf.select(OmegaConf.create(dict(data)), key, default=None)
            value = OmegaConf.to_container(value) if OmegaConf.is_config(value) else value
            detail = f"got {value!r} ({type(value).__name__}), {_expected(merged, path)}"
        raise LoadError(f"{key}: {detail} (from {source})") from None
