"""Launching multi-process jobs from tests: clean environment, free port, bounded wait."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
_RANK_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
#: from os.urandom: a trainer run in the test process seeds the global `random` (the same seed on every worker)
_PICK = random.SystemRandom()


def clean_env() -> dict[str, str]:
    """The current environment without rank variables, with the repo and tests importable."""
    env = {k: v for k, v in os.environ.items() if k not in _RANK_VARS}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(HERE), env.get("PYTHONPATH", "")])
    env["OMP_NUM_THREADS"] = "1"
    return env


def rank_envs(world_size: int) -> list[dict[str, str]]:
    """One environment per rank for launching the ranks by hand (no torchrun), on a free port."""
    port = str(free_port())
    envs = []
    for rank in range(world_size):
        env = clean_env()
        env.update(
            RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world_size), MASTER_ADDR="127.0.0.1", MASTER_PORT=port
        )
        envs.append(env)
    return envs


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_port() -> int:
    """A free port below the kernel's ephemeral range, picked at random.

    A port from `bind(0)` lies in the range the kernel also gives outgoing
    connections, and in the seconds before rank 0 binds it another job's
    connection (gloo opens many; the suite runs jobs in parallel) may take it.
    Below that range no connection takes it, and a random pick keeps parallel
    test workers apart.
    """
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 0
    if low > 2048:
        for _ in range(50):
            port = _PICK.randrange(max(1024, low - 10000), low)
            if _bindable(port):
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def descendants(pid: int) -> list[int]:
    """Every live descendant of `pid` (torchrun starts each worker in a session of its own)."""
    import warm_python  # tests/, on the path in the test process (not in the ranks, which import this file)

    return [child.pid for child in warm_python.descendants(pid)]


def kill_tree(proc: Any) -> None:
    """SIGKILL `proc`, its process group and every descendant (torchrun's workers have sessions of their own),
    and wait until they are gone. `proc` itself is reaped by its own `wait`, which keeps its exit status."""
    import warm_python

    warm_python.kill_and_wait(warm_python.descendants(proc.pid))
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def warm_torchrun(*args: str) -> list[str]:
    """`torchrun ARGS` with its ranks forked from a launcher that has torch and the trainer imported
    (warm_torchrun.py), for `run_bounded(..., warm=True)`: for tests of what the ranks compute, not of the launcher."""
    return [sys.executable, str(HERE / "warm_torchrun.py"), *args]


def run_bounded(
    cmds: list[list[str]], envs: list[dict[str, str]], timeout: float, warm: bool = False
) -> list[tuple[int, str, str]]:
    """Start the commands together; kill every process tree that outlives `timeout`.

    Returns (exit code, stdout, stderr) per command; a hang fails the test
    (and kills the workers too, which torchrun runs in sessions of their own).
    `warm`: each command is forked from a preloaded interpreter where it can be (tests/warm_python.py).
    """
    if warm:
        import warm_python  # tests/, on the path in the test process (not in the ranks, which import this file)

        procs = [warm_python.start(cmd, cwd=ROOT, env=env, new_session=True) for cmd, env in zip(cmds, envs)]
    else:
        procs = [
            subprocess.Popen(
                cmd,
                env=env,
                cwd=ROOT,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                start_new_session=True,
            )
            for cmd, env in zip(cmds, envs)
        ]
    results = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=timeout)
            results.append((proc.returncode, out, err))
    except subprocess.TimeoutExpired:
        pytest.fail(f"distributed job did not finish within {timeout} s (a rank hung): {cmds}")
    finally:
        for proc in procs:
            if proc.poll() is None:
                kill_tree(proc)
    return results
