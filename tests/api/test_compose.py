"""Config composition: `defaults:` lists, bare-string stages, override order, --print-config."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from areal_adv.api.cli_args import ConfigError, StageSpec, config_to_dict, config_to_yaml, load_config
from areal_adv.trainer.main import main, parse_args

ROOT = Path(__file__).resolve().parents[2]
DEFAULT = ROOT / "examples" / "grpo_arith.yaml"


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_actor_only_file_builds_on_the_default_run(tmp_path: Path) -> None:
    snippet = _write(
        tmp_path / "snippet.yaml",
        f"""
defaults: [{DEFAULT}]
actor:
  advantage:
    outcome_reward_shaping:
      implementation: examples.custom_advantage.plugins.scale_outcome
      kwargs: {{factor: 0.5}}
""",
    )
    cfg = load_config(snippet)
    base = load_config(DEFAULT)
    assert cfg.actor.advantage.outcome_reward_shaping == StageSpec(
        "examples.custom_advantage.plugins.scale_outcome", {"factor": 0.5}
    )
    # everything else is the default run, not the built-in dataclass defaults
    mine, theirs = config_to_dict(cfg), config_to_dict(base)
    mine["actor"]["advantage"]["outcome_reward_shaping"] = None
    assert mine == {**theirs, "experiment_name": "snippet"}  # a file that names no run is named after itself
    assert cfg.actor.max_new_tokens == 4


def test_defaults_merge_in_order_then_the_file_then_overrides(tmp_path: Path) -> None:
    _write(tmp_path / "base" / "a.yaml", "seed: 11\ntrain: {steps: 7, lr: 0.1}\nexperiment_name: a\n")
    _write(tmp_path / "base" / "b.yaml", "defaults: [a.yaml]\ntrain: {steps: 8}\nexperiment_name: b\n")
    _write(tmp_path / "c.yaml", "train: {lr: 0.3}\n")
    top = _write(tmp_path / "top.yaml", "defaults: [base/b.yaml, c.yaml]\nexperiment_name: top\n")
    cfg = load_config(top)
    assert (cfg.seed, cfg.train.steps, cfg.train.lr, cfg.experiment_name) == (11, 8, 0.3, "top")
    cfg = load_config(top, ["train.steps=9", "experiment_name=cli"])
    assert (cfg.train.steps, cfg.experiment_name) == (9, "cli")


def test_defaults_in_a_mapping_are_relative_to_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _write(tmp_path / "a.yaml", "seed: 5\n")
    monkeypatch.chdir(tmp_path)
    assert load_config({"defaults": ["a.yaml"], "train": {"steps": 2}}).seed == 5


@pytest.mark.parametrize(
    "text,match",
    [
        ("defaults: base.yaml\n", r"defaults \(in .*top\.yaml\): got 'base\.yaml', expected a list"),
        ("defaults: [3]\n", r"defaults\[0\] \(in .*top\.yaml\): got 3, expected a YAML file path"),
        (
            "defaults: [nope.yaml]\n",
            r"defaults\[0\] \(in .*top\.yaml\): 'nope\.yaml' resolves to .*nope\.yaml'?, which "
            r"does not exist",
        ),
        (
            "defaults: [top.yaml]\n",
            r"defaults\[0\] \(in .*top\.yaml\): 'top\.yaml' forms a cycle: top\.yaml -> top\.yaml",
        ),
        (
            "defaults: [loop.yaml]\n",
            r"defaults\[0\] \(in .*loop\.yaml\): 'top\.yaml' forms a cycle: "
            r"top\.yaml -> loop\.yaml -> top\.yaml",
        ),
        ("- a\n- b\n", r"top\.yaml'?: expected a mapping at the top level"),
        ("train: {steps: [1\n", r"top\.yaml'?: cannot parse YAML"),
        (
            "train: {stepz: 3}\n",
            r"train\.stepz \(in .*top\.yaml\): unknown key 'stepz' in TrainConfig; did you mean "
            r"'steps'\?$",
        ),
    ],
)
def test_bad_defaults_name_the_key_and_file(tmp_path: Path, text: str, match: str) -> None:
    _write(tmp_path / "loop.yaml", "defaults: [top.yaml]\n")
    top = _write(tmp_path / "top.yaml", text)
    with pytest.raises(ConfigError, match=match):
        load_config(top)


def test_defaults_cannot_come_from_the_command_line() -> None:
    with pytest.raises(ConfigError, match=r"override 'defaults=\[a.yaml\]': defaults can only be given inside"):
        load_config(DEFAULT, ["defaults=[a.yaml]"])


def test_a_diamond_is_not_a_cycle(tmp_path: Path) -> None:
    _write(tmp_path / "root.yaml", "seed: 3\n")
    _write(tmp_path / "l.yaml", "defaults: [root.yaml]\ntrain: {steps: 4}\n")
    _write(tmp_path / "r.yaml", "defaults: [root.yaml]\ntrain: {lr: 0.2}\n")
    cfg = load_config(_write(tmp_path / "top.yaml", "defaults: [l.yaml, r.yaml]\n"))
    assert (cfg.seed, cfg.train.steps, cfg.train.lr) == (3, 4, 0.2)


# -- stages -------------------------------------------------------------------------------


def test_bare_string_stage_means_implementation_with_no_kwargs(tmp_path: Path) -> None:
    path = _write(tmp_path / "s.yaml", "actor:\n  advantage:\n    estimator: turn_gae\n    process_adv_shaping: gvpo\n")
    adv = load_config(path).actor.advantage
    assert adv.estimator == StageSpec("turn_gae", {}) and adv.process_adv_shaping == StageSpec("gvpo", {})
    adv = load_config(DEFAULT, ["actor.advantage.estimator=token_gae"]).actor.advantage
    assert adv.estimator == StageSpec("token_gae", {})
    compute = load_config(DEFAULT, ["actor.advantage.compute=examples.custom_advantage.plugins.default_replica"])
    assert compute.actor.advantage.compute == StageSpec("examples.custom_advantage.plugins.default_replica", {})


def test_a_new_implementation_drops_the_old_kwargs_and_kwargs_alone_update(tmp_path: Path) -> None:
    base = _write(
        tmp_path / "base.yaml",
        "actor:\n  advantage:\n    process_adv_shaping:\n"
        "      implementation: gvpo\n      kwargs: {negative_scale: 0.3}\n",
    )
    top = _write(tmp_path / "top.yaml", "defaults: [base.yaml]\nactor: {advantage: {process_adv_shaping: additive}}\n")
    assert load_config(top).actor.advantage.process_adv_shaping == StageSpec("additive", {})
    same = load_config(base, ["actor.advantage.process_adv_shaping.kwargs.zero_penalty=0.5"])
    assert same.actor.advantage.process_adv_shaping == StageSpec("gvpo", {"negative_scale": 0.3, "zero_penalty": 0.5})
    again = load_config(base, ["actor.advantage.process_adv_shaping.implementation=gvpo"])
    assert again.actor.advantage.process_adv_shaping.kwargs == {"negative_scale": 0.3}


def test_a_bad_bare_stage_names_the_stage() -> None:
    with pytest.raises(ConfigError, match=r"actor\.advantage\.estimator\.implementation: got 'nope'"):
        load_config(DEFAULT, ["actor.advantage.estimator=nope"])


def test_bare_strings_also_work_for_the_actor_schema() -> None:
    from areal_adv.api.cli_args import PPOActorConfig

    cfg = load_config({"advantage": {"estimator": "turn_gae"}}, schema=PPOActorConfig)
    assert cfg.advantage.estimator == StageSpec("turn_gae", {})


# -- the command line ---------------------------------------------------------------------


def test_overrides_before_and_after_config() -> None:
    args = parse_args(["train.steps=3", "--config", "x.yaml", "seed=4", "--print-config"])
    assert args.config == "x.yaml" and args.overrides == ["train.steps=3", "seed=4"] and args.print_config


def test_print_config_prints_the_resolved_config_and_exits(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    snippet = _write(tmp_path / "s.yaml", f"defaults: [{DEFAULT}]\nactor: {{advantage: {{estimator: turn_gae}}}}\n")
    assert main(["seed=9", "--config", str(snippet), "--print-config", f"output.dir={tmp_path / 'never'}"]) == 0
    out = capsys.readouterr().out
    printed = OmegaConf.to_container(OmegaConf.create(out))
    expected = load_config(snippet, ["seed=9", f"output.dir={tmp_path / 'never'}"])
    assert out == config_to_yaml(expected) and printed == config_to_dict(expected)
    assert printed["seed"] == 9 and printed["actor"]["advantage"]["estimator"] == {
        "implementation": "turn_gae",
        "kwargs": {},
    }
    assert not (tmp_path / "never").exists()  # nothing was built or written


def test_print_config_output_loads_back_to_the_same_config(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "areal_adv.trainer.main",
            "--config",
            str(ROOT / "examples" / "ppo_turn_gae_guess.yaml"),
            "--print-config",
            "seed=2",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    again = _write(tmp_path / "printed.yaml", proc.stdout)
    assert config_to_dict(load_config(again)) == config_to_dict(
        load_config(ROOT / "examples" / "ppo_turn_gae_guess.yaml", ["seed=2"])
    )


def test_print_config_reports_a_bad_config(capsys: pytest.CaptureFixture) -> None:
    assert main(["--config", str(DEFAULT), "--print-config", "train.steps=0"]) == 1
    assert "train.steps: got 0" in capsys.readouterr().err


def test_a_new_task_name_starts_from_empty_task_kwargs(tmp_path: Path) -> None:
    cfg = load_config(DEFAULT, ["task.name=guess"])
    assert cfg.task.name == "guess" and cfg.task.kwargs == {}
    cfg = load_config(DEFAULT, ["task.name=guess", "task.kwargs.num_range=4"])
    assert cfg.task.kwargs == {"num_range": 4}
    same = load_config(DEFAULT, ["task.name=arith", "task.kwargs.max_operand=3"])
    assert same.task.kwargs == {"min_operand": 0, "max_operand": 3, "op": "add"}


SAVED_STYLE = "task: {implementation: arith, name: arith, kwargs: {max_operand: 3}}\n"


@pytest.mark.parametrize("key", ["task.implementation", "task.name"])
def test_a_later_task_wins_on_the_command_line_whichever_key_names_it(key: str, tmp_path: Path) -> None:
    # grpo_arith.yaml says `task.name: arith`; a saved config.yaml says both names
    for base in (DEFAULT, _write(tmp_path / "saved.yaml", SAVED_STYLE)):
        cfg = load_config(base, [f"{key}=guess"])
        assert (cfg.task.implementation, cfg.task.name, cfg.task.kwargs) == ("guess", "guess", {})
        cfg = load_config(base, [f"{key}=guess", "task.kwargs.num_range=4"])
        assert cfg.task.kwargs == {"num_range": 4}


def test_a_defaults_child_naming_a_task_plugin_starts_from_empty_kwargs(tmp_path: Path) -> None:
    _write(tmp_path / "base.yaml", "task: {name: guess, kwargs: {num_range: 4, max_turns: 2}}\n")
    child = _write(tmp_path / "child.yaml", "defaults: [base.yaml]\ntask: {implementation: userpkg.tasks.make_adder}\n")
    cfg = load_config(child)
    assert (cfg.task.implementation, cfg.task.kwargs) == ("userpkg.tasks.make_adder", {})
    cfg = load_config(child, ["task.kwargs.log=x"])
    assert cfg.task.kwargs == {"log": "x"}
    # the same name under the other key keeps the kwargs (only a new task starts afresh)
    same = _write(tmp_path / "same.yaml", "defaults: [base.yaml]\ntask: {implementation: guess}\n")
    assert load_config(same).task.kwargs == {"num_range": 4, "max_turns": 2}


def test_one_layer_naming_two_different_tasks_is_still_refused() -> None:
    with pytest.raises(ConfigError, match="task.name: got 'arith' but task.implementation is 'guess'"):
        load_config(DEFAULT, ["task.implementation=guess", "task.name=arith"])


def test_tuples_in_kwargs_run_as_the_lists_config_yaml_saves(tmp_path: Path) -> None:
    from areal_adv.api.cli_args import ExperimentConfig, PPOActorConfig
    from areal_adv.api.train_args import RewardFunctionConfig, TaskConfig

    stage = {"implementation": "userpkg.stages.scale", "kwargs": {"w": (1, (2.5, "a")), "m": {"t": ()}}}
    given = {"estimator": stage}
    cfg = ExperimentConfig(
        actor=PPOActorConfig(advantage=given, gae_lambda="userpkg.lam", gae_lambda_kwargs={"k": (1, 2)}),
        task=TaskConfig(implementation="userpkg.tasks.make", kwargs={"sizes": (3, 4)}),
        reward=[RewardFunctionConfig("userpkg.rewards.r", kwargs={"pair": ("x", "y")})],
    )
    assert cfg.actor.advantage.estimator.kwargs == {"w": [1, [2.5, "a"]], "m": {"t": []}}
    assert (cfg.actor.gae_lambda_kwargs, cfg.task.kwargs, cfg.reward[0].kwargs) == (
        {"k": [1, 2]},
        {"sizes": [3, 4]},
        {"pair": ["x", "y"]},
    )
    assert given["estimator"]["kwargs"]["w"] == (1, (2.5, "a"))  # the caller's mapping is left as it was
    saved = _write(tmp_path / "config.yaml", config_to_yaml(cfg))
    assert load_config(saved) == cfg


def test_the_command_line_of_the_issue_runs_the_later_task(capsys: pytest.CaptureFixture) -> None:
    assert main(["--config", str(DEFAULT), "--print-config", "task.implementation=guess"]) == 0
    printed = OmegaConf.create(capsys.readouterr().out)
    assert (printed.task.implementation, printed.task.name, dict(printed.task.kwargs)) == ("guess", "guess", {})
