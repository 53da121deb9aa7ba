"""`areal-adv validate --dry-run`: every configured stage runs once on a synthetic batch of the config's layout."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from areal_adv.api.cli_args import load_config
from areal_adv.cli import main
from areal_adv.trainer.run.dry_run import synthetic_batch

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = sorted(p for p in (ROOT / "examples").rglob("*.yaml"))
GRPO = str(ROOT / "examples/grpo_arith.yaml")


@pytest.mark.parametrize("path", EXAMPLES, ids=[str(p.relative_to(ROOT / "examples")) for p in EXAMPLES])
def test_every_example_config_passes_the_dry_run(path, capsys):
    assert main(["validate", str(path), "--dry-run"]) == 0, capsys.readouterr().err
    assert "dry run OK: every configured stage ran on a synthetic batch" in capsys.readouterr().out


@pytest.mark.parametrize(
    "overrides, stage, needle",
    [
        (
            ["actor.advantage.outcome_reward_shaping.implementation=dry_run_plugins.outcome_wrong_shape"],
            "outcome_reward_shaping",
            "rewards: returned shape",
        ),
        (
            ["actor.advantage.estimator.implementation=dry_run_plugins.estimator_int_dtype"],
            "estimator",
            "advantages: returned dtype torch.int64, expected a floating dtype",
        ),
        (
            ["actor.advantage.process_adv_shaping.implementation=dry_run_plugins.process_wrong_shape"],
            "process_adv_shaping",
            "advantages: returned shape",
        ),
        (
            [
                "actor.advantage.compute.implementation=dry_run_plugins.replacement_float_truncation",
                "actor.reward_norm=null",
            ],
            "compute",
            "extras['is_truncated']: returned dtype torch.float32, expected torch.bool",
        ),
    ],
    ids=["outcome-shape", "estimator-dtype", "process-shape", "replacement-truncation-dtype"],
)
def test_a_plugin_breaking_its_contract_is_reported_before_launch(overrides, stage, needle, capsys):
    assert main(["validate", GRPO, *overrides]) == 0  # it resolves: without the dry run the config looks fine
    assert "config OK" in capsys.readouterr().out
    assert main(["validate", GRPO, "--dry-run", *overrides]) == 1
    err = capsys.readouterr().err
    path = overrides[0].split("=", 1)[1]
    assert (
        err.startswith("error: dry run on a synthetic batch: ")
        and f"'{stage}'" in err
        and path in err
        and needle in err
    )


def test_the_dry_run_batch_follows_the_config_layout():
    split = load_config(ROOT / "examples/guess_split_rollouts.yaml")
    batch, meta = synthetic_batch(split)
    assert meta.rollout_groups is not None and all(g is not None and g.rewards is not None for g in meta.rollout_groups)
    assert int(batch["turn_ids"].max()) == 0  # one generated turn per exported row
    multi = load_config(ROOT / "examples/ppo_turn_gae_guess.yaml")
    batch, meta = synthetic_batch(multi)
    assert int(batch["turn_ids"].max()) >= 1 and "values" in batch and meta.rollout_groups is None
    prm = load_config(ROOT / "examples/guess_process_weighted.yaml")
    batch, _ = synthetic_batch(prm)
    active = batch["loss_mask"].bool()
    assert ((batch["token_rewards"][active] >= 0) & (batch["token_rewards"][active] <= 1)).all()
    remax = load_config(ROOT / "examples/presets/remax.yaml")
    assert "reward_baselines" in synthetic_batch(remax)[0]
    recompute = load_config(None, ["actor.recompute_logprob=true", "actor.kl_ctl=0"])
    batch, _ = synthetic_batch(recompute)
    assert "prox_logp" in batch and "ref_logp" not in batch
    assert batch["is_truncated"].dtype == torch.bool and batch["is_truncated"].shape == batch["rewards"].shape


@pytest.mark.parametrize(
    "config, overrides, layout",
    [
        (
            "guess_split_rollouts.yaml",
            [
                "rollout.explicit_rollout_rewards=false",
                "actor.advantage.outcome_reward_shaping.implementation=dry_run_plugins.needs_split_rollouts",
            ],
            "split rollouts",
        ),
        (
            "grpo_arith.yaml",
            ["actor.advantage.process_adv_shaping.implementation=dry_run_plugins.needs_process_rewards"],
            "process rewards",
        ),
    ],
    ids=["split-rollouts", "process-rewards"],
)
def test_plugins_see_the_layout_they_are_configured_for(config, overrides, layout, capsys):
    assert main(["validate", str(ROOT / "examples" / config), "--dry-run", *overrides]) == 0, capsys.readouterr().err
    assert layout in capsys.readouterr().out


def test_the_dry_run_catches_a_missing_shaped_reference(capsys):
    """Explicit references need shaped ones from a custom outcome stage: found before launch."""
    overrides = ["actor.advantage.outcome_reward_shaping.implementation=dry_run_plugins.needs_split_rollouts"]
    path = str(ROOT / "examples/guess_split_rollouts.yaml")
    assert main(["validate", path, *overrides]) == 0
    assert main(["validate", path, "--dry-run", *overrides]) == 1
    assert "must return OutcomeResult.normalization_rewards" in capsys.readouterr().err


def test_the_dry_run_takes_the_turn_count_from_the_task():
    """A single-turn task gets one generated turn per row; a multi-turn task plugin gets several."""
    single = load_config(ROOT / "examples/custom_task/single_turn.yaml")
    assert int(synthetic_batch(single)[0]["turn_ids"].max()) == 0
    multi = load_config(ROOT / "examples/custom_task/multi_turn.yaml")
    assert int(synthetic_batch(multi)[0]["turn_ids"].max()) >= 1


# --- the rewards: every reward function and the task's scorer on two real rows -----------------------------

DATASET = str(ROOT / "examples/custom_task/dataset.yaml")


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize(
    "plugin, needle",
    [
        ("reward_raises", "raised ZeroDivisionError: a bug in the reward function"),
        ("reward_one_value_short", "returned 3 values for 4 completions"),
        ("reward_nan", "row 0 (prompt '3 + 3 =', completion '0'): got nan, expected a finite number"),
    ],
    ids=["raises", "wrong-length", "nan"],
)
def test_the_dry_run_calls_every_reward_function_on_two_rows_of_the_data(plugin, needle, capsys):
    override = f"reward=[{{implementation: dry_run_plugins.{plugin}, weight: 1.0}}]"
    assert main(["validate", DATASET, override]) == 0  # it resolves: without the dry run the config looks fine
    capsys.readouterr()
    assert main(["validate", DATASET, override, "--dry-run"]) == 1
    line = _one_error_line(capsys)
    assert line.startswith(
        f"error: dry run of the rewards on 2 rows of data.train: reward[0] ({plugin}) 'dry_run_plugins.{plugin}': "
    ), line
    assert needle in line


def test_the_reward_dry_run_reports_what_it_scored(capsys):
    assert main(["validate", DATASET, "--dry-run"]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert (
        "rewards OK: exact_answer scored 2 rows of data.train with dummy completions ['0', 'a short dummy "
        "completion', '', '<2 tokens: the longest completion, actor.max_new_tokens=2>']"
    ) in out
    assert main(["validate", str(ROOT / "examples/grpo_arith.yaml"), "--dry-run"]) == 0
    assert "rewards OK: arith scored 2 problems generated by task 'arith'" in capsys.readouterr().out


def test_the_dry_run_scores_as_a_training_step_does():
    """The same components, values and row order as `RewardSet.score` inside a rollout."""
    from areal_adv.trainer.run.dry_run import DUMMY_COMPLETIONS, dry_run_rewards, reward_rows
    from areal_adv.trainer.run.preflight import preflight_runtime
    from areal_adv.trainer.run.task_setup import resolve_task_parts

    cfg = load_config(
        DATASET,
        [
            "reward=[{implementation: dry_run_plugins.reward_answer_or_default}, "
            "{implementation: examples.custom_task.rewards.brevity, kwargs: {max_chars: 1}}]"
        ],
    )
    parts = resolve_task_parts(cfg)
    runtime = preflight_runtime(cfg, parts)
    rows, source = reward_rows(cfg, parts)
    assert source == "2 rows of data.train" and rows == [
        {"prompt": "3 + 3 =", "answer": "6"},
        {"prompt": "0 + 2 =", "answer": "2"},
    ]
    report = dry_run_rewards(runtime, rows, cfg.generation_budget)
    assert report.components == ("reward_answer_or_default", "brevity")
    assert report.completions[:-1] == DUMMY_COMPLETIONS  # the byte-level tokenizer round-trips any text
    assert report.completions[-1] == "<2 tokens: the longest completion, the generation budget>"


def test_the_dry_run_scores_an_empty_completion_and_one_at_the_budget():
    import dry_run_plugins

    from areal_adv.trainer.run.dry_run import DUMMY_COMPLETIONS

    dry_run_plugins.SEEN_LENGTHS.clear()
    override = "reward=[{implementation: dry_run_plugins.reward_records_lengths}]"
    assert main(["validate", DATASET, override, "actor.max_new_tokens=40", "--dry-run"]) == 0
    [lengths] = dry_run_plugins.SEEN_LENGTHS
    assert lengths == [len(DUMMY_COMPLETIONS[0]), len(DUMMY_COMPLETIONS[1]), 0, 40]  # byte-level: 1 token a byte


@pytest.mark.parametrize(
    "plugin, overrides, needle",
    [
        ("reward_nan_when_empty", [], "row 2 (prompt '3 + 3 =', completion ''): got nan, expected a finite number"),
        (
            "reward_raises_when_long",
            ["reward.0.kwargs.max_chars=30", "actor.max_new_tokens=40"],
            "raised ValueError: no closing tag in 40 characters (on 4 completions; columns passed: ['answer', "
            "'completion_ids']); first failing row: 3 (prompt '0 + 2 =', completion ' a short dummy completion a short dummy ')",
        ),
    ],
    ids=["nan-on-empty", "raises-at-budget"],
)
def test_a_reward_failing_only_on_an_empty_or_a_budget_long_completion_fails_the_dry_run(
    plugin, overrides, needle, capsys
):
    override = f"reward=[{{implementation: dry_run_plugins.{plugin}, weight: 1.0}}]"
    assert main(["validate", DATASET, override, *overrides, "--dry-run"]) == 1
    line = _one_error_line(capsys)
    assert line.startswith("error: dry run of the rewards on 2 rows of data.train: "), line
    assert needle in line, line


def test_a_reward_function_naming_a_missing_column_is_rejected_before_launch(capsys):
    override = "reward=[{implementation: dry_run_plugins.reward_needs_solution}]"
    for extra in ([], ["--dry-run"]):
        assert main(["validate", DATASET, override, *extra]) == 1
        line = _one_error_line(capsys)
        assert line == (
            "error: reward[0] (reward_needs_solution) 'dry_run_plugins.reward_needs_solution': its "
            "parameter ['solution'] is not a column of data.train (columns: ['answer']; the prompt "
            "column is passed as prompts); rename the parameter, give it a default, or take **kwargs"
        )
    ok = "reward=[{implementation: dry_run_plugins.reward_answer_or_default}]"  # `solution=None`: not required
    assert main(["validate", DATASET, ok, "--dry-run"]) == 0, capsys.readouterr().err


@pytest.mark.parametrize(
    "overrides, expected",
    [
        (
            ["actor.max_new_tokens=200"],
            "error: actor.max_new_tokens: data.train row 0 (prompt '3 + 3 ='): a context of 8 tokens plus 200 to "
            "generate exceeds the model's max_position_embeddings=128; lower actor.max_new_tokens to at most 120 or "
            "shorten the prompts, or raise model.max_position_embeddings",
        ),
        (
            ["actor.max_new_tokens=200", "rollout.max_new_tokens=125", "model.max_position_embeddings=130"],
            "error: rollout.max_new_tokens: data.train row 0 (prompt '3 + 3 ='): a context of 8 tokens plus 125 to "
            "generate exceeds the model's max_position_embeddings=130; lower rollout.max_new_tokens to at most 122 "
            "or shorten the prompts, or raise model.max_position_embeddings",
        ),
    ],
    ids=["actor-budget", "rollout-budget"],
)
def test_a_context_overflow_is_rejected_before_launch(overrides, expected, capsys):
    assert main(["validate", DATASET, *overrides, "--dry-run"]) == 1
    assert _one_error_line(capsys) == expected


def test_the_context_check_covers_generated_problems_and_the_turn_cap(capsys):
    """arith generates its problems and caps a turn at 1 token: the cap, not max_new_tokens, is what must fit."""
    grpo = str(ROOT / "examples/grpo_arith.yaml")
    assert main(["validate", grpo, "actor.max_new_tokens=1000", "--dry-run"]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out  # one number on both lines: the turn cap, which bounds a single-turn completion
    assert "plus 1 to generate (task 'arith' caps a turn at 1) fits max_position_embeddings=128" in out
    assert "<1 token: the longest completion, task 'arith' caps a turn at 1>" in out
    assert main(["validate", grpo, "model.max_position_embeddings=5"]) == 1
    line = _one_error_line(capsys)
    assert line.startswith("error: actor.max_new_tokens: the task's generated problems row ")
    assert line.endswith(
        "a context of 5 tokens plus 1 to generate exceeds the model's max_position_embeddings=5; "
        "the prompt alone fills the context, so shorten the prompts, or raise "
        "model.max_position_embeddings"
    )


def test_the_trainer_stops_at_start_with_the_line_validate_prints(tmp_path, capsys):
    """The same check runs in the trainer before step 0 (no model step, no evaluation)."""
    from areal_adv.trainer.main import main as train

    overrides = ["actor.max_new_tokens=200", f"output.dir={tmp_path}", "output.progress_bar=false"]
    assert main(["validate", DATASET, *overrides]) == 1
    message = _one_error_line(capsys).removeprefix("error: ")
    assert train(["--config", DATASET, *overrides]) == 1
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1].endswith(message), err
    assert all(not p.read_text() for p in tmp_path.rglob("metrics.jsonl"))  # no step ran


def test_an_error_is_one_line_even_when_the_exception_spans_several(capsys):
    assert (
        main(["validate", DATASET, "reward=[{implementation: dry_run_plugins.reward_multiline_error}]", "--dry-run"])
        == 1
    )
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "raised ValueError: first line second line" in err, err
