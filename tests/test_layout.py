"""Architecture rules for the advantage pipeline and its utilities, checked on the source.

* no function over 80 lines in `areal/trainer/ppo` and `areal/utils`;
* no import circle among their modules (function-level imports count too);
* the seed's module paths still export the public names (advantage.md §1), as the
  same objects as the modules that now define them.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHECKED = ("areal/trainer/ppo", "areal/utils")
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
                cycles.append(" -> ".join(path[path.index(nxt):] + [node, nxt]))  # nxt is an ancestor
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
    path.write_text("def f():\n    from .sibling import g\n    import areal.utils.kl\n")
    assert _imported("areal.trainer.ppo.mod", path) >= {"areal.trainer.ppo.sibling", "areal.utils.kl"}


@pytest.mark.parametrize(
    "seed_path, home, names",
    [
        ("areal.trainer.ppo.advantage", "areal.trainer.ppo.stage_types",
         ["OutcomeRewardInputs", "OutcomeResult", "AdvantageInputs", "AdvantageResult",
          "TemporalInputs", "TemporalResult", "ProcessAdvantageInputs"]),
        ("areal.trainer.ppo.advantage_algorithms", "areal.trainer.ppo.stage_types",
         ["TemporalInputs", "TemporalResult", "ProcessAdvantageInputs"]),
        ("areal.trainer.ppo.advantage", "areal.trainer.ppo.stage_resolution", ["ResolvedAdvantage", "resolve_advantage"]),
        ("areal.utils.data", "areal.utils.batch_meta", ["TrajBatchMeta", "RolloutGroup"]),
        ("areal.utils.data", "areal.utils.concat", ["concat_batch"]),
        ("areal.utils.data", "areal.utils.normalization", ["Normalization"]),
        ("areal.utils.data", "areal.utils.kl", ["KLEstimator", "KL_ESTIMATORS"]),
    ],
)
def test_seed_paths_export_the_public_names(seed_path, home, names):
    seed, defining = importlib.import_module(seed_path), importlib.import_module(home)
    for name in names:
        assert getattr(seed, name) is getattr(defining, name), f"{seed_path}.{name}"
        assert name in seed.__all__, f"{seed_path}.__all__ lacks {name}"
