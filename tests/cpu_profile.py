"""Where the suite's CPU time goes: one JSON line per test with the CPU-seconds it cost, and a per-file report.

The suite is bound by CPU on a 2-core machine, so its wall time follows the CPU time its tests spend; this
profile says which tests spend it. Opt-in: with `TEST_CPU_LOG=FILE` in pytest's environment every xdist
worker appends, per test (set-up, call and teardown together), its own CPU time (`RUSAGE_SELF`), that of
the subprocesses it waited for (`RUSAGE_CHILDREN`: a real interpreter, torchrun and its ranks) and that of
the commands it forked warm (tests/warm_python.py: a fork server's child is not the test process's, so
each fork reports its own at exit), and one line at the end of collection with the worker's start-up and
collection cost. Not counted: the fork servers' own imports (once per worker).

    TEST_CPU_LOG=/tmp/cpu.jsonl ./scripts/test.sh -q
    .venv/bin/python tests/cpu_profile.py /tmp/cpu.jsonl      # CPU-seconds by test file, largest first
"""

from __future__ import annotations

import json
import os
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from warm_python import append_json_line, cpu_seconds, forked_cpu_seconds

LOG_ENV = "TEST_CPU_LOG"
#: A pytest run started by a test (the newest-transformers environment runs test files in its own venv) inherits
#: the variable; its CPU is already its parent test's subprocess time, so it writes nothing.
_NESTED = "PYTEST_CURRENT_TEST" in os.environ


def _logging() -> bool:
    return bool(os.environ.get(LOG_ENV)) and not _NESTED


def _append(row: dict[str, Any]) -> None:
    """One row of the log (only called where `_logging()`), with the xdist worker that wrote it."""
    append_json_line(os.environ[LOG_ENV], {**row, "worker": os.environ.get("PYTEST_XDIST_WORKER")})


def measure(nodeid: str) -> Iterator[None]:
    """Wraps one test's run protocol (a hook wrapper's body): appends its CPU row when `TEST_CPU_LOG` is set."""
    if not _logging():
        yield
        return
    me, children = cpu_seconds()
    forked = forked_cpu_seconds()
    yield
    me2, children2 = cpu_seconds()
    _append(
        {
            "test": nodeid,
            "self": me2 - me,
            "children": children2 - children,
            "forked": forked_cpu_seconds() - forked,
        }
    )


def collection_done() -> None:
    """The worker's CPU up to the end of collection (interpreter start, conftest imports, test modules)."""
    if _logging():
        me, children = cpu_seconds()
        _append({"test": "<start-up and collection>", "self": me, "children": children, "forked": 0.0})


def report(path: Path, top: int = 30) -> str:
    """CPU-seconds by test file (start-up and collection as one line), largest first, with the total."""
    by_file: Counter[str] = Counter()
    tests: Counter[str] = Counter()
    for line in path.read_text().splitlines():
        row = json.loads(line)
        name = row["test"].split("::", 1)[0]
        by_file[name] += row["self"] + row["children"] + row["forked"]
        tests[name] += 1
    lines = [f"{'file':72s} {'tests':>5s} {'CPU-s':>8s}"]
    lines += [f"{name:72s} {tests[name]:5d} {cpu:8.1f}" for name, cpu in by_file.most_common(top)]
    lines.append(f"{'all':72s} {sum(tests.values()):5d} {sum(by_file.values()):8.1f}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(report(Path(sys.argv[1])))
