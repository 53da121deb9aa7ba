"""The optional extras a config needs, all checked at once before anything loads, with the command that installs them.

Each extra of pyproject.toml brings what one feature imports: prompt files (`data.train`, `data.eval`) need
`datasets` (the `data` extra), `model.gguf_file` needs `gguf` (`gguf`), `model.lora` needs `peft` (`lora`),
`task.implementation: reasoning_gym` needs `reasoning_gym` (`reasoning`), and the `wandb` logger needs
`wandb` (`wandb`). Without this check each feature fails where it is first used: prompt files before the
model, LoRA only after a checkpoint has loaded, so a user installs one extra per failed start.
`check_extras` reads the config, looks every module up with `importlib.util.find_spec` (nothing is imported,
so it takes milliseconds and no torch), and names every missing extra in one `ConfigError` with the command
that installs them into the environment running this Python (`install_command`).
"""

from __future__ import annotations

import importlib.util
import shlex
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from areal_adv.api.config_checks import ConfigError

__all__ = [
    "EXTRA_MODULES",
    "MissingExtra",
    "check_extras",
    "extra_requirements",
    "install_command",
    "install_hint",
    "missing_extras",
    "needed_extras",
]

#: What each extra of pyproject.toml is checked by: the modules its feature imports.
EXTRA_MODULES: dict[str, tuple[str, ...]] = {
    "data": ("datasets",),
    "gguf": ("gguf",),
    "lora": ("peft",),
    "reasoning": ("reasoning_gym",),
    "wandb": ("wandb",),
}


@dataclass(frozen=True)
class MissingExtra:
    """An extra the config needs: which field needs it and the module that is not installed."""

    extra: str
    field: str
    module: str


def needed_extras(config: Any) -> dict[str, str]:
    """{extra: the config field that needs it} for an `ExperimentConfig`, in the order the fields appear."""
    needed: dict[str, str] = {}
    data = config.data
    if data.train is not None or data.eval is not None:
        needed["data"] = "data.train" if data.train is not None else "data.eval"
    if config.model.gguf_file is not None:
        needed["gguf"] = "model.gguf_file"
    if config.model.lora is not None:
        needed["lora"] = "model.lora"
    if config.task.implementation == "reasoning_gym":
        needed["reasoning"] = "task.implementation=reasoning_gym"
    if "wandb" in (config.output.loggers or ()):
        needed["wandb"] = "output.loggers"
    return needed


def missing_extras(config: Any, find_spec: Callable[[str], Any] | None = None) -> list[MissingExtra]:
    """The extras `config` needs whose modules `find_spec` (default `importlib.util.find_spec`, looked up at
    each call) does not find: top-level names, so nothing is imported."""
    find_spec = find_spec or importlib.util.find_spec
    missing = []
    for extra, field in needed_extras(config).items():
        absent = [m for m in EXTRA_MODULES[extra] if find_spec(m) is None]
        if absent:
            missing.append(MissingExtra(extra, field, absent[0]))
    return missing


def _clone_root() -> Path | None:
    """The source checkout this package runs from (an editable install or a clone on sys.path), or None."""
    root = Path(__file__).resolve().parents[2]
    marks = ("pyproject.toml", "constraints.txt", "scripts/setup.sh")
    return root if all((root / mark).is_file() for mark in marks) else None


def _shown(path: Path, cwd: Path, *, command: bool = False) -> str:
    """`path` as a user types it here: relative when it lies in the current folder (`./` before a command,
    which the shell would otherwise look up on PATH), else absolute."""
    try:
        relative = path.relative_to(cwd)
    except ValueError:
        return str(path)
    if relative == Path("."):
        return "."
    return f"./{relative}" if command else str(relative)


def extra_requirements(extras: Sequence[str]) -> list[str]:
    """The requirements the installed distribution declares for `extras` (`datasets>=3.0`, ...).

    Read from the distribution's metadata with `packaging`, so they hold however it was installed (a
    wheel, a copy of a clone); `areal-adv[EXTRA,...]` where the metadata is missing.
    """
    from importlib.metadata import PackageNotFoundError, requires

    from packaging.requirements import Requirement

    try:
        declared = [Requirement(line) for line in requires("areal-adv") or []]
    except PackageNotFoundError:
        declared = []
    found = []
    for req in declared:
        if req.marker is not None and any(req.marker.evaluate({"extra": extra}) for extra in extras):
            found.append(f"{req.name}{'[' + ','.join(sorted(req.extras)) + ']' if req.extras else ''}{req.specifier}")
    return list(dict.fromkeys(found)) or [f"areal-adv[{','.join(sorted(set(extras)))}]"]


def install_command(
    extras: Sequence[str],
    *,
    prefix: str | None = None,
    executable: str | None = None,
    root: Path | None = None,
    cwd: Path | None = None,
) -> str:
    """The command that installs `extras` into the environment that runs this Python.

    The clone's own `.venv`: `./scripts/setup.sh EXTRA ...` (pinned versions, kept in the set-up's stamp).
    Any other environment with this package from a clone: that environment's pip with the clone's
    `constraints.txt`, so the versions are those the tests run on. A package installed otherwise (a
    wheel): its pip with the extras' requirements (`extra_requirements`). The defaults are this process's
    (`sys.prefix`, `sys.executable`, the clone this module lies in, the current folder); tests pass their own.
    """
    names = ",".join(sorted(dict.fromkeys(extras)))
    cwd = (cwd or Path.cwd()).resolve()
    python = Path(executable or sys.executable)
    root = _clone_root() if root is None else root.resolve()
    if root is None:
        packages = " ".join(shlex.quote(r) for r in extra_requirements(names.split(",")))
        return f"{shlex.quote(_shown(python, cwd, command=True))} -m pip install {packages}"
    if Path(prefix or sys.prefix).resolve() == (root / ".venv").resolve():
        return " ".join([_shown(root / "scripts" / "setup.sh", cwd, command=True), *names.split(",")])
    constraints = _shown(root / "constraints.txt", cwd)
    project = _shown(root, cwd)
    return (
        f"{shlex.quote(_shown(python, cwd, command=True))} -m pip install -c {shlex.quote(constraints)} "
        f"-e {shlex.quote(f'{project}[{names}]')}"
    )


def check_extras(config: Any, find_spec: Callable[[str], Any] | None = None) -> None:
    """Raise one `ConfigError` naming every extra `config` needs that is not installed, and how to install them."""
    missing = missing_extras(config, find_spec)
    if not missing:
        return
    what = ", ".join(f"{m.extra} ({m.field} needs the {m.module} package)" for m in missing)
    noun, them = ("extra", "it") if len(missing) == 1 else ("extras", "them")
    raise ConfigError(
        f"{noun} not installed in {sys.prefix}: {what}; install {them} with: "
        f"{install_command([m.extra for m in missing])}"
    )


def install_hint(extra: str) -> str:
    """'install the X extra: <command>': the hint of an error raised where a feature first imports its package."""
    return f"install the {extra} extra: {install_command([extra])}"
