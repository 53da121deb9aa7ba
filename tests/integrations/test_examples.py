"""The runnable integration examples of docs/integrations.md run as documented."""

from __future__ import annotations

import re
import runpy
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "integrations"


def test_verl_example_runs_and_matches_verls_grpo(capsys, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["verl_advantage.py"])
    runpy.run_path(str(EXAMPLES / "verl_advantage.py"), run_name="__main__")
    out = capsys.readouterr().out
    diff = float(re.search(r"vs verl grpo: max \|diff\| = (\S+)", out).group(1))
    assert diff <= 1e-5
    assert "areal[ppo preset]: advantages mean +0.000, std 1.000" in out  # whitened over the batch


def test_trl_example_trains_two_steps(capsys, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["trl_grpo.py", "--steps", "2"])
    runpy.run_path(str(EXAMPLES / "trl_grpo.py"), run_name="__main__")
    assert "trained 2 steps with advantages from" in capsys.readouterr().out
