"""Presets ship with the package and are found by name from any folder (`preset:NAME`).

The subprocess tests run from a temporary folder outside the repository, as a
user's own project would: `defaults: [preset:grpo]` in their YAML,
`load_config("preset:rloo")` in Python, `--config preset:grpo` on the command line.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from fnmatch import fnmatch
from pathlib import Path

import pytest

from areal_adv.api.cli_args import ConfigError, config_to_dict, load_config
from areal_adv.api.presets import PRESET_DIR, PresetError, describe_preset, preset_names, preset_path
from areal_adv.cli import main

ROOT = Path(__file__).resolve().parents[2]
AREAL = Path(sys.executable).with_name("areal-adv")


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the installed package, not the checkout
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    assert ROOT not in tmp_path.parents
    return tmp_path


def test_a_users_yaml_builds_on_a_preset_from_any_folder(outside: Path):
    (outside / "mine.yaml").write_text("defaults: [preset:grpo]\nexperiment_name: mine\nactor: {kl_ctl: 0.02}\n")
    proc = _run([str(AREAL), "validate", "mine.yaml", "train.steps=3"], outside)
    assert proc.returncode == 0, proc.stderr
    assert "config OK" in proc.stdout and "reinforce_return" in proc.stdout


def test_a_users_yaml_that_names_no_run_is_named_after_its_file(outside: Path):
    """`defaults: [preset:grpo]` without experiment_name runs in runs/my_exp/, not in the preset's runs/preset_grpo/."""
    from areal_adv.trainer.run.run_dir import run_directory

    (outside / "my_exp.yaml").write_text("defaults: [preset:grpo]\nactor: {kl_ctl: 0.02}\n")
    (outside / "other.yaml").write_text("defaults: [my_exp.yaml]\n")
    (outside / "named.yaml").write_text("defaults: [my_exp.yaml]\nexperiment_name: mine\n")
    assert run_directory(load_config(outside / "my_exp.yaml")) == Path("runs/my_exp/trial0")
    assert load_config(outside / "other.yaml").experiment_name == "other"
    assert load_config(outside / "named.yaml").experiment_name == "mine"  # a name the user set wins
    assert load_config(outside / "my_exp.yaml", ["experiment_name=cli"]).experiment_name == "cli"
    assert load_config("preset:grpo").experiment_name == "preset_grpo"  # the preset run as such
    assert load_config({"defaults": ["preset:grpo"]}).experiment_name == "preset_grpo"  # no file to name it after
    proc = _run([str(AREAL), "train", "--config", "my_exp.yaml", "train.steps=2", "output.plot=false"], outside)
    assert proc.returncode == 0, proc.stderr
    assert (outside / "runs" / "my_exp" / "trial0" / "metrics.jsonl").is_file()


def test_load_config_and_the_trainer_take_a_preset_name_from_any_folder(outside: Path):
    code = (
        "from areal_adv.api.cli_args import load_config; c = load_config('preset:rloo', ['actor.kl_ctl=0.5']); "
        "print(c.experiment_name, c.actor.kl_ctl, c.actor.reward_norm.mean_leave1out)"
    )
    proc = _run([sys.executable, "-c", code], outside)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["preset_rloo", "0.5", "True"]
    proc = _run([sys.executable, "-m", "areal_adv.trainer.main", "--config", "preset:grpo", "--print-config"], outside)
    assert proc.returncode == 0, proc.stderr
    assert "experiment_name: preset_grpo" in proc.stdout


def test_every_preset_builds_on_the_default_run_and_matches_its_examples_path():
    base = config_to_dict(load_config("preset:grpo_arith"))
    assert config_to_dict(load_config(ROOT / "examples" / "grpo_arith.yaml")) == base
    for name in set(preset_names()) - {"grpo_arith"}:
        cfg = config_to_dict(load_config(f"preset:{name}"))
        assert cfg["task"] == base["task"] and cfg["model"] == base["model"], name
        alias = config_to_dict(load_config(ROOT / "examples" / "presets" / f"{name}.yaml"))
        assert alias == {**cfg, "experiment_name": name}, name  # a file that names no run is named after itself


def test_every_file_in_the_folder_is_a_preset_with_a_one_line_description():
    names = preset_names()
    assert names == sorted(p.stem for p in PRESET_DIR.glob("*.yaml")) and {"grpo", "rloo", "ppo"} <= set(names)
    for name in names:
        assert 20 <= len(describe_preset(name)) <= 120, name
        assert preset_path(f"preset:{name}") == preset_path(name) == PRESET_DIR / f"{name}.yaml"


def test_the_wheel_carries_every_preset():
    """pyproject's package-data globs match every file in the folder (wheels and editable installs)."""
    globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["areal_adv"]
    files = [p.relative_to(ROOT / "areal_adv").as_posix() for p in PRESET_DIR.iterdir()]
    assert files and all(any(fnmatch(f, g) for g in globs) for f in files), (files, globs)


def test_a_new_yaml_in_the_folder_is_picked_up(monkeypatch, tmp_path: Path):
    monkeypatch.setattr("areal_adv.api.presets.PRESET_DIR", tmp_path)
    (tmp_path / "mine.yaml").write_text("# Mine: the default run, longer\ntrain: {steps: 7}\n")
    assert preset_names() == ["mine"] and describe_preset("mine") == "Mine: the default run, longer"
    assert load_config("preset:mine").train.steps == 7


def test_an_unknown_preset_is_one_line_listing_the_known_ones(tmp_path: Path, capsys):
    with pytest.raises(PresetError, match=r"unknown preset 'grpoo'; did you mean 'grpo'.*known presets: .*rloo"):
        preset_path("grpoo")
    with pytest.raises(PresetError, match="unknown preset '../grpo'"):
        preset_path("preset:../grpo")
    with pytest.raises(ConfigError) as info:
        load_config("preset:rlo")
    assert "config 'preset:rlo': unknown preset 'rlo'; did you mean 'rloo'" in str(info.value)
    (tmp_path / "mine.yaml").write_text("defaults: [preset:nope]\n")
    with pytest.raises(ConfigError, match=r"defaults\[0\] \(in .*mine.yaml\): unknown preset 'nope' \(known"):
        load_config(tmp_path / "mine.yaml")
    assert main(["validate", "preset:grpo_arithm"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "did you mean 'grpo_arith'" in err


def test_areal_presets_lists_each_preset_on_one_line(capsys):
    assert main(["presets"]) == 0
    lines = capsys.readouterr().out.splitlines()
    for name in preset_names():
        [line] = [x for x in lines if x.split()[:1] == [name]]
        assert line.endswith(describe_preset(name)), line
