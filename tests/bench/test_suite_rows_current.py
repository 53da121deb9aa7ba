"""The committed estimator-suite rows describe this code: a change of training behaviour cannot land beside them.

A row's config hash sees edits of its task and estimator, not of the trainer:
a new sampler, loss or estimator arithmetic trains the same config differently.
Two guards:

- every (task, estimator) pair of the committed rows has the behaviour
  fingerprint its rows record (a two-update run of that pair: sampled batches,
  advantages, metrics and weights; bench/suite/suite_fingerprint.py), one test per
  task, all read from one `--check-current` process over every task (one
  interpreter and torch start instead of one per task; the module's tests share
  an xdist worker, so it runs once);
- the two cheapest committed seed-1 rows of two tasks rerun end to end and reproduce
  every recorded number exactly (`--verify`), as a user's rerun would.

When one fails, training behaviour changed: the message names the command that
reruns the stale rows and regenerates the tables (`--refresh`).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import warm_python

pytestmark = pytest.mark.xdist_group("suite_rows_current")  # the module fixture runs once

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = "bench.suite.estimator_suite"  # run as python -m SCRIPT
RESULTS = ROOT / "bench" / "results" / "estimator_suite.jsonl"

from bench.suite.estimator_suite import REFRESH_COMMAND, current_rows  # noqa: E402
from bench.suite.suite_definitions import TASKS  # noqa: E402


def _rows() -> list[dict]:
    return current_rows([json.loads(line) for line in RESULTS.read_text().splitlines() if line.strip()])


def _suite(*args: str) -> subprocess.CompletedProcess:
    # forked warm (tests/warm_python.py): the script pins ATen's kernels itself, and refuses if the pin came too late
    return warm_python.run([sys.executable, "-m", SCRIPT, "--results", str(RESULTS), *args], cwd=ROOT, timeout=900)


def test_every_task_and_estimator_of_the_suite_has_committed_rows_with_a_fingerprint():
    rows = _rows()
    pairs = {(r["task"], r["estimator"]) for r in rows}
    assert pairs == {(task, e) for task, spec in TASKS.items() for e in spec.estimators}
    assert all(isinstance(r.get("fingerprint"), str) and len(r["fingerprint"]) == 16 for r in rows)
    assert all(len({r["seed"] for r in rows if (r["task"], r["estimator"]) == p}) >= 10 for p in pairs)


@pytest.fixture(scope="module")
def checked() -> subprocess.CompletedProcess:
    """`--check-current` over every task at once: it names each stale (task, estimator) pair on a line of its own."""
    return _suite("--check-current", "--tasks", *TASKS)


#: the fixture's one process does the five per-task processes' work: its own 900 s bound (`_suite`) ends a hang,
#: not the suite's per-test 600 s, which the first test to use it would otherwise spend on all five tasks
CHECK_TIMEOUT = pytest.mark.timeout(1200)


@CHECK_TIMEOUT
@pytest.mark.parametrize("task", list(TASKS))
def test_the_committed_rows_match_this_codes_behaviour_fingerprints(task: str, checked: subprocess.CompletedProcess):
    n = len(_rows())  # every current row of every task was compared: the summary line counts them
    summary = [line for line in checked.stdout.splitlines() if line.startswith("[suite] ") and f" {n} rows" in line]
    assert checked.returncode in (0, 1) and summary, (
        f"--check-current did not finish:\n{checked.stdout[-3000:]}{checked.stderr[-3000:]}"
    )
    stale = [line for line in checked.stdout.splitlines() if line.startswith(f"[suite] {task}/")]
    assert not stale, (
        f"bench/results/estimator_suite.jsonl no longer describes this code's training on `{task}`:\n"
        + "\n".join(stale)
        + f"\nIf the change of behaviour is meant, refresh the campaign and commit the rows and docs: {REFRESH_COMMAND}"
    )


@CHECK_TIMEOUT
def test_every_task_passes_the_fingerprint_check(checked: subprocess.CompletedProcess):
    assert checked.returncode == 0, checked.stdout[-3000:] + checked.stderr[-2000:]
    assert f"[suite] all {len(_rows())} rows match this code's behaviour fingerprints" in checked.stdout


def test_two_committed_rows_rerun_exactly():
    cheapest: dict[str, dict] = {}
    seed1 = [r for r in _rows() if r["seed"] == 1]  # `--seeds 1` reruns exactly that seed
    for row in sorted(seed1, key=lambda r: (r["cpu_s"], r["task"], r["estimator"])):
        cheapest.setdefault(row["task"], row)
    for row in sorted(cheapest.values(), key=lambda r: r["cpu_s"])[:2]:
        args = ["--verify", "--tasks", row["task"], "--estimators", row["estimator"]]
        done = _suite(*args, "--seeds", "1")
        label = f"{row['task']}/{row['estimator']}/seed{row['seed']}"
        assert done.returncode == 0, (
            f"the committed row {label} no longer reproduces:\n{done.stdout[-3000:]}{done.stderr[-2000:]}\n"
            f"Refresh the campaign and commit the rows and docs: {REFRESH_COMMAND}"
        )
