"""`areal validate`: resolves every stage as a worker would, or prints the precise error."""

from __future__ import annotations

import re
from pathlib import Path

from areal.cli import main

ROOT = Path(__file__).resolve().parents[1]


def test_validate_prints_the_resolved_stages(capsys):
    assert main(["validate", str(ROOT / "examples/custom_advantage/turn_gae_gvpo.yaml")]) == 0
    out = capsys.readouterr().out
    assert re.search(r"estimator\s+turn_gae\s", out)
    assert re.search(r"process_adv_shaping\s+gvpo\s+\{'negative_scale': 0\.2, 'zero_penalty': 0\.4\}", out)
    assert "config OK" in out


def test_validate_with_an_override_resolves_the_plugin(capsys):
    path = ROOT / "examples/custom_advantage/scale_outcome.yaml"
    assert main(["validate", str(path), "actor.advantage.outcome_reward_shaping.kwargs.factor=0.25"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"outcome_reward_shaping\s+examples\.custom_advantage\.plugins\.scale_outcome\s+\{'factor': 0\.25\}", out)


def test_validate_reports_an_unimportable_stage(capsys):
    path = ROOT / "examples/presets/rloo.yaml"
    assert main(["validate", str(path), "actor.advantage.estimator.implementation=nope_pkg.mod.fn"]) == 1
    err = capsys.readouterr().err
    assert "actor.advantage.estimator" in err and "'nope_pkg.mod.fn'" in err and "no module named 'nope_pkg'" in err


def test_validate_reports_a_bad_key(capsys):
    assert main(["validate", str(ROOT / "examples/grpo_arith.yaml"), "actor.no_such_field=1"]) == 1
    assert "actor.no_such_field" in capsys.readouterr().err
