"""Config composition: `defaults:` lists, bare-string stages, layered merging.

A YAML file may start with `defaults: [base.yaml, ...]`: those files (paths
relative to the including file, or `preset:NAME` for a preset shipped with the
package, see `areal_adv.api.presets`; each possibly with its own `defaults:`) are
merged in order, then the file itself, then the command-line overrides. This is
Hydra's defaults list reduced to what a single experiment file needs; Hydra
itself is not used because it owns the command line, the working directory and
the output folders, all of which the trainer manages itself.

Stage nodes (`actor.advantage.<stage>`) get one rule OmegaConf does not have: a
layer that names an implementation different from the one configured so far
replaces the stage (its kwargs belonged to the old implementation), and a bare
string `estimator: turn_gae` means `{implementation: turn_gae, kwargs: {}}`. A
layer that only sets `kwargs` (or repeats the implementation) updates them. The
task follows the same rule: a new `task.name` starts from empty `task.kwargs`,
so `task.name=guess` on top of the arithmetic run does not inherit its kwargs.

This module knows no schema: which nodes follow the naming rule is passed in as
`NamedNode`s (`areal_adv.api.cli_args.load_config` lists the stages and the task),
so it imports nothing from areal_adv but the schema-free `config_errors`, `presets` and `config_checks.shown_path`
and adds no import circle. Its errors are
`CompositionError`s; `load_config` re-raises them as `ConfigError`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from areal_adv.api.config_checks import shown_path
from areal_adv.api.config_errors import LoadError, describe_merge_error, override_for, parse_override
from areal_adv.api.presets import PRESET_DIR, PresetError, is_preset_ref, resolve_source

#: The key that lists a file's base files.
DEFAULTS_KEY = "defaults"


class CompositionError(ValueError):
    """A `defaults:` list, a YAML file or a layer is wrong; the message names the key and the file."""


@dataclass(frozen=True)
class NamedNode:
    """A node selected by name whose kwargs belong to that name (a stage, the task).

    `fresh(name)` is the node to start from when a layer names another
    implementation (None: keep the node, empty its `kwargs` and clear every
    name key); `bare_string` lets `key: NAME` stand for `{name_key: NAME,
    kwargs: {}}`. `aliases` are other keys naming the same thing (the task's
    `name` and `implementation`): a layer may use any of them, the node's name
    so far is read from any of them, and a new name clears them all so that the
    later layer's key is the only one set.
    """

    path: tuple[str, ...]
    name_key: str
    fresh: Callable[[str], Any] | None = None
    bare_string: bool = False
    aliases: tuple[str, ...] = ()

    @property
    def name_keys(self) -> tuple[str, ...]:
        return (self.name_key, *self.aliases)

    def name_in(self, node: Any) -> str | None:
        """The name a node (a layer's dict or the merged DictConfig) sets, by the first name key it sets."""
        for key in self.name_keys:
            value = node.get(key) if node is not None else None
            if isinstance(value, str):
                return value
        return None


@dataclass(frozen=True)
class Layer:
    """One mapping to merge, and where it came from (for error messages; `overrides` for the command line)."""

    source: str
    data: dict[str, Any]
    overrides: tuple[str, ...] = ()


def _read_yaml(path: str) -> dict[str, Any]:
    import yaml
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    try:
        loaded = OmegaConf.load(path)
    except (yaml.YAMLError, OmegaConfBaseException) as exc:
        detail = " ".join(str(exc).split())
        raise CompositionError(f"config file {path!r}: cannot parse YAML: {detail}") from None
    if not OmegaConf.is_dict(loaded):
        raise CompositionError(f"config file {path!r}: expected a mapping at the top level, got a list")
    return cast("dict[str, Any]", OmegaConf.to_container(loaded, resolve=False))


def _default_entries(data: dict[str, Any], source: str) -> list[str]:
    entries = data.pop(DEFAULTS_KEY, None)
    if entries is None:
        return []
    if isinstance(entries, str) or not isinstance(entries, list):
        raise CompositionError(
            f"{DEFAULTS_KEY} (in {source}): got {entries!r}, expected a list of YAML file paths "
            "relative to this file or preset names, e.g. defaults: [preset:grpo]"
        )
    for i, entry in enumerate(entries):
        if not isinstance(entry, str) or not entry:
            raise CompositionError(
                f"{DEFAULTS_KEY}[{i}] (in {source}): got {entry!r}, expected a YAML file path or preset:NAME"
            )
    return entries


def file_layers(path: str | os.PathLike, _stack: tuple[str, ...] = ()) -> list[Layer]:
    """The layers of a YAML file (or `preset:NAME`): its `defaults:` (recursively, in order), then the file itself."""
    try:
        path = resolve_source(path)
    except PresetError as exc:
        raise CompositionError(f"config {path!r}: {exc}") from None
    real = os.path.realpath(path)
    if not os.path.isfile(path):
        raise CompositionError(f"config file {shown_path(path)} does not exist")
    data = _read_yaml(path)
    entries = _default_entries(data, path)
    layers: list[Layer] = []
    here = os.path.dirname(real)
    for i, entry in enumerate(entries):
        target = _default_target(entry, here, f"{DEFAULTS_KEY}[{i}] (in {path})")
        if not os.path.isfile(target):
            raise CompositionError(
                f"{DEFAULTS_KEY}[{i}] (in {path}): {entry!r} resolves to {os.path.normpath(target)!r}, "
                "which does not exist (paths are relative to the including file)"
            )
        chain = (*_stack, real)
        if os.path.realpath(target) in chain:
            cycle = " -> ".join(os.path.basename(p) for p in (*chain, os.path.realpath(target)))
            raise CompositionError(f"{DEFAULTS_KEY}[{i}] (in {path}): {entry!r} forms a cycle: {cycle}")
        layers.extend(file_layers(target, chain))
    layers.append(Layer(path, data))
    return layers


def _default_target(entry: str, here: str, where: str) -> str:
    """The file a `defaults:` entry names: a preset's file, or a path relative to the including file's folder."""
    if not is_preset_ref(entry):
        return os.path.join(here, os.path.expanduser(entry))
    try:
        return resolve_source(entry)
    except PresetError as exc:
        raise CompositionError(f"{where}: {exc}") from None


def is_preset_file(path: str) -> bool:
    """Whether `path` is one of the presets shipped with the package (a file in its preset folder)."""
    return os.path.dirname(os.path.realpath(path)) == os.path.realpath(PRESET_DIR)


def run_name_layer(source: str | os.PathLike, layers: Sequence[Layer], key: str) -> Layer | None:
    """`{key: <the file's stem>}` when a user's config file names no run itself; else None.

    A preset's own name (`preset_grpo`) belongs to the preset run as such: a
    `my_exp.yaml` that builds on it with `defaults: [preset:grpo]` and names no
    run writes into `runs/my_exp/`, so two such files never share a directory.
    A name set by the file, a file it builds on (other than a preset) or the
    command line wins; a preset given directly (`preset:grpo`) keeps its own.
    """
    if is_preset_ref(source) or is_preset_file(os.fspath(source)):
        return None
    if any(key in layer.data for layer in layers if layer.overrides or not is_preset_file(layer.source)):
        return None
    stem = os.path.splitext(os.path.basename(os.fspath(source)))[0]
    return Layer(os.fspath(source), {key: stem}) if stem else None


def mapping_layers(source: Mapping[str, Any]) -> list[Layer]:
    """Layers of an in-memory config: its `defaults:` (relative to the working directory), then itself."""
    data = dict(source)
    entries = _default_entries(data, "the config mapping")
    layers: list[Layer] = []
    for i, entry in enumerate(entries):
        layers.extend(file_layers(_default_target(entry, "", f"{DEFAULTS_KEY}[{i}] (in the config mapping)")))
    layers.append(Layer("the config mapping", data))
    return layers


def override_layer(overrides: Sequence[str]) -> Layer | None:
    """Dotted `key=value` overrides as one layer (None when there are none)."""
    from omegaconf import OmegaConf

    overrides = list(overrides)
    for item in overrides:
        if not isinstance(item, str) or "=" not in item or not item.split("=", 1)[0].strip():
            raise CompositionError(f"override {item!r}: expected KEY=VALUE, e.g. actor.kl_ctl=0.05")
        if item.split("=", 1)[0].strip() == DEFAULTS_KEY:
            raise CompositionError(f"override {item!r}: {DEFAULTS_KEY} can only be given inside a YAML file")
    if not overrides:
        return None
    for item in overrides:  # one at a time first, so invalid YAML in a value names its override
        try:
            parse_override(item)
        except LoadError as exc:
            raise CompositionError(str(exc)) from None
    data = cast("dict[str, Any]", OmegaConf.to_container(OmegaConf.from_dotlist(overrides), resolve=False))
    return Layer("the command line", data, tuple(overrides))


def _node(data: Any, keys: Sequence[str]) -> Any:
    for key in keys:
        if not isinstance(data, dict) or key not in data:
            return None
        data = data[key]
    return data


def _apply_naming_rule(merged: Any, layer: dict[str, Any], node: NamedNode) -> None:
    """A layer naming another implementation than `merged` has starts that node afresh."""
    from omegaconf import OmegaConf

    parent = _node(layer, node.path[:-1])
    if not isinstance(parent, dict):
        return
    value = parent.get(node.path[-1])
    if node.bare_string and isinstance(value, str):
        value = parent[node.path[-1]] = {node.name_key: value, "kwargs": {}}
    if not isinstance(value, dict):
        return
    name = node.name_in(value)
    if name is None:
        return
    key = ".".join(node.path)
    current = OmegaConf.select(merged, key)
    if current is not None and node.name_in(current) == name:
        return
    if node.fresh is not None:
        OmegaConf.update(merged, key, node.fresh(name), merge=False)
    elif current is not None:
        OmegaConf.update(merged, f"{key}.kwargs", {}, merge=False)
        for name_key in node.name_keys:  # the later layer's key is the only one set, whichever alias it uses
            OmegaConf.update(merged, f"{key}.{name_key}", None, merge=False)


def merge_layers(schema: type, layers: Sequence[Layer], named: Sequence[NamedNode] = ()) -> Any:
    """The structured `schema` config with every layer merged in order; errors name the key and the source."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    merged = OmegaConf.structured(schema)
    for layer in layers:
        try:
            for node in named:
                _apply_naming_rule(merged, layer.data, node)
            merged = OmegaConf.merge(merged, layer.data)
        except (OmegaConfBaseException, TypeError, ValueError) as exc:  # not every merge error is OmegaConf's
            key, detail = describe_merge_error(exc, merged, layer.data)
            item = override_for(key, layer.overrides)
            source = f"override {item!r}" if item else layer.source
            raise CompositionError(f"{key} (in {source}): {detail}") from None
    return merged
