"""`areal-adv validate`: resolves every stage as a worker would, or prints the precise error."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from areal_adv.cli import main

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
    assert re.search(
        r"outcome_reward_shaping\s+examples\.custom_advantage\.plugins\.scale_outcome\s+\{'factor': 0\.25\}", out
    )


def test_validate_reports_an_unimportable_stage(capsys):
    path = ROOT / "examples/presets/rloo.yaml"
    assert main(["validate", str(path), "actor.advantage.estimator.implementation=nope_pkg.mod.fn"]) == 1
    err = capsys.readouterr().err
    assert "actor.advantage.estimator" in err and "'nope_pkg.mod.fn'" in err and "no module named 'nope_pkg'" in err


def test_validate_reports_a_bad_key(capsys):
    assert main(["validate", str(ROOT / "examples/grpo_arith.yaml"), "actor.no_such_field=1"]) == 1
    assert "actor.no_such_field" in capsys.readouterr().err


def test_validate_resolves_the_task_and_reward_plugins(capsys):
    assert main(["validate", str(ROOT / "examples/custom_task/dataset.yaml")]) == 0
    out = capsys.readouterr().out
    assert re.search(r"task \(single-turn\)\s+dataset\s", out)
    assert re.search(r"reward/exact_answer x1\s+examples\.custom_task\.rewards\.exact_answer", out)
    assert re.search(r"data\.train\s+examples/custom_task/data/train\.jsonl\s+200 rows", out)
    assert main(["validate", str(ROOT / "examples/custom_task/multi_turn.yaml")]) == 0
    assert re.search(r"task \(multi-turn\)\s+examples\.custom_task\.tasks\.make_reach_task", capsys.readouterr().out)


def test_validate_reports_an_unimportable_task_and_reward(capsys):
    path = ROOT / "examples/custom_task/single_turn.yaml"
    assert main(["validate", str(path), "task.implementation=nope_pkg.tasks.make"]) == 1
    assert "task.implementation: cannot use 'nope_pkg.tasks.make'" in capsys.readouterr().err
    assert main(["validate", str(path), "reward=[{implementation: nope_pkg.rewards.fn}]"]) == 1
    assert "reward[0] (fn): cannot use 'nope_pkg.rewards.fn'" in capsys.readouterr().err


def test_validate_prints_what_the_context_check_saw(capsys):
    assert main(["validate", str(ROOT / "examples/custom_task/dataset.yaml")]) == 0
    out = capsys.readouterr().out
    assert (
        "context OK: the longest prompt (8 tokens, data.train row 0) plus 2 to generate (actor.max_new_tokens=2) fits "
        "max_position_embeddings=128 (prompts checked: 200 of data.train, 32 of data.eval)"
    ) in out


def test_a_bad_key_is_answered_before_torch_is_imported(tmp_path):
    """validate loads the config first; torch, transformers and the trainer come only once it is valid."""
    import subprocess
    import sys

    code = (
        "import sys; from areal_adv.cli import main; rc = main(['validate', 'preset:grpo', 'actor.no_such=1']); "
        "print(rc, sorted(m for m in ('torch', 'transformers', 'numba', 'areal_adv.trainer.ppo') if m in sys.modules))"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.stdout.strip() == "1 []", proc.stdout + proc.stderr
    assert proc.stderr.startswith("error: actor.no_such (in override 'actor.no_such=1'): unknown key 'no_such'")


def _cli(*args: str, cwd: Path | None = None) -> tuple[int, str, str, list[str]]:
    """`areal-adv ARGS` in a fresh interpreter: exit status, stdout, stderr and which heavy modules it imported."""
    import subprocess
    import sys

    code = (
        "import sys; from areal_adv.cli import main\n"
        "try:\n    rc = main(sys.argv[1:])\nexcept SystemExit as exc:\n    rc = exc.code\n"
        "print('MODULES', sorted(m for m in ('torch', 'transformers') if m in sys.modules))\nsys.exit(rc)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, *args], cwd=cwd or ROOT, capture_output=True, text=True, timeout=120
    )
    out, _, modules = proc.stdout.rpartition("MODULES ")
    return proc.returncode, out, proc.stderr, ast.literal_eval(modules)


def test_version_prints_the_installed_version():
    from importlib.metadata import version

    rc, out, err, modules = _cli("--version")
    assert (rc, out.strip(), modules) == (0, f"areal-adv {version('areal-adv')}", []), err


def test_top_level_help_names_every_command():
    rc, out, _, _ = _cli("--help")
    assert rc == 0
    description = " ".join(out.split("positional arguments")[0].split("\n", 2)[-1].split())
    commands = re.search(r"\{([a-z,]+)\}", out).group(1).split(",")  # the subcommands argparse lists
    assert {"validate", "presets", "train", "export", "diagnose", "race"} <= set(commands)
    for command in commands:  # each one named in the description, as "what it does (command)"
        assert f"({command})" in description, (command, description)


def test_train_help_shows_the_command_it_was_called_as():
    rc, out, _, _ = _cli("train", "--help")
    assert rc == 0 and out.startswith("usage: areal-adv train [-h] [--config CONFIG]")
    text = " ".join(out.split())
    assert "local checkpoint (model.path)" in text and "prompt files (data.train)" in text


def test_export_help_and_a_missing_run_answer_before_torch_loads(tmp_path: Path):
    rc, out, _, modules = _cli("export", "--help")
    assert rc == 0 and out.startswith("usage: areal-adv export") and modules == []
    rc, _, err, _ = _cli("export", "runs/nope", str(tmp_path / "out"), cwd=tmp_path)
    assert rc == 1
    assert err.strip() == (
        f"error: 'runs/nope' (relative to {tmp_path}): does not exist; expected a run directory or one of its "
        "checkpoint folders"
    )
