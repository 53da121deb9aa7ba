"""The extras a config needs: found at once, named in one line with the command that fits the environment."""

from __future__ import annotations

import importlib.util
import re
import sys
import tomllib
from pathlib import Path

import pytest

from areal_adv.api.cli_args import ConfigError, load_config
from areal_adv.api.extras import (
    EXTRA_MODULES,
    check_extras,
    extra_requirements,
    install_command,
    missing_extras,
    needed_extras,
)

ROOT = Path(__file__).resolve().parents[2]
EXTRAS_LINE = re.compile(r"^# extras: ([a-z ]+)$", re.MULTILINE)
LAPTOP = str(ROOT / "examples/real_model/laptop.yaml")


def _declared(path: Path) -> set[str]:
    found = EXTRAS_LINE.findall(path.read_text())
    assert len(found) <= 1, f"{path}: more than one '# extras:' line"
    return set(found[0].split()) if found else set()


def _pyproject_extras() -> set[str]:
    return set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])


def _hiding(*modules: str):
    """A find_spec that does not find `modules` (as in a venv without them) and finds everything else."""
    real = importlib.util.find_spec

    def find_spec(name: str, *args: object) -> object:
        return None if name in modules else real(name, *args)

    return find_spec


def test_every_extra_is_an_extra_of_pyproject() -> None:
    assert set(EXTRA_MODULES) <= _pyproject_extras()


@pytest.mark.parametrize("path", sorted(str(p.relative_to(ROOT)) for p in (ROOT / "examples").rglob("*.yaml")))
def test_each_example_names_the_extras_it_needs(path: str) -> None:
    declared = _declared(ROOT / path)
    assert declared <= _pyproject_extras(), f"{path}: '# extras: {' '.join(sorted(declared))}' names no extra"
    needed = set(needed_extras(load_config(str(ROOT / path))))
    assert needed <= declared, f"{path} needs {sorted(needed)}: its '# extras:' line must name them"


def test_the_real_model_install_script_installs_what_its_examples_name() -> None:
    script = (ROOT / "examples/real_model/install.sh").read_text()
    (line,) = re.findall(r"^\./scripts/setup\.sh (.+)$", script, re.MULTILINE)
    declared = set().union(*(_declared(p) for p in (ROOT / "examples/real_model").glob("*.yaml")))
    assert {"data", "lora", "reasoning"} <= declared  # the sums run, laptop.yaml, the skill tasks
    assert declared | {"gguf"} <= set(line.split())  # gguf: run.sh loads the GGUF file when nothing is converted


def test_every_missing_extra_is_named_in_one_message_with_its_field() -> None:
    cfg = load_config(
        LAPTOP,
        [
            "output.loggers=[jsonl,wandb]",
            "task.implementation=reasoning_gym",
            "task.kwargs={dataset: basic_arithmetic}",
        ],
    )
    assert needed_extras(cfg) == {
        "data": "data.train",
        "lora": "model.lora",
        "reasoning": "task.implementation=reasoning_gym",
        "wandb": "output.loggers",
    }
    hide = _hiding("datasets", "peft", "reasoning_gym", "wandb")
    assert [m.extra for m in missing_extras(cfg, hide)] == ["data", "lora", "reasoning", "wandb"]
    with pytest.raises(ConfigError) as caught:
        check_extras(cfg, hide)
    message = str(caught.value)
    assert "\n" not in message
    for part in (
        "data (data.train needs the datasets package)",
        "lora (model.lora needs the peft package)",
        "reasoning (task.implementation=reasoning_gym needs the reasoning_gym package)",
        "wandb (output.loggers needs the wandb package)",
        f"not installed in {sys.prefix}",
        f"install them with: {install_command(['data', 'lora', 'reasoning', 'wandb'])}",
    ):
        assert part in message, (part, message)
    check_extras(cfg, _hiding())  # all installed: nothing to say
    assert needed_extras(load_config("preset:grpo_arith")) == {}


def test_the_install_command_fits_the_environment(tmp_path: Path) -> None:
    clone, venv = ROOT, tmp_path / "myenv"
    # the clone's own .venv: the project's set-up script (pinned, and kept in its stamp)
    assert install_command(["lora", "data"], prefix=str(clone / ".venv"), root=clone, cwd=clone) == (
        "./scripts/setup.sh data lora"
    )
    assert install_command(["data"], prefix=str(clone / ".venv"), root=clone, cwd=tmp_path) == (
        f"{clone}/scripts/setup.sh data"
    )
    # a venv of the user's own with the package from the clone: its pip, the clone's constraints
    own = dict(prefix=str(venv), executable=str(venv / "bin/python"), root=clone)
    assert install_command(["data", "lora"], **own, cwd=clone) == (
        f"{venv}/bin/python -m pip install -c constraints.txt -e '.[data,lora]'"
    )
    assert install_command(["data", "lora"], **own, cwd=tmp_path) == (
        f"./myenv/bin/python -m pip install -c {clone}/constraints.txt -e '{clone}[data,lora]'"
    )


def test_outside_a_clone_the_command_installs_the_declared_requirements(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import areal_adv.api.extras as extras

    monkeypatch.setattr(extras, "_clone_root", lambda: None)
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert extra_requirements(["lora", "data"]) == [*declared["data"], *declared["lora"]]
    command = install_command(["lora", "data"], executable="/env/bin/python", cwd=tmp_path)
    wanted = " ".join(repr(r) for r in [*declared["data"], *declared["lora"]])
    assert command == f"/env/bin/python -m pip install {wanted}"


def test_validate_and_train_stop_on_every_missing_extra_before_anything_loads(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    import areal_adv.cli as cli
    from areal_adv.trainer import main as trainer_main
    from areal_adv.trainer.run import loop

    def must_not_run(*args: object, **kwargs: object) -> None:
        raise AssertionError("resolved or built something before the extras were checked")

    monkeypatch.setattr(importlib.util, "find_spec", _hiding("datasets", "peft"))
    monkeypatch.setattr(cli, "_resolve", must_not_run)
    monkeypatch.setattr(loop.Trainer, "__init__", must_not_run)
    expected = f"install them with: {install_command(['data', 'lora'])}"
    overrides = ["train.steps=1", f"output.dir={tmp_path}"]
    assert cli.main(["validate", LAPTOP, *overrides]) == 1
    assert trainer_main.main(["--config", LAPTOP, *overrides]) == 1
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2, lines
    validate_line, train_line = lines
    assert validate_line.startswith("error: extras not installed") and expected in validate_line
    assert train_line.startswith("config error: extras not installed") and expected in train_line
    for line in lines:
        assert "data (data.train needs the datasets package), lora (model.lora needs the peft package)" in line


def test_the_trainer_checks_them_too(monkeypatch: pytest.MonkeyPatch) -> None:
    from areal_adv.trainer.run.loop import Trainer

    monkeypatch.setattr(importlib.util, "find_spec", _hiding("peft"))
    with pytest.raises(ConfigError, match=r"lora \(model\.lora needs the peft package\)"):
        Trainer(load_config("preset:grpo_arith", ["model.lora={r: 4}"]))
