"""Config-loading errors that name the key: per-override parsing and merge-error location.

OmegaConf reports some failures without the key they happened at: a merge of
an int into a structured node (`actor.adv_norm=2`), of a list into a mapping
(`...kwargs=[1, 2]`), or invalid YAML in a dotted override's value (a raw
`yaml.ScannerError`). These helpers parse each override on its own, so a YAML
error names the override, and, when a merge fails without a key, find the key
by merging the layer's entries one by one (only on failure, so loading costs
nothing extra), then the override that set it. `areal_adv.api.compose` calls them;
they know no schema and import nothing from `areal_adv` but `areal_adv.utils.suggest`.
An unknown key gets our own "did you mean" (difflib over the fields of the
structured node above it), whatever OmegaConf version is installed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

from areal_adv.utils.suggest import did_you_mean

__all__ = ["LoadError", "describe_merge_error", "locate", "override_for", "parse_override"]


class LoadError(ValueError):
    """A layer or override cannot be loaded; the message names the key (and the override)."""


def parse_override(item: str) -> dict[str, Any]:
    """One dotted `key=value` override as a nested dict; invalid YAML in the value names the override."""
    import yaml
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    key, value = item.split("=", 1)
    try:
        return cast("dict[str, Any]", OmegaConf.to_container(OmegaConf.from_dotlist([item]), resolve=False))
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
    import dataclasses
    import types
    import typing

    declared = _declared_type(merged, path)
    if declared is None:
        return "which the schema does not accept there"
    optional = typing.get_origin(declared) in (typing.Union, types.UnionType) and type(None) in typing.get_args(
        declared
    )
    declared = _unwrap_optional(declared)
    origin = typing.get_origin(declared) or declared
    if dataclasses.is_dataclass(origin):
        text = f"a mapping of {getattr(origin, '__name__', origin)} fields"
    elif origin is dict or (isinstance(origin, type) and issubclass(origin, Mapping)):
        text = "a mapping"
    elif origin in (list, tuple):
        text = "a list"
    else:
        name = str(getattr(origin, "__name__", origin))
        text = f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"  # an int, a float, a str
    return f"expected {text}{' or null' if optional else ''}"


def describe_merge_error(exc: BaseException, merged: Any, data: Mapping[str, Any]) -> tuple[str, str]:
    """(dotted key, what was found and expected) for a failed merge of `data` into `merged`.

    OmegaConf's own message is kept (alone for an unknown key, in parentheses
    otherwise), so the wording does not depend on its version.
    """
    from omegaconf.errors import OmegaConfBaseException

    original = (str(exc).splitlines() or [type(exc).__name__])[0]
    key = getattr(exc, "full_key", None) if isinstance(exc, OmegaConfBaseException) else None
    path = tuple(key.split(".")) if key else None
    if not path or _value_at(data, path) is _MISSING:  # no key, or one relative to a list entry
        path = locate(merged, data) or path
    if not path:
        return "config", original
    unknown = unknown_key(merged, path)
    if unknown is not None:
        return ".".join(path), unknown
    found = _value_at(data, path)
    entry = _list_entry_detail(merged, path, found, original)
    if entry is not None:
        return entry
    if found is _MISSING or _declared_type(merged, path) is None:
        return ".".join(path), original
    return ".".join(path), f"got {found!r} ({type(found).__name__}), {_expected(merged, path)} ({original})"


def unknown_key(merged: Any, path: tuple[str, ...]) -> str | None:
    """ "unknown key 'k' in X; did you mean ...?" when `path[-1]` is no field of the structured node above it."""
    import dataclasses

    from omegaconf import OmegaConf

    owner = OmegaConf.get_type(merged) if len(path) == 1 else _unwrap_optional(_declared_type(merged, path[:-1]))
    if not (isinstance(owner, type) and dataclasses.is_dataclass(owner)):
        return None
    names = [f.name for f in dataclasses.fields(owner)]
    if path[-1] in names:
        return None
    hint = did_you_mean(path[-1], names)
    return f"unknown key {path[-1]!r} in {owner.__name__}" + (hint or f" (its keys: {', '.join(names)})")


def _entry_type(merged: Any, path: tuple[str, ...]) -> Any:
    """X for a field declared `list[X]` with X a dataclass (e.g. `reward`), else None."""
    import dataclasses
    import typing

    declared = _unwrap_optional(_declared_type(merged, path))
    args = typing.get_args(declared) if typing.get_origin(declared) in (list, tuple) else ()
    return args[0] if args and dataclasses.is_dataclass(args[0]) else None


def _list_entry_detail(merged: Any, path: tuple[str, ...], value: Any, original: str) -> tuple[str, str] | None:
    """For a list of structured entries: the first entry that cannot be merged and the key inside it.

    `locate` stops at the list (`reward`); this names `reward[1].kwargs` instead.
    """
    from omegaconf import OmegaConf

    cls = _entry_type(merged, path)
    if cls is None or isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Sequence):
        return None
    for i, item in enumerate(value):
        where = f"{'.'.join(path)}[{i}]"
        node = OmegaConf.structured(cls)
        if not isinstance(item, Mapping):
            return (
                where,
                f"got {item!r} ({type(item).__name__}), expected a mapping of {cls.__name__} fields ({original})",
            )
        if not _merge_fails(node, (), item):
            continue
        sub = locate(node, item)
        if not sub:
            return where, original
        unknown = unknown_key(node, sub)
        if unknown is not None:
            return f"{where}.{'.'.join(sub)}", unknown
        found = _value_at(item, sub)
        return (
            f"{where}.{'.'.join(sub)}",
            f"got {found!r} ({type(found).__name__}), {_expected(node, sub)} ({original})",
        )
    return None


def override_for(key: str, overrides: Sequence[str]) -> str | None:
    """The override that set `key` (or a key above or below it), the last one if several did."""
    found = None
    for item in overrides:
        target = item.split("=", 1)[0].strip()
        if target == key or key.startswith((target + ".", target + "[")) or target.startswith(key + "."):
            found = item
    return found


_MISSING = object()


def _value_at(data: Any, path: tuple[str, ...]) -> Any:
    from omegaconf import OmegaConf

    for key in path:
        if OmegaConf.is_config(data):
            data = OmegaConf.to_container(data, resolve=False)
        if not isinstance(data, Mapping) or key not in data:
            return _MISSING
        data = data[key]
    return OmegaConf.to_container(data, resolve=False) if OmegaConf.is_config(data) else data
