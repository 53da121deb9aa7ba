"""Start N ranks of a script with torchrun-style variables (what accelerate reads), bounded in time."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import warm_python

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def _free_port() -> int:
    """The trainer tests' pick (below the kernel's ephemeral range, see `dist_launch.free_port`)."""
    if str(ROOT / "tests" / "trainer") not in sys.path:
        sys.path.insert(0, str(ROOT / "tests" / "trainer"))
    from dist_launch import free_port

    return free_port()


def run_ranks(world_size: int, cmd: list[str], timeout: float) -> None:
    """Run `cmd` once per rank; fail the test with the ranks' stderr when one fails or hangs."""
    port = str(_free_port())
    base = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT")}
    base.update(
        PYTHONPATH=os.pathsep.join([str(ROOT), str(HERE), base.get("PYTHONPATH", "")]),
        OMP_NUM_THREADS="1",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=port,
        WORLD_SIZE=str(world_size),
    )
    # each rank forked from an interpreter that has torch and transformers imported (tests/warm_python.py)
    procs = [
        warm_python.start(cmd, cwd=ROOT, env={**base, "RANK": str(r), "LOCAL_RANK": str(r)}, new_session=True)
        for r in range(world_size)
    ]
    try:
        results = [proc.communicate(timeout=timeout) for proc in procs]
    except subprocess.TimeoutExpired:
        pytest.fail(f"a rank did not finish within {timeout} s: {cmd}")
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    failed = [(r, p.returncode, err[-3000:]) for r, (p, (_, err)) in enumerate(zip(procs, results)) if p.returncode]
    if failed:
        pytest.fail("ranks failed: " + "\n".join(f"rank {r} exit {code}:\n{err}" for r, code, err in failed))
