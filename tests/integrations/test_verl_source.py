"""The verl integration tests against verl's source tree (opt-in: `VERL_SOURCE=/path/to/verl`).

The suite runs them against verl's release from the package index (the `verl` extra). Beside a source tree
they run unchanged in `.venv-verl-source` (scripts/setup_verl_source.sh: the tree first on the path, the
rest from `.venv`), in a pytest process of that venv, and every one of them must pass there: nothing skipped,
nothing deselected. Building the venv needs the tree and, the first time, the package index.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCE_ENV = "VERL_SOURCE"
VERL_TESTS = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests" / "integrations").glob("test_verl*.py"))
VERL_TESTS.remove("tests/integrations/test_verl_source.py")

pytestmark = [
    pytest.mark.xdist_group("verl_source"),
    pytest.mark.skipif(not os.environ.get(SOURCE_ENV), reason=f"{SOURCE_ENV} names no verl source tree (opt-in)"),
]


def _python() -> Path:
    setup = subprocess.run(
        [str(ROOT / "scripts" / "setup_verl_source.sh")], capture_output=True, text=True, timeout=900
    )
    assert setup.returncode == 0, setup.stdout[-4000:] + setup.stderr[-4000:]
    return ROOT / ".venv-verl-source" / "bin" / "python"


def test_the_verl_integration_tests_pass_against_verl_s_source_tree(tmp_path: Path) -> None:
    python = _python()
    probe = "import verl; print(verl.__version__); print(verl.__file__)"
    version, location = subprocess.run(
        [str(python), "-c", probe], capture_output=True, text=True, check=True
    ).stdout.split()
    assert Path(location).resolve().is_relative_to(Path(os.environ[SOURCE_ENV]).resolve()), location
    collected = subprocess.run(
        [str(python), "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *VERL_TESTS],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    total = int(re.search(r"(\d+) tests? collected", collected.stdout).group(1))  # type: ignore[union-attr]
    run = subprocess.run(
        [str(python), "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", *VERL_TESTS],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    summary = run.stdout.strip().splitlines()[-1] if run.stdout.strip() else run.stderr[-2000:]
    assert run.returncode == 0, f"verl {version}: {summary}\n{run.stdout[-4000:]}"
    assert re.search(rf"\b{total} passed\b", summary) and "skipped" not in summary, (version, summary)
    assert total >= 30, summary
