"""bench/ is a package by topic: each script runs as `python -m bench.<topic>.<script>`, none edits sys.path
(bench.use_test_helpers excepted), and none imports another's private names or the package's."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
TOPICS = {"kernels", "peers", "real_model", "suite"}


def _scripts() -> list[Path]:
    return sorted(p for p in BENCH.rglob("*.py") if "results" not in p.parts)


def test_the_scripts_live_in_topic_folders_beside_the_shared_module():
    flat = sorted(p.name for p in BENCH.glob("*.py"))
    assert flat == ["__init__.py", "bench_rows.py"], flat
    folders = {p.parent.name for p in _scripts() if p.parent != BENCH}
    assert folders == TOPICS, folders
    assert all((BENCH / topic / "__init__.py").is_file() for topic in TOPICS)
    assert sorted(p.name for p in BENCH.rglob("*.sh")) == ["rollout_copy_campaign.sh", "sums_2digit_campaign.sh"]


def test_no_script_edits_sys_path_or_imports_a_private_name():
    for path in _scripts():
        if path == BENCH / "__init__.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr == "path":
                assert not (isinstance(node.value, ast.Name) and node.value.id == "sys"), f"{path}: sys.path"
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in ("bench", "areal_adv"):
                private = [a.name for a in node.names if a.name.startswith("_")]
                assert not private, f"{path}:{node.lineno} imports {private} from {node.module}"
