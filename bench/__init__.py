"""The benchmarks, by topic (`suite`, `peers`, `real_model`, `kernels`), each run as `python -m bench.<topic>.<script>`.

`bench.bench_rows` owns what they share: provenance, load readings, JSONL rows and docs blocks.
Their committed rows stay in bench/results/.
"""

from __future__ import annotations

import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1] / "tests"


def use_test_helpers(*folders: str) -> None:
    """Put folders of tests/ on sys.path: the reference implementations and batch builders the tests share.

    They are test modules that import each other by bare name (not a package; and a `tests` package of some
    installed distribution may shadow the name), so a benchmark that measures against them imports them as
    the tests do.
    """
    for folder in folders:
        path = str(TESTS / folder)
        if path not in sys.path:
            sys.path.insert(0, path)
