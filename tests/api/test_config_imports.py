"""The config layer: acyclic imports (function-level ones included), torch-free, no user code at load."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
API = ROOT / "areal_adv" / "api"


def _imports(path: Path) -> set[str]:
    """Every `areal.*` module a file imports, at any depth (function-level imports count)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("areal_adv"):
            out.add(node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("areal_adv"))
    return out


def _module_file(module: str) -> Path | None:
    base = ROOT.joinpath(*module.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def test_config_modules_and_what_they_import_have_no_import_cycle() -> None:
    graph = {f"areal_adv.api.{p.stem}": _imports(p) for p in API.glob("*.py") if p.stem != "__init__"}
    pending = [d for deps in graph.values() for d in deps if d not in graph]
    while pending:  # follow imports out of areal_adv.api too (e.g. a torch-free trainer helper)
        module = pending.pop()
        path = _module_file(module)
        if module in graph or path is None:
            continue
        graph[module] = _imports(path)
        pending += [d for d in graph[module] if d not in graph]
    graph = {m: {d for d in deps if d in graph and d != m} for m, deps in graph.items()}
    order: list[str] = []
    state: dict[str, str] = {}

    def visit(module: str, stack: tuple[str, ...]) -> None:
        assert state.get(module) != "open", f"import cycle: {' -> '.join(stack + (module,))}"
        if state.get(module) == "done":
            return
        state[module] = "open"
        for dep in sorted(graph.get(module, ())):
            visit(dep, stack + (module,))
        state[module] = "done"
        order.append(module)

    for module in sorted(graph):
        visit(module, ())
    assert (
        order.index("areal_adv.api.config_checks")
        < order.index("areal_adv.api.actor_args")
        < order.index("areal_adv.api.train_args")
        < order.index("areal_adv.api.cli_args")
    )


def test_loading_a_config_with_plugins_imports_neither_torch_nor_the_plugins() -> None:
    code = (
        "import sys; from areal_adv.api.cli_args import load_config; "
        "c = load_config('examples/custom_task/single_turn.yaml', "
        "['reward=[{implementation: examples.custom_task.rewards.brevity}]']); "
        "bad = [m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers', 'datasets') "
        "or m.startswith('examples.custom_task.') or m.startswith('areal_adv.trainer')]; "
        "print(bad); assert not bad"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
