"""Running code in `.venv-areal`: AReaL 1.0.4 with areal-adv installed beside it (scripts/setup_areal.sh).

Shared by tests/integrations/test_areal.py and the docs blocks of "Inside AReaL" (tests/test_docs_snippets.py).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
PYTHON = ROOT / ".venv-areal" / "bin" / "python"
#: the check script run in that venv (one JSON object per check on its last line)
CHECKS = HERE / "areal_checks.py"


def ensure_venv() -> Path:
    """Build `.venv-areal` unless it is up to date (idempotent, one caller at a time); its python."""
    setup = subprocess.run([str(ROOT / "scripts" / "setup_areal.sh")], capture_output=True, text=True, timeout=900)
    assert setup.returncode == 0, setup.stdout[-4000:] + setup.stderr[-4000:]
    return PYTHON


def run_json(*args: str, cwd: Path, stdin: str | None = None, env: dict[str, str] | None = None) -> list[dict]:
    """`python ARGS` in `.venv-areal`; the JSON objects it printed, one per line."""
    proc = subprocess.run(
        [str(ensure_venv()), *args], cwd=cwd, input=stdin, env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def experiment_config(folder: Path) -> Path:
    """An AReaL GRPO experiment YAML with `actor.advantage` that names everything AReaL's loader requires,
    its file root inside `folder`."""
    path = folder / "areal_grpo_advantage.yaml"
    path.write_text((HERE / "areal_grpo_advantage.yaml").read_text() + f"cluster: {{fileroot: {folder / 'root'}}}\n")
    return path
