"""Architecture rules for the advantage pipeline and its utilities, checked on the source.

* no function over 80 lines in `areal_adv/trainer/ppo` and `areal_adv/utils`;
* no import circle among their modules (function-level imports count too);
* every import in `areal_adv/` points down the declared package order (`PACKAGE_ORDER`), never
  back up, and no two modules under `areal_adv/` share a file name;
* the integrations never import the trainer's `run` package (they measure through `diagnostics`);
* the seed's module paths still export the public names (advantage.md §1), as the
  same objects as the modules that now define them.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHECKED = ("areal_adv/trainer/ppo", "areal_adv/utils")
MAX_FUNCTION_LINES = 80


def _modules() -> dict[str, Path]:
    found = {}
    for folder in CHECKED:
        for path in sorted((ROOT / folder).rglob("*.py")):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            found[name.removesuffix(".__init__")] = path
    return found


def _imported(module: str, path: Path) -> set[str]:
    """Absolute names of every module imported anywhere in `path`."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)  # `from pkg import module`
    return names


#: The packages of `areal_adv`, top first. A module belongs to the longest entry that prefixes its name; it may
#: import its own package and any package listed below its own, never one above. Names on one line form one
#: package (`areal_adv.utils` is the foundation, `areal_adv.api` the config layer on it). An entry
#: may name single modules: ppo's stage API stays at the seed's paths, one level up from the packages that use it.
PACKAGE_ORDER = (
    ("areal_adv.cli",),
    ("areal_adv.integrations",),
    ("areal_adv.trainer.race",),  # races of estimators: configs in, run directories out, through the entry point
    (
        "areal_adv",
        "areal_adv.trainer",
    ),  # the package roots: the entry point `areal_adv.trainer.main`, the tasks re-export
    ("areal_adv.trainer.run",),
    ("areal_adv.trainer.diagnostics",),  # the trainer, `areal-adv diagnose` and the integrations measure through it
    ("areal_adv.trainer.rollout",),
    ("areal_adv.trainer.ppo",),  # the pipeline's orchestration: advantage, actor, stage_resolution, fused, ...
    ("areal_adv.trainer.ppo.training",),
    ("areal_adv.trainer.ppo.estimators",),
    ("areal_adv.trainer.ppo.rewards",),
    ("areal_adv.trainer.ppo.checks",),
    # the stage API at the seed's paths, at ppo's top level but below the packages that use it
    (
        "areal_adv.trainer.ppo.stage_types",
        "areal_adv.trainer.ppo.stage_state",
        "areal_adv.trainer.ppo.gae",
        "areal_adv.trainer.ppo.lambda_context",
        "areal_adv.trainer.ppo.advantage_algorithms",
    ),
    ("areal_adv.trainer.ppo.kernels",),
    ("areal_adv.trainer.parallel",),
    ("areal_adv.trainer.lm",),
    ("areal_adv.api",),
    ("areal_adv.utils",),
)


def _all_modules() -> dict[str, Path]:
    found = {}
    for path in sorted((ROOT / "areal_adv").rglob("*.py")):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        found[name.removesuffix(".__init__")] = path
    return found


def _rank(module: str) -> int:
    """Index in PACKAGE_ORDER of the package `module` belongs to (the longest matching prefix)."""
    best, rank = "", -1
    for index, names in enumerate(PACKAGE_ORDER):
        for name in names:
            if (module == name or module.startswith(name + ".")) and len(name) > len(best):
                best, rank = name, index
    assert rank >= 0, f"{module} is in no package of PACKAGE_ORDER"
    return rank


def upward_imports(graph: dict[str, list[str]]) -> list[str]:
    """Every edge `a -> b` whose target sits in a package above a's own."""
    return [
        f"{a} ({PACKAGE_ORDER[_rank(a)][0]}) imports {b} ({PACKAGE_ORDER[_rank(b)][0]})"
        for a, targets in graph.items()
        for b in targets
        if _rank(b) < _rank(a)
    ]


def _direction_targets(module: str, path: Path, modules: dict[str, Path]) -> list[str]:
    """Modules `module` imports; `from pkg import sub` counts as `pkg.sub`, not as `pkg` itself."""
    found = _imported(module, path) & modules.keys() - {module}
    return sorted(
        t for t in found if not (modules[t].name == "__init__.py" and any(o.startswith(t + ".") for o in found))
    )


def test_imports_point_down_the_package_order():
    modules = _all_modules()
    graph = {m: _direction_targets(m, p, modules) for m, p in modules.items()}
    up = upward_imports(graph)
    assert not up, "imports back up the package order: " + "; ".join(up)


def test_the_integrations_do_not_import_the_trainer_s_run_package():
    """The engines measure through `areal_adv.trainer.diagnostics`, never the trainer's loop, loggers or checkpoints."""
    modules = _all_modules()
    run = "areal_adv.trainer.run"
    found = [
        f"{m} imports {t}"
        for m, p in modules.items()
        if m.startswith("areal_adv.integrations")
        for t in sorted(_imported(m, p))
        if t == run or t.startswith(run + ".")
    ]
    assert not found, "; ".join(found)


def test_the_direction_check_can_fail():
    graph = {
        "areal_adv.trainer.lm.model": ["areal_adv.trainer.run.loop"],
        "areal_adv.trainer.run.loop": ["areal_adv.trainer.lm.model"],
    }
    assert upward_imports(graph) == [
        "areal_adv.trainer.lm.model (areal_adv.trainer.lm) imports areal_adv.trainer.run.loop (areal_adv.trainer.run)"
    ]
    with pytest.raises(AssertionError, match="in no package"):
        _rank("numpy.linalg")


def test_every_module_has_its_own_file_name():
    by_name: dict[str, list[str]] = {}
    for path in _all_modules().values():
        if path.name != "__init__.py":
            by_name.setdefault(path.name, []).append(str(path.relative_to(ROOT)))
    shared = {name: paths for name, paths in by_name.items() if len(paths) > 1}
    assert not shared, f"modules sharing a file name: {shared}"


def test_every_package_says_what_it_holds():
    """Each package's `__init__` opens with a docstring (what it holds, what it may import)."""
    bare = [
        str(p.relative_to(ROOT))
        for m, p in _all_modules().items()
        if p.name == "__init__.py" and m.count(".") >= 2 and not ast.get_docstring(ast.parse(p.read_text()))
    ]
    assert not bare, f"packages without a docstring: {bare}"


def test_no_function_over_80_lines():
    long = []
    for path in _modules().values():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({length} lines)")
    assert not long, "functions over 80 lines: " + "; ".join(long)


def test_no_import_circle():
    modules = _modules()
    graph = {m: sorted(_imported(m, p) & modules.keys() - {m}) for m, p in modules.items()}
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    cycles = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in graph[node]:
            if state.get(nxt) == 1:
                cycles.append(" -> ".join(path[path.index(nxt) :] + [node, nxt]))  # nxt is an ancestor
            elif nxt not in state:
                visit(nxt, path + [node])
        state[node] = 2

    for module in graph:
        if module not in state:
            visit(module, [])
    assert not cycles, "import circles: " + "; ".join(cycles)


def test_the_circle_check_can_fail(tmp_path):
    """The graph builder sees function-level and relative imports (so a circle would be caught)."""
    path = tmp_path / "mod.py"
    path.write_text("def f():\n    from .sibling import g\n    import areal_adv.utils.kl\n")
    assert _imported("areal_adv.trainer.ppo.mod", path) >= {"areal_adv.trainer.ppo.sibling", "areal_adv.utils.kl"}


@pytest.mark.parametrize(
    "seed_path, home, names",
    [
        (
            "areal_adv.trainer.ppo.advantage",
            "areal_adv.trainer.ppo.stage_types",
            [
                "OutcomeRewardInputs",
                "OutcomeResult",
                "AdvantageInputs",
                "AdvantageResult",
                "TemporalInputs",
                "TemporalResult",
                "ProcessAdvantageInputs",
            ],
        ),
        (
            "areal_adv.trainer.ppo.advantage_algorithms",
            "areal_adv.trainer.ppo.stage_types",
            ["TemporalInputs", "TemporalResult", "ProcessAdvantageInputs"],
        ),
        (
            "areal_adv.trainer.ppo.advantage",
            "areal_adv.trainer.ppo.stage_resolution",
            ["ResolvedAdvantage", "resolve_advantage"],
        ),
        ("areal_adv.utils.data", "areal_adv.utils.batch_meta", ["TrajBatchMeta", "RolloutGroup"]),
        ("areal_adv.utils.data", "areal_adv.utils.concat", ["concat_batch"]),
        ("areal_adv.utils.data", "areal_adv.utils.normalization", ["Normalization"]),
        ("areal_adv.utils.data", "areal_adv.utils.kl", ["KLEstimator", "KL_ESTIMATORS"]),
    ],
)
def test_seed_paths_export_the_public_names(seed_path, home, names):
    seed, defining = importlib.import_module(seed_path), importlib.import_module(home)
    for name in names:
        assert getattr(seed, name) is getattr(defining, name), f"{seed_path}.{name}"
        assert name in seed.__all__, f"{seed_path}.__all__ lacks {name}"
