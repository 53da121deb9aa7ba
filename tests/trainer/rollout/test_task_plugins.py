"""Task and reward-function plugins from outside `areal_adv/`: training, and errors naming the plugin."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import tiny_run  # noqa: E402
import torch

from areal_adv.api.cli_args import load_config
from areal_adv.api.config_checks import ConfigError
from areal_adv.trainer.rollout.reward_functions import RewardFunctionError
from areal_adv.trainer.rollout.tasks.runtime import TaskError
from areal_adv.trainer.run.loop import Trainer
from areal_adv.trainer.run.metrics import read_metrics
from areal_adv.utils.dynamic_import import PluginResolutionError

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "examples" / "custom_task"
TINY = [
    *tiny_run.TINY,
]
BAD = "plugins.bad_plugins"  # tests/trainer is on sys.path (tests/trainer/conftest.py)


def _trainer(tmp_path: Path, config: Path | None, *extra: str) -> Trainer:
    return Trainer(load_config(config, [*TINY, f"output.dir={tmp_path}", *extra]))


def test_single_turn_task_plugin_with_reward_plugin_trains_three_steps(tmp_path: Path) -> None:
    trainer = _trainer(
        tmp_path,
        EXAMPLES / "single_turn.yaml",
        "train.steps=3",
        "eval.every=null",
        "reward=[{implementation: examples.custom_task.rewards.brevity, weight: 0.5, kwargs: {max_chars: 1}}]",
    )
    result = trainer.run()
    rows = read_metrics(result.metrics_path)
    assert [r["step"] for r in rows] == [0, 1, 2]
    for r in rows:
        assert 0.0 <= r["reward/make_max_task"] <= 1.0 and -1.0 <= r["reward/brevity"] <= 0.0
    out = trainer.step(3)
    for rec in out.records:
        assert set(rec.rewards) == {"make_max_task", "brevity"}
        assert rec.reward == pytest.approx(rec.rewards["make_max_task"] + 0.5 * rec.rewards["brevity"])
        expected = 1.0 if rec.completion.strip() == rec.row["answer"] else 0.0
        assert rec.rewards["make_max_task"] == expected
    # several components: the batch carries each ([B, K], issue 15), the identity stage their weighted sum
    want = [[r.rewards["make_max_task"], r.rewards["brevity"]] for r in out.records]
    torch.testing.assert_close(out.batch["rewards"], torch.tensor(want, dtype=torch.float32))
    assert out.data["rewards"].tolist() == pytest.approx([r.reward for r in out.records])


def test_multi_turn_environment_plugin_trains_three_steps(tmp_path: Path) -> None:
    trainer = _trainer(
        tmp_path, EXAMPLES / "multi_turn.yaml", "train.steps=3", "eval.every=null", "rollout.prm.enabled=true"
    )
    trainer.run()
    out = trainer.step(3)
    assert max(len(r.turn_spans) for r in out.records) >= 2
    for rec in out.records:
        assert rec.reward in (0.0, 1.0) and rec.rewards == {"make_reach_task": rec.reward}
        for (_, end), (nxt, _) in zip(rec.turn_spans, rec.turn_spans[1:]):
            assert trainer.tokenizer.decode(rec.tokens[end:nxt]).split()[0] == "at"  # observation text, mask 0
            assert set(rec.loss_mask[end:nxt]) == {0} and set(rec.turn_ids[end:nxt]) == {-1}
        assert len(rec.observations) == len(rec.turn_spans) - 1  # no observation after the last turn
    assert "token_rewards" in out.batch


@pytest.mark.parametrize(
    "path,message",
    [
        ("examples.custom_task.tasks.no_such_factory", r"task\.implementation: cannot use .*has no attribute"),
        ("no_such_package.tasks.make", r"task\.implementation: cannot use 'no_such_package\.tasks\.make'"),
        (f"{BAD}.NOT_CALLABLE", r"task\.implementation: .*not callable"),
        (f"{BAD}.make_task_raises", r"task\.implementation: .*make_task_raises.*raised RuntimeError: factory failed"),
        (f"{BAD}.make_multi_turn_without_environment", r"is multi_turn but has no environment"),
    ],
)
def test_bad_task_plugins_fail_at_start_up_naming_the_path(tmp_path: Path, path: str, message: str) -> None:
    with pytest.raises((PluginResolutionError, TypeError), match=message):
        _trainer(tmp_path, None, f"task.implementation={path}")


def test_task_factory_kwargs_are_checked_against_its_signature(tmp_path: Path) -> None:
    with pytest.raises(PluginResolutionError, match=r"task\.implementation: cannot use .*make_max_task.*colour"):
        _trainer(tmp_path, EXAMPLES / "single_turn.yaml", "task.kwargs.colour=3")


def test_task_plugin_path_is_only_shape_checked_at_load_time() -> None:
    cfg = load_config(None, ["task.implementation=not_imported_at_load.mod.factory"])
    assert cfg.task.is_plugin and cfg.task.reward_name == "factory"
    with pytest.raises(ConfigError, match=r"task\.implementation: got 'chess'"):
        load_config(None, ["task.implementation=chess"])


@pytest.mark.parametrize(
    "factory,message",
    [
        ("make_nan_score_task", r"task '.*make_nan_score_task' score\(row, completion\), row 0 .*finite number"),
        ("make_bad_step_task", r"environment\.step\(action\), row 0 .*expected a StepResult"),
        ("make_int_prompt_task", r"prompt\(row\), row 0 .*expected a string or a list"),
    ],
)
def test_bad_task_results_name_the_task_method_and_row(tmp_path: Path, factory: str, message: str) -> None:
    """At the first step, or (a prompt, encoded by the context check before launch) at start-up."""
    with pytest.raises(TaskError, match=message):
        trainer = _trainer(tmp_path, None, f"task.implementation={BAD}.{factory}", "actor.max_new_tokens=2")
        trainer.step(0)


def test_task_without_generator_needs_data(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"data\.train: task .*make_no_prompt_source.* needs a prompt dataset"):
        _trainer(tmp_path, None, f"task.implementation={BAD}.make_no_prompt_source")


@pytest.mark.parametrize(
    "reward,message",
    [
        ("no_such_module.fn", r"reward\[0\] \(fn\): cannot use 'no_such_module\.fn'"),
        (f"{BAD}.reward_without_prompts", r"reward\[0\] \(reward_without_prompts\): .*prompts"),
        (f"{BAD}.NOT_CALLABLE", r"reward\[0\] \(NOT_CALLABLE\): .*not callable"),
    ],
)
def test_bad_reward_plugins_fail_at_start_up(tmp_path: Path, reward: str, message: str) -> None:
    with pytest.raises(PluginResolutionError, match=message):
        _trainer(tmp_path, None, f"reward=[{{implementation: {reward}}}]")


def test_reward_kwargs_are_checked_against_the_signature(tmp_path: Path) -> None:
    with pytest.raises(PluginResolutionError, match=r"reward\[0\] \(reward_with_scale\).*kwargs \['factor'\]"):
        _trainer(tmp_path, None, f"reward=[{{implementation: {BAD}.reward_with_scale, kwargs: {{factor: 2}}}}]")
    trainer = _trainer(
        tmp_path, None, f"reward=[{{implementation: {BAD}.reward_with_scale, kwargs: {{scale: 2.5}}, weight: 2}}]"
    )
    out = trainer.step(0)
    assert all(r.rewards["reward_with_scale"] == 2.5 for r in out.records)
    assert all(r.reward == pytest.approx(r.rewards["arith"] + 5.0) for r in out.records)


@pytest.mark.parametrize(
    "reward,message",
    [
        ("reward_wrong_length", r"reward\[0\] \(reward_wrong_length\) .*returned 7 values for 8 completions"),
        ("reward_nan_on_row_two", r"reward\[0\] \(reward_nan_on_row_two\) .*row 2 \(prompt '.*'\): got nan"),
        ("reward_raises", r"reward\[0\] \(reward_raises\) .*raised ZeroDivisionError: boom"),
    ],
)
def test_misbehaving_reward_functions_name_the_function_and_row(tmp_path: Path, reward: str, message: str) -> None:
    trainer = _trainer(tmp_path, None, f"reward=[{{implementation: {BAD}.{reward}}}]")
    with pytest.raises(RewardFunctionError, match=message):
        trainer.step(0)


def test_reward_function_receives_only_the_columns_it_names(tmp_path: Path) -> None:
    trainer = _trainer(tmp_path, None, f"reward=[{{implementation: {BAD}.reward_needs_column}}]")
    out = trainer.step(0)
    for rec in out.records:
        assert rec.rewards["reward_needs_column"] == rec.rewards["arith"]  # same rule as the task's own score


def test_reward_names_must_be_unique() -> None:
    with pytest.raises(ConfigError, match=r"reward\[1\]\.name: 'exact_answer' is already used"):
        load_config(None, ["reward=[{implementation: a.exact_answer}, {implementation: b.exact_answer}]"])
    with pytest.raises(ConfigError, match=r"reward\[0\]\.implementation: got 'x'"):
        load_config(None, ["reward=[{implementation: x}]"])


def test_samples_jsonl_rows_every_step(tmp_path: Path) -> None:
    trainer = _trainer(
        tmp_path, EXAMPLES / "multi_turn.yaml", "train.steps=2", "eval.every=null", "eval.samples_per_step=3"
    )
    trainer.run()
    rows = [json.loads(line) for line in (trainer.run_dir / "samples.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 0, 0, 1, 1, 1]
    for r in rows:
        assert r["split"] == "train" and r["prompt"].startswith("reach") and r["rewards"].keys() == {"make_reach_task"}
        assert r["turns"] and all("action" in t for t in r["turns"]) and r["turns"][-1]["observation"] is None
