"""Every import path a user is shown keeps importing: the seed's modules, README and docs names, entry points,
and the dotted paths the package itself names in strings (the built-in task registry).

The documented names are read from README.md and docs/*.md at test time (dotted `areal_adv.…` and
`areal.…` paths and `from areal_adv… import …` lines), so a page that shows a path which no longer imports fails here, and so
does a module move that forgets a page. The seed's paths (advantage.md §1) and the earlier paths kept
as re-exports for plugins are listed by hand: they must keep working whatever the pages say.
"""

from __future__ import annotations

import ast
import importlib
import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: The example configs and their READMEs: `implementation:` strings and commands that name `areal.…` paths.
EXAMPLES = sorted(p for pattern in ("*.yaml", "*.md") for p in (ROOT / "examples").rglob(pattern))

#: The seed's module paths and the public names a user's plugin imports from them.
SEED = [
    "areal.trainer.ppo.advantage.OutcomeRewardInputs",
    "areal.trainer.ppo.advantage.OutcomeResult",
    "areal.trainer.ppo.advantage.AdvantageInputs",
    "areal.trainer.ppo.advantage.AdvantageResult",
    "areal.trainer.ppo.advantage.TemporalInputs",
    "areal.trainer.ppo.advantage.TemporalResult",
    "areal.trainer.ppo.advantage.ProcessAdvantageInputs",
    "areal.trainer.ppo.advantage.resolve_advantage",
    "areal.trainer.ppo.advantage.ResolvedAdvantage",
    "areal.trainer.ppo.advantage_algorithms.TemporalInputs",
    "areal.trainer.ppo.advantage_algorithms.ProcessAdvantageInputs",
    "areal.trainer.ppo.advantage_algorithms.token_gae",
    "areal.trainer.ppo.advantage_algorithms.turn_gae",
    "areal.trainer.ppo.gae.compute_gae_lambda",
    "areal.trainer.ppo.gae.GAELambdaContext",
    "areal.api.cli_args.PPOActorConfig",
    "areal.api.cli_args.NormConfig",
    "areal.api.cli_args.AdvantageConfig",
    "areal.api.cli_args.load_config",
    "areal.utils.data.TrajBatchMeta",
    "areal.utils.data.RolloutGroup",
    "areal.utils.data.concat_batch",
    "areal.utils.data.Normalization",
    "areal.utils.data.KLEstimator",
    "areal.trainer.ppo.actor.PPOActor",
    "areal.trainer.ppo.stage_types",
    "areal.trainer.ppo.stage_state.StageState",
]

#: Paths from before the trainer was regrouped, kept for plugins written against them (re-exports).
KEPT = [
    "areal_adv.trainer.tasks.Task",
    "areal_adv.trainer.tasks.Environment",
    "areal_adv.trainer.tasks.StepResult",
    "areal_adv.trainer.tasks.make_task",
    "areal_adv.trainer.main.main",
]

_DOTTED = re.compile(r"(?<![\w./-])areal(?:_adv)?(?:\.[A-Za-z_]\w*)+")
_FROM = re.compile(r"^\s*from (areal[\w.]*) import \(?([\w, ]+)\)?", re.MULTILINE)


def documented_paths(text: str) -> set[str]:
    """Dotted `areal.…` names and the names of `from areal… import a, b` lines in a page."""
    found = {m.group(0) for m in _DOTTED.finditer(text)}
    for module, names in _FROM.findall(text):
        found.update(f"{module}.{name.split(' as ')[0].strip()}" for name in names.split(",") if name.strip())
    return found


def resolve(path: str) -> object:
    """The object at a dotted path: the longest prefix that imports as a module, then attributes."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError as err:
            if err.name is None or not ".".join(parts[:cut]).startswith(err.name):
                raise  # a module that exists but imports something missing: a real failure
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)  # AttributeError names the missing piece
        return obj
    raise ModuleNotFoundError(path)


#: Names that exist only beside AReaL (docs/integrations.md, "Inside AReaL"): tests/integrations/test_areal.py
#: resolves them in `.venv-areal`, where AReaL is installed.
NEEDS_AREAL = ("areal_adv.integrations.areal", "areal.api.cli_args.load_expr_config")


#: A row of the table in docs/integrations.md, "Which `areal.*` name is whose": AReaL's module, then our twin.
_OWNED_ROW = re.compile(r"^\| `(areal(?:\.\w+)+)`[^|]*\| `(areal_adv(?:\.\w+)+)`", re.MULTILINE)


def areal_owned_modules() -> dict[str, str]:
    """The `areal.*` modules documented as AReaL's beside AReaL, each with its `areal_adv` twin."""
    return dict(_OWNED_ROW.findall((ROOT / "docs" / "integrations.md").read_text()))


def needs_areal(path: str) -> bool:
    return any(path == name or path.startswith(name + ".") for name in NEEDS_AREAL)


def all_page_paths() -> list[tuple[str, str]]:
    found = set()
    for page in PAGES + EXAMPLES:
        found.update((page.relative_to(ROOT).as_posix(), p) for p in documented_paths(page.read_text()))
    return sorted(found)


def _page_paths() -> list[tuple[str, str]]:
    return [(page, path) for page, path in all_page_paths() if not needs_areal(path)]


def _entry_points() -> list[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    targets = list(project.get("scripts", {}).values())
    targets += [t for group in project.get("entry-points", {}).values() for t in group.values()]
    return [t.replace(":", ".") for t in targets]


def _source_strings() -> list[str]:
    """String constants in `areal_adv/` that are dotted `areal.…` paths (registries, e.g. the built-in tasks),
    logger names aside."""
    found = set()
    for path in sorted((ROOT / "areal_adv").rglob("*.py")):
        tree = ast.parse(path.read_text())
        loggers = {
            id(call.args[0])
            for call in ast.walk(tree)
            if isinstance(call, ast.Call) and call.args and getattr(call.func, "attr", "") == "getLogger"
        }
        found.update(
            node.value
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and re.fullmatch(r"areal(_adv)?(\.\w+)+", node.value)
            and id(node) not in loggers
        )
    return sorted(found)


def test_the_pages_name_paths():
    """The extraction sees the pages' paths (so the parametrised test below is not empty by mistake)."""
    paths = {p for _, p in _page_paths()}
    assert len(paths) >= 40, sorted(paths)
    assert {"areal_adv.trainer.ppo.advantage.OutcomeRewardInputs", "areal_adv.api.cli_args.load_config"} <= paths


@pytest.mark.parametrize("page, path", _page_paths())
def test_documented_path_imports(page, path):
    assert resolve(path) is not None, f"{page}: {path}"


@pytest.mark.parametrize("path", SEED + KEPT)
def test_seed_and_kept_paths_import(path):
    assert resolve(path) is not None


@pytest.mark.parametrize("path", SEED)
def test_a_seed_path_is_the_same_object_as_its_areal_adv_twin(path):
    twin = "areal_adv" + path.removeprefix("areal")
    assert resolve(path) is resolve(twin), (path, twin)


@pytest.mark.parametrize("path", _source_strings())
def test_string_import_paths_in_the_source_import(path):
    assert resolve(path) is not None


def test_the_registries_are_seen():
    assert "areal_adv.trainer.rollout.tasks.arith.ArithTask" in _source_strings()


@pytest.mark.parametrize("path", _entry_points())
def test_entry_points_import(path):
    assert resolve(path) is not None


def test_kept_task_paths_are_the_same_objects():
    from areal_adv.trainer import tasks as kept
    from areal_adv.trainer.rollout import tasks

    for name in kept.__all__:
        assert getattr(kept, name) is getattr(tasks, name), name


def test_a_broken_path_fails():
    with pytest.raises(AttributeError, match="no_such_module"):
        resolve("areal_adv.trainer.no_such_module.Name")
    with pytest.raises(AttributeError):
        resolve("areal_adv.trainer.ppo.advantage.NoSuchName")
    assert documented_paths(
        "see `areal_adv.utils.data.concat_batch`.\nfrom areal_adv.api.cli_args import (A, B as C)\n"
    ) == {
        "areal_adv.utils.data.concat_batch",
        "areal_adv.api.cli_args",
        "areal_adv.api.cli_args.A",
        "areal_adv.api.cli_args.B",
    }
