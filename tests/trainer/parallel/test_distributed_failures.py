"""Failures on one rank stop every rank under torchrun, and every report names the root cause.

Through the real launcher (`python -m torch.distributed.run --standalone --nproc_per_node=2`, gloo on
CPU), with each rank's output in its own log file (`--log-dir ... --redirects 3`):

* an advantage plugin that imports everywhere but raises when called on rank 1, while rank 0 waits
  in the status exchange before the batch-level normalisation all-reduce (the call-time agreement
  of `PPOActor.compute_advantages`; tests/trainer/dist_failing_plugins.py);
* a reward-function plugin (`reward: [{implementation: ...}]`) raising on rank 0 only
  (tests/trainer/dist_failing_plugins.py);
* a reward function on rank 1 at step 1 that raises, ends its process with `os._exit(3)`, or hangs,
  each twice (where in a whole second the failure falls decided torchrun's root cause before); two of
  the raising runs fix the order in which rank 0 stops (at its stage boundary, or ended by torchrun's
  SIGTERM), which otherwise depends on the machine's load.

Checked: both ranks exit 1 soon after the failure (on the protocol's signals: no wait runs into its
bound); torchrun's summary names the failing rank as the
root cause, with the stage, the plugin/function and the cause; every surviving rank's last line names
them too, and the healthy rank never names itself; the failing rank's log has the traceback. Every job
runs under a subprocess timeout.
"""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path

import pytest
from dist_launch import ROOT, clean_env, run_bounded

JOB_TIMEOUT_S = 360  # shared CPUs: generous; a hang still fails the test
FAILURE_TIMEOUT_S = 30  # train.failure_timeout_s: the bound on waiting for peers
TINY = [
    "train.steps=3",
    "rollout.batch_size=2",
    "rollout.n_samples=4",
    "model.hidden_size=32",
    "model.num_heads=2",
    "model.intermediate_size=64",
    "output.progress_bar=false",
    "train.num_threads=1",
    "train.dist_timeout_s=120",
    f"train.failure_timeout_s={FAILURE_TIMEOUT_S}",
]


def _launch(tmp_path: Path, entry: list[str], *overrides: str) -> tuple[int, str, list[str], list[dict], float]:
    """(exit code, torchrun's stderr, per-rank stderr logs, per-rank error files, seconds after the failure)."""
    logs = tmp_path / "logs"
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=2",
        "--log-dir",
        str(logs),
        "--redirects",
        "3",
        *entry,
        "--config",
        str(ROOT / "examples" / "grpo_arith.yaml"),
        *TINY,
        f"output.dir={tmp_path / 'out'}",
        *overrides,
    ]
    [(code, _, err)] = run_bounded([cmd], [clean_env()], JOB_TIMEOUT_S)
    ended = time.time()
    [attempt] = list(logs.glob("*/attempt_0"))
    rank_logs = [(attempt / str(r) / "stderr.log").read_text() for r in range(2)]
    files = [json.loads((attempt / str(r) / "error.json").read_text())["message"] for r in range(2)]
    first = min(int(f["extraInfo"]["timestamp"]) for f in files)
    return code, err, rank_logs, files, ended - first


def _root_cause(summary: str) -> str:
    """The "Root Cause (first observed failure)" block of torchrun's summary."""
    match = re.search(r"Root Cause \(first observed failure\):\n(.*?)\n={20,}", summary, re.S)
    assert match, summary[-3000:]
    return match.group(1)


def _check(
    code: int,
    summary: str,
    logs: list[str],
    files: list[dict],
    after_s: float,
    failing: int,
    cause: str,
    watcher: bool = True,
) -> None:
    healthy = 1 - failing
    assert code == 1, summary[-3000:]
    root = _root_cause(summary)
    assert f"rank      : {failing} (local_rank: {failing})" in root, root
    assert f"RankFailure: {cause}" in root, root
    for rank, log in enumerate(logs):
        assert f"error: {cause}" in log, (rank, log)
        assert f"RankFailure: {cause}" in files[rank]["message"]  # also where a rank stopped at a stage boundary
    if watcher:  # the healthy rank learnt it from its failure watcher (not from an agreed call)
        assert f"[areal-adv] rank {healthy}: stopping because {cause}" in logs[healthy]
    assert "Traceback (most recent call last)" in logs[failing]
    assert int(files[failing]["extraInfo"]["timestamp"]) < int(files[healthy]["extraInfo"]["timestamp"])
    # stopped by the protocol's signals, not by its bounds: every acknowledgement came, no watcher ended its rank
    # (how long that took in seconds is the machine's load, so it is printed, not checked)
    for log in logs:
        assert "not every rank acknowledged" not in log and "ended by its failure watcher" not in log, log
    print(
        f"\nrank {failing} failed; both ranks exited {after_s:.1f} s after its report (whole seconds); "
        f"rank {healthy} logged: {cause}"
    )


def test_plugin_failing_at_call_time_on_rank_1_stops_rank_0_waiting_in_the_agreement(tmp_path: Path) -> None:
    code, summary, logs, files, after_s = _launch(
        tmp_path,
        ["-m", "areal_adv.trainer.main"],
        "actor.advantage.outcome_reward_shaping={implementation: dist_failing_plugins.fail_on_rank1, "
        "kwargs: {delay_s: 3}}",
        "actor.reward_norm={mean_level: batch, std_level: batch}",
    )
    cause = (
        "rank 1 failed in step 0 > advantages: StageContractError: advantage stage 'outcome_reward_shaping' "
        "(dist_failing_plugins.fail_on_rank1): raised ValueError: simulated plugin failure on rank 1 (raised at "
        f"{ROOT / 'tests' / 'trainer' / 'dist_failing_plugins.py'}:"
    )
    _check(code, summary, logs, files, after_s, failing=1, cause=cause, watcher=False)
    assert "in fail_on_rank1)" in logs[0]
    # rank 0 waited in the status exchange before the batch-normalisation all-reduce; it names rank 1, not gloo
    assert "rank 0 stopped because of it, when the ranks exchanged their status in that call" in logs[0]
    assert "Connection closed by peer" not in logs[0] and "rank 0 failed" not in logs[0]
    metrics = tmp_path / "out" / "grpo_arith" / "metrics.jsonl"
    assert not metrics.exists() or not metrics.read_text().strip()  # no step completed


def test_reward_function_raising_on_rank_0_stops_rank_1(tmp_path: Path) -> None:
    code, summary, logs, files, after_s = _launch(
        tmp_path,
        ["-m", "areal_adv.trainer.main"],
        "reward=[{implementation: dist_failing_plugins.reward_failing_on_rank0, weight: 0.5}]",
    )
    cause = (
        "rank 0 failed in step 0 > rollout: RewardFunctionError: reward[0] (reward_failing_on_rank0) "
        "'dist_failing_plugins.reward_failing_on_rank0': raised ZeroDivisionError: simulated reward-function "
        "failure on rank 0 (on 4 completions; columns passed: "
    )
    _check(code, summary, logs, files, after_s, failing=0, cause=cause)
    raised_at = f"(raised at {ROOT / 'tests' / 'trainer' / 'dist_failing_plugins.py'}:"
    assert raised_at in logs[0] and raised_at in logs[1]
    assert "in reward_failing_on_rank0)" in logs[1]
    assert "rank 1 stopped because of it" in logs[1]


# ---------------------------------------------------------------------------
# rank 1 raises, exits hard (os._exit(3)) or hangs in a reward function at step 1; rank 0 is blameless
# ---------------------------------------------------------------------------

#: train.dist_timeout_s of the hang runs: how long rank 0 waits for the hung rank in a collective. Only they
#: get a short one: a collective of a loaded machine's step 0 can take seconds, and 10 s was once exceeded
#: before any fault (at load 19 on 2 cores), so the other runs keep the 120 s of TINY.
HANG_TIMEOUT_S = 20
FAULTS = {  # how rank 1 fails -> (its exit code, what every report says)
    "raise": (
        1,
        "rank 1 failed in step 1 > rollout: RewardFunctionError: reward[0] (reward_dying_on_rank1) "
        "'dist_failing_plugins.reward_dying_on_rank1': raised RuntimeError: simulated reward-function "
        "failure on rank 1",
    ),
    "exit": (3, "rank 1 failed in step 1 > rollout: its process ended without reporting an error"),
    "hang": (1, "rank 1 failed in step 1 > rollout: it stopped responding"),
}


#: rank 0's last line: said by its main thread, or by its SIGTERM handler when torchrun ends it first
#: (it knows of the failure then, and a rank that knows ends at once: see areal_adv.trainer.parallel.failures)
RANK0_LINE = {
    "boundary": ("error: ", "; rank 0 stopped because of it, at its next stage boundary"),
    "sigterm": ("[areal-adv] rank 0: error: ", "; rank 0 stopped because of it, ended by its launcher (SIGTERM)"),
}


def _launch_fault(tmp_path: Path, how: str, rank0: str = "free") -> tuple[int, str, list[list[str]], list[dict | None]]:
    """(exit code, torchrun's stderr, each rank's non-empty stderr lines, each rank's error file or None)."""
    logs = tmp_path / "logs"
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=2",
        "--log-dir",
        str(logs),
        "--redirects",
        "3",
        "-m",
        "areal_adv.trainer.main",
        "--config",
        str(ROOT / "examples" / "grpo_arith.yaml"),
        *TINY,
        *([f"train.dist_timeout_s={HANG_TIMEOUT_S}"] if how == "hang" else []),
        f"output.dir={tmp_path / 'out'}",
        f"reward=[{{implementation: dist_failing_plugins.reward_dying_on_rank1, kwargs: {{how: {how}, "
        f"rank0: {rank0}}}}}]",
    ]
    [(code, _, err)] = run_bounded([cmd], [clean_env()], JOB_TIMEOUT_S)
    [attempt] = list(logs.glob("*/attempt_0"))
    lines = [[x for x in (attempt / str(r) / "stderr.log").read_text().splitlines() if x.strip()] for r in range(2)]
    files = [
        json.loads(f.read_text())["message"] if (f := attempt / str(r) / "error.json").exists() else None
        for r in range(2)
    ]
    return code, err, lines, files


#: 2 runs per fault left to timing (the root cause used to depend on where in a second rank 1 died). When
#: rank 1 raises, rank 0 stops in its collective, at its next stage boundary or by torchrun's SIGTERM,
#: whichever comes first on the machine at the time; two runs fix that order (`rank0` of
#: dist_failing_plugins), the `boundary` one with a slow shutdown of rank 1 as well. Repeating the module
#: beside busy processes is the stress test, run by hand (`scripts/stress_failures.sh`), not in CI.
RUNS = [
    *[(how, "free") for how in ("exit", "hang", "raise") for _ in range(2)],
    ("raise", "boundary"),
    ("raise", "sigterm"),
]


@pytest.mark.parametrize(("how", "rank0"), RUNS, ids=[f"{how}-{i % 2}-{rank0}" for i, (how, rank0) in enumerate(RUNS)])
def test_the_failing_rank_is_named_by_every_rank_and_by_torchrun(tmp_path: Path, how: str, rank0: str) -> None:
    exit_code, cause = FAULTS[how]
    code, summary, lines, files = _launch_fault(tmp_path, how, rank0)
    assert code == 1, summary[-3000:]
    root = _root_cause(summary)
    assert "rank      : 1 (local_rank: 1)" in root and f"exitcode  : {exit_code} " in root, root
    if how != "exit":  # a hard exit leaves no error file: torchrun shows its exit code
        assert f"RankFailure: {cause}" in root, root
    if rank0 != "free":
        head, tail = RANK0_LINE[rank0]
        assert lines[0][-1].startswith(f"{head}{cause}") and lines[0][-1].endswith(tail), lines[0][-3:]
    elif how == "raise":  # rank 0 knows of the failure before it stops: its main thread or its handler says so
        assert re.match(rf"(\[areal-adv\] rank 0: )?error: {re.escape(cause)}", lines[0][-1]), lines[0][-3:]
    else:  # rank 0 reports for the gone or silent peer: a reporting rank finishes its line before SIGTERM ends it
        assert lines[0][-1].startswith(f"error: {cause}"), lines[0][-3:]
    assert "rank 0 stopped because of it" in lines[0][-1] and "rank 0 failed" not in "\n".join(lines[0])
    if how == "hang":
        assert lines[1][-1].startswith(f"[areal-adv] rank 1: error: {cause}"), lines[1][-3:]
        assert "its main thread is at " in lines[1][-1] and "in reward_dying_on_rank1" in lines[1][-1]
    elif how == "raise":
        assert lines[1][-1].startswith(f"error: {cause}"), lines[1][-3:]
    else:
        assert lines[1] == [] and files[1] is None  # os._exit: nothing runs after it
    # the same type on every path (a `PeerFailure` at a stage boundary ends as the `RankFailure` it is)
    assert files[0] is not None and files[0]["message"].startswith(f"RankFailure: {cause}"), files[0]["message"]
    if files[1] is not None:  # torchrun picks the smallest timestamp: the failing rank's
        assert int(files[1]["extraInfo"]["timestamp"]) < int(files[0]["extraInfo"]["timestamp"])
