"""Running code in an AReaL venv with areal-adv installed beside AReaL (scripts/setup_areal.sh).

Two kinds: "release", `.venv-areal` with AReaL 1.0.4 from the package index (every run of the suite), and
"source", `.venv-areal-source` with the AReaL source tree that `AREAL_SOURCE` names (AReaL 2 and later,
which the index does not serve; opt-in, since building it needs that tree and the package index).
Shared by tests/integrations/test_areal.py and the docs blocks of "Inside AReaL" (tests/test_docs_snippets.py).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
#: the environment variable naming an AReaL source tree
SOURCE_ENV = "AREAL_SOURCE"
VENVS = {"release": ROOT / ".venv-areal", "source": ROOT / ".venv-areal-source"}
PYTHON = VENVS["release"] / "bin" / "python"
#: the check script run in that venv (one JSON object per check on its last line)
CHECKS = HERE / "areal_checks.py"


def _env(kind: str, env: dict[str, str] | None = None) -> dict[str, str]:
    """`env` (default: this process's) with `AREAL_SOURCE` only for the source kind."""
    out = dict(os.environ if env is None else env)
    if kind == "release":
        out.pop(SOURCE_ENV, None)
    elif not out.get(SOURCE_ENV):
        raise AssertionError(f"the 'source' AReaL venv needs {SOURCE_ENV} naming an AReaL source tree")
    return out


def ensure_venv(kind: str = "release") -> Path:
    """Build the venv of `kind` unless it is up to date (idempotent, one caller at a time); its python."""
    setup = subprocess.run(
        [str(ROOT / "scripts" / "setup_areal.sh")], capture_output=True, text=True, timeout=900, env=_env(kind)
    )
    assert setup.returncode == 0, setup.stdout[-4000:] + setup.stderr[-4000:]
    return VENVS[kind] / "bin" / "python"


def run_json(
    *args: str, cwd: Path, stdin: str | None = None, env: dict[str, str] | None = None, kind: str = "release"
) -> list[dict]:
    """`python ARGS` in the AReaL venv of `kind`; the JSON objects it printed, one per line."""
    proc = subprocess.run(
        [str(ensure_venv(kind)), *args],
        cwd=cwd,
        input=stdin,
        env=_env(kind, env),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def experiment_config(folder: Path) -> Path:
    """An AReaL GRPO experiment YAML with `actor.advantage` that names everything AReaL's loader requires,
    its file root inside `folder`."""
    path = folder / "areal_grpo_advantage.yaml"
    path.write_text((HERE / "areal_grpo_advantage.yaml").read_text() + f"cluster: {{fileroot: {folder / 'root'}}}\n")
    return path
