"""The suite's CPU profile (tests/cpu_profile.py) counts a test's own, its subprocesses' and its forks' CPU."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import cpu_profile
import warm_python

BURN = "import time\nstart = time.process_time()\nwhile time.process_time() - start < {seconds}:\n    pass\n"


def _burn(tmp_path: Path, seconds: float) -> list[str]:
    script = tmp_path / "burn.py"
    script.write_text(BURN.format(seconds=seconds))
    return [sys.executable, str(script)]


def test_a_forked_command_reports_its_cpu_time_to_the_process_that_collects_it(tmp_path: Path) -> None:
    before = warm_python.forked_cpu_seconds()
    proc = warm_python.start(_burn(tmp_path, 0.5), cwd=tmp_path, env=dict(warm_python.BASE_ENV))
    assert isinstance(proc, warm_python.WarmProcess) and proc.communicate(timeout=60) == ("", "")
    assert 0.5 <= warm_python.forked_cpu_seconds() - before < 30


def test_a_test_row_counts_its_own_its_subprocesses_and_its_forks_cpu(tmp_path: Path, monkeypatch) -> None:
    log = tmp_path / "cpu.jsonl"
    monkeypatch.setenv(cpu_profile.LOG_ENV, str(log))
    wrapper = cpu_profile.measure("tests/x.py::test_y")
    next(wrapper)  # the test runs here
    subprocess.run(_burn(tmp_path, 0.3), check=True)
    warm_python.run(_burn(tmp_path, 0.3), cwd=tmp_path, env=dict(warm_python.BASE_ENV))
    assert next(wrapper, "done") == "done"
    [row] = [json.loads(line) for line in log.read_text().splitlines()]
    assert row["test"] == "tests/x.py::test_y" and row["children"] >= 0.3 and row["forked"] >= 0.3
    assert row["self"] >= 0


def test_a_pytest_run_started_by_a_test_writes_no_rows(tmp_path: Path) -> None:
    """Its CPU is its parent test's subprocess time already (a nested run would count it twice)."""
    env = {
        **warm_python.BASE_ENV,
        cpu_profile.LOG_ENV: str(tmp_path / "cpu.jsonl"),
        "PYTEST_CURRENT_TEST": "outer (call)",
    }
    conftest_dir = Path(__file__).resolve().parent
    code = f"import sys; sys.path.insert(0, {str(conftest_dir)!r}); import cpu_profile; print(cpu_profile._logging())"
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert proc.stdout.strip() == "False", proc.stderr
    env.pop("PYTEST_CURRENT_TEST")
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert proc.stdout.strip() == "True", proc.stderr


def test_the_report_sums_by_file_largest_first(tmp_path: Path) -> None:
    log = tmp_path / "cpu.jsonl"
    rows = [
        {"test": "<start-up and collection>", "self": 20.0, "children": 0.0, "forked": 0.0},
        {"test": "tests/a.py::test_1", "self": 1.0, "children": 2.0, "forked": 0.0},
        {"test": "tests/a.py::test_2", "self": 0.5, "children": 0.0, "forked": 0.5},
        {"test": "tests/b.py::test_1", "self": 0.0, "children": 0.0, "forked": 30.0},
    ]
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    lines = cpu_profile.report(log).splitlines()
    assert [line.split()[:3] for line in lines[1:]] == [
        ["tests/b.py", "1", "30.0"],
        ["<start-up", "and", "collection>"],
        ["tests/a.py", "2", "4.0"],
        ["all", "4", "54.0"],
    ]
