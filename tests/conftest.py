"""Test-suite set-up shared by every test directory.

OpenMP threads wait passively in the test process too, as they do under
`python -m areal_adv.trainer.main` (areal_adv.trainer.parallel.launch_env): this file is imported
before any test module, so before torch loads.

Every test starts with the thread counts the previous one found: an in-process
trainer run sets torch's and numba's counts (`train.num_threads`, often 1) and
leaves them, so a later test in the same process would otherwise run with them,
and which test runs after which depends on how pytest-xdist shares the tests
out (`./scripts/test.sh` runs them in parallel).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest
from hypothesis import settings

from areal_adv.trainer.parallel.launch_env import prefer_passive_waiting

prefer_passive_waiting()

import warm_python  # noqa: E402, F401 - its BASE_ENV (the fork server's environment) is this one, before any test runs
from cpu_profile import collection_done, measure  # noqa: E402 - TEST_CPU_LOG: the suite's CPU by test

#: Property tests draw the same examples on every run (`derandomize`), so the suite cannot fail by the luck
#: of a draw: a counterexample is found by exploring and then pinned with `@example`. Explore with
#: `HYPOTHESIS_PROFILE=explore ./scripts/test.sh tests/...` (fresh random draws, 10x the examples).
settings.register_profile("repeatable", derandomize=True, database=None)
settings.register_profile("explore", max_examples=1000)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))


def _numba_pool_threads() -> int | None:
    """numba's thread count if its pool runs already (asking earlier would start the pool)."""
    numba = sys.modules.get("numba")
    if numba is None:
        return None
    from numba.np.ufunc import parallel

    return numba.get_num_threads() if parallel._is_initialized else None


@pytest.fixture(autouse=True)
def _keep_thread_counts() -> Iterator[None]:
    import torch

    torch_before, numba_before = torch.get_num_threads(), _numba_pool_threads()
    yield
    numba = sys.modules.get("numba")
    if numba is not None and _numba_pool_threads() is not None:  # numba first: its pool start resets torch's
        numba.set_num_threads(numba_before or numba.config.NUMBA_NUM_THREADS)
    if torch.get_num_threads() != torch_before:
        torch.set_num_threads(torch_before)


#: Tests that run for tens of seconds (launchers of 2-rank jobs, Ray, whole benchmark scripts), by module
#: path. pytest-xdist hands its work units out in collection order, so these go first: a long test that
#: starts last keeps one worker busy while the others have run out of work. (`--dist loadgroup` hands out
#: the `xdist_group` modules before them, largest group first; this order is that of the single tests.)
LONG_FIRST = (
    "tests/integrations/test_verl_ray.py",
    "tests/trainer/run/test_resume_distributed.py",
    "tests/trainer/parallel/test_two_nodes.py",  # waits out a lost node's failure timeout: idle time to overlap
    "tests/trainer/parallel/test_distributed_failures.py",
    "tests/bench/test_bench_scripts.py",
    "tests/bench/test_compare_estimators.py",
    "tests/bench/test_estimator_suite.py",
    "tests/trainer/parallel/test_distributed_training.py",
    "tests/trainer/run/test_stateful_distributed.py",
    "tests/trainer/parallel/test_distributed_rollout_dtype.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Put the long tests of `LONG_FIRST` first, in its order; every other test keeps its place after them."""
    rank = {path: i for i, path in enumerate(LONG_FIRST)}

    def key(item: pytest.Item) -> int:
        return rank.get(item.nodeid.split("::", 1)[0], len(LONG_FIRST))

    items.sort(key=key)  # stable: the order within a module and among the rest is pytest's


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """With TEST_CPU_LOG set, each test's CPU time goes to that file (tests/cpu_profile.py)."""
    yield from measure(item.nodeid)


def pytest_collection_finish(session: pytest.Session) -> None:
    collection_done()
