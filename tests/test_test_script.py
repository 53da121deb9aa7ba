"""`scripts/test.sh` runs the suite on pytest-xdist workers with `--dist loadgroup`.

Modules whose tests share an expensive module fixture (a 2-rank job, a local
Ray) mark themselves `xdist_group`; the grouping only saves time, but it fails
silently (pytest-xdist 3.8 on pytest 9.2 ignores the mark, pytest-dev/pytest-xdist#1386):
this runs a small suite with the script's own options and checks that grouped
tests shared one worker while the others spread.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_SUITE = """
import os
from pathlib import Path

import pytest

def _record(kind, i):
    Path(__file__).with_name(f"{kind}-{i}.worker").write_text(os.environ["PYTEST_XDIST_WORKER"])

@pytest.mark.xdist_group("shared")
@pytest.mark.parametrize("i", range(8))
def test_grouped(i):
    _record("grouped", i)

@pytest.mark.parametrize("i", range(8))
def test_free(i):
    _record("free", i)
"""


def _script_options() -> tuple[str, str]:
    """(default worker count, --dist mode) of the pytest line in scripts/test.sh."""
    text = (ROOT / "scripts" / "test.sh").read_text()
    match = re.search(r'-m pytest -n "\$\{AREAL_TEST_WORKERS:-(\w+)\}" --dist (\w+) "\$@"', text)
    assert match, "scripts/test.sh no longer runs `pytest -n ... --dist ...`"
    return match.group(1), match.group(2)


def _workers(folder: Path, dist: str) -> dict[str, set[str]]:
    """The workers that ran the grouped and the free tests of a small suite under `-n 2 --dist <dist>`."""
    folder.mkdir()
    (folder / "test_suite.py").write_text(_SUITE)
    # the installed plugins (hypothesis, ...) are not needed here: xdist alone starts its workers in a second
    env = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "xdist.plugin",
            "-p",
            "no:cacheprovider",
            "-n",
            "2",
            "--dist",
            dist,
            str(folder),
        ],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert len(list(folder.glob("*.worker"))) == 16, proc.stdout[-3000:]
    return {kind: {p.read_text() for p in folder.glob(f"{kind}-*.worker")} for kind in ("grouped", "free")}


def test_the_test_command_keeps_each_group_on_one_worker(tmp_path: Path) -> None:
    workers, dist = _script_options()
    assert (workers.isdigit() or workers == "auto") and dist == "loadgroup"
    seen = _workers(tmp_path / "script", dist)
    assert len(seen["grouped"]) == 1, f"the xdist_group was split over workers {seen['grouped']}"
    assert seen["grouped"] | seen["free"] == {"gw0", "gw1"}, seen
    # the check can fail: without the grouping the same tests spread over both workers
    assert len(_workers(tmp_path / "load", "load")["grouped"]) == 2


def test_the_test_command_lints_before_the_suite() -> None:
    """`ruff check`, `ruff format --check` and mypy run before pytest; both tools are in the test extra."""
    import tomllib

    lines = [line.strip() for line in (ROOT / "scripts" / "test.sh").read_text().splitlines()]
    lint = lines.index(".venv/bin/ruff check areal_adv tests bench examples")
    fmt = lines.index(".venv/bin/ruff format --check areal_adv tests bench examples")
    types = next(i for i, line in enumerate(lines) if line.startswith(".venv/bin/mypy"))
    suite = next(i for i, line in enumerate(lines) if line.startswith("exec .venv/bin/python -m pytest"))
    assert lint < fmt < types < suite
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    extra = project["project"]["optional-dependencies"]["test"]
    assert any(req.startswith("ruff") for req in extra) and any(req.startswith("mypy") for req in extra)
    assert all((ROOT / path).exists() for path in project["tool"]["mypy"]["files"])
    assert project["tool"]["ruff"]["line-length"] == 120
