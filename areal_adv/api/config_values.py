"""Mappings and sequences from any source as plain dicts and lists (OmegaConf's included).

AReaL users hold configs as OmegaConf `DictConfig` / `ListConfig` objects; a
config dataclass accepts them wherever it accepts a mapping (`reward_norm`,
`adv_norm`, `advantage`, stage specs, kwargs) and stores plain values, so the
config still round-trips through YAML and JSON. OmegaConf is imported only when
such an object is actually given (the config layer stays import-light).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["is_mapping", "plain"]


def _is_omegaconf(value: Any) -> bool:
    return type(value).__module__.startswith("omegaconf")


def is_mapping(value: Any) -> bool:
    return isinstance(value, Mapping)


def plain(value: Any) -> Any:
    """`value` with every mapping turned into a dict and every list-like into a list, recursively.

    Strings, numbers and other objects are returned as they are (the JSON
    check that follows reports anything that is not serialisable, by key).
    """
    if _is_omegaconf(value):
        from omegaconf import OmegaConf

        if OmegaConf.is_config(value):
            return OmegaConf.to_container(value, resolve=True)
    if isinstance(value, Mapping):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        return [plain(v) for v in value] if not isinstance(value, tuple) else tuple(plain(v) for v in value)
    return value
