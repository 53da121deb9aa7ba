"""The kernel pin takes before ATen's first operation, also after torch is imported, and refuses after it.

Each case runs in a fresh interpreter (the subject is what ATen picked in that process). The level pinned is
"default" rather than avx2, so that the pin is visible on a machine whose own best level is AVX2.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PIN = "from bench.kernels import pinned_kernels as pk; pk.LEVEL = 'default'; pk.pin_before_torch()\n"
SHOW = "import os, torch; print(torch.backends.cpu.get_cpu_capability(), os.environ['ATEN_CPU_CAPABILITY'])\n"


def _python(code: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "ATEN_CPU_CAPABILITY"}
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_a_pin_before_torch_is_imported_takes() -> None:
    proc = _python(PIN + SHOW)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["DEFAULT", "default"]


def test_a_pin_after_the_import_and_before_any_operation_takes() -> None:
    """As in a script forked from an interpreter that imported torch, transformers and the trainer."""
    proc = _python("import torch, transformers, areal_adv.trainer.run.loop\n" + PIN + SHOW)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["DEFAULT", "default"]


def test_a_pin_after_an_operation_is_an_error_naming_the_kernels_that_run() -> None:
    proc = _python("import torch\ntorch.ones(64).add_(1)\n" + PIN)
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("RuntimeError: pinned_kernels: ATen runs its ") and "not the pinned DEFAULT" in last, last
