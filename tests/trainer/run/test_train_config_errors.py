"""Bad experiment configs fail at load time with an error naming the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from areal_adv.api.cli_args import ConfigError, load_config
from areal_adv.api.train_args import ExperimentConfig
from areal_adv.trainer.main import main

ROOT = Path(__file__).resolve().parents[3]
DEFAULT = ROOT / "examples" / "grpo_arith.yaml"


def test_default_example_loads_and_round_trips() -> None:
    cfg = load_config(DEFAULT)
    assert isinstance(cfg, ExperimentConfig)
    assert cfg.task.name == "arith" and not cfg.critic.enabled
    assert cfg.actor.reward_norm is not None and cfg.actor.reward_norm.mean_level == "group"


@pytest.mark.parametrize(
    "override,field",
    [
        ("task.name=chess", r"task\.name: got 'chess'"),
        ("model.path=/nonexistent/checkpoint", r"model\.path: '/nonexistent/checkpoint' is not a local"),
        ("train.stepz=3", r"train\.stepz"),
        ("rollout.n_samples=0", r"rollout\.n_samples"),
        ("task.kwargs.max_operand=-1", r"task\.kwargs\.max_operand"),
        ("model.arch=gpt9", r"model\.arch"),
        ("rollout.temperature=0.5", r"rollout\.temperature.*actor\.temperature"),
        ("rollout.max_new_tokens=99", r"rollout\.max_new_tokens"),
        ("rollout.prm.enabled=true", r"rollout\.prm\.enabled: task 'arith' has no process-reward scorer"),
        ("rollout.prm.advantage_shaping.mode=bogus", r"rollout\.prm\.advantage_shaping\.mode"),
        ("rollout.export=sideways", r"rollout\.export"),
        ("critic.lr=0", r"critic\.lr"),
        ("output.dir=", r"output\.dir"),
    ],
)
def test_bad_override_names_the_field(override: str, field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        load_config(DEFAULT, [override])


def test_process_shaping_without_process_rewards_loads_but_warns(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from areal_adv.trainer.run.loop import Trainer

    cfg = load_config(ROOT / "examples" / "guess_gvpo.yaml", ["rollout.prm.enabled=false", f"output.dir={tmp_path}"])
    with caplog.at_level("WARNING", logger="areal_adv.trainer"):
        Trainer(cfg)
    assert "rollout.prm.enabled=false" in caplog.text


def test_main_reports_config_errors_and_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--config", str(DEFAULT), "task.name=chess"]) == 1
    err = capsys.readouterr().err
    assert "config error" in err and "task.name" in err and "arith" in err


def test_main_reports_a_missing_config_file(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--config", "no/such/file.yaml"]) == 1
    assert "no/such/file.yaml" in capsys.readouterr().err


def test_main_reports_unknown_keys(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--config", str(DEFAULT), "rollout.group_size=4"]) == 1
    assert "rollout.group_size" in capsys.readouterr().err
