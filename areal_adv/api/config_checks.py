"""`ConfigError` and the small value checks every config section uses.

The leaf of the config layer: it imports only `areal_adv.utils.numbers` (what a
number is, shared with the utilities below the config layer), so the actor
config, the experiment sections and the task specs can all depend on it
without importing each other (and without torch).
"""

from __future__ import annotations

import math
import os
from typing import Any

from areal_adv.utils.numbers import is_number, is_real  # noqa: F401 - re-exported: the config layer's checks


class ConfigError(ValueError):
    """A configuration value is invalid; the message names the field."""


def shown_path(path: Any) -> str:
    """A path for an error message: quoted as given and, when relative, with the folder it was resolved in.

    Relative config paths resolve in the current folder (the one a command runs in), which the user
    may not have in mind when a run is started from a script or another folder.
    """
    if not isinstance(path, str) or os.path.isabs(path):
        return repr(path)
    return f"{path!r} (relative to {os.getcwd()})"


def is_integer(value: Any, *, low: int | None = None, high: int | None = None) -> bool:
    """An `int` that is not a bool, within [low, high] where given."""
    if not isinstance(value, int) or isinstance(value, bool):
        return False
    return (low is None or value >= low) and (high is None or value <= high)


def check_choice(field: str, value: Any, choices: tuple) -> None:
    if value not in choices:
        raise ConfigError(f"{field}: got {value!r}, expected one of {list(choices)}")


def check_number(
    field: str,
    value: Any,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    allow_inf: bool = False,
) -> None:
    if not is_real(value):
        raise ConfigError(f"{field}: got {value!r} ({type(value).__name__}), expected a number")
    if math.isnan(value) or (math.isinf(value) and not allow_inf):
        raise ConfigError(f"{field}: got {value!r}, expected a finite number")
    if low is not None and (value < low or (low_open and value == low)):
        bound = f"> {low}" if low_open else f">= {low}"
        raise ConfigError(f"{field}: got {value!r}, expected a number {bound}")
    if high is not None and value > high:
        raise ConfigError(f"{field}: got {value!r}, expected a number <= {high}")


def check_bool(field: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise ConfigError(f"{field}: got {value!r} ({type(value).__name__}), expected true or false")


def check_int(field: str, value: Any, low: int) -> None:
    if not is_integer(value, low=low):
        raise ConfigError(f"{field}: got {value!r}, expected an integer >= {low}")


def is_import_path(value: Any) -> bool:
    """`pkg.module.attr` shape only: configs never import user code at load time."""
    if not isinstance(value, str):
        return False
    parts = value.split(".")
    return len(parts) >= 2 and all(p.isidentifier() for p in parts)


def check_json_value(field: str, value: Any) -> Any:
    """Kwargs must survive a JSON round trip so configs can ship to workers; returns them in JSON types.

    The value returned is a fresh copy with every tuple as a list (and every
    mapping a dict): the config that runs is then the one `config.yaml` saves
    and a resume loads back, not a tuple-holding twin of it.
    """
    if value is None or isinstance(value, (bool, str, int)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ConfigError(f"{field}: got {value!r}, expected a finite JSON number")
        return value
    if isinstance(value, (list, tuple)):
        return [check_json_value(f"{field}[{i}]", item) for i, item in enumerate(value)]
    if isinstance(value, dict):
        for key in value:
            if not isinstance(key, str):
                raise ConfigError(f"{field}: key {key!r} is {type(key).__name__}, expected a string key")
        return {key: check_json_value(f"{field}.{key}", item) for key, item in value.items()}
    raise ConfigError(
        f"{field}: got {value!r} ({type(value).__name__}), expected a JSON-serialisable value "
        "(null, bool, number, string, list or mapping)"
    )


def check_kwargs(field: str, value: Any) -> dict[str, Any]:
    """A plugin's `kwargs`: null becomes {}, anything else must be a JSON mapping."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"{field}: got {value!r}, expected a mapping")
    return check_json_value(field, value)
