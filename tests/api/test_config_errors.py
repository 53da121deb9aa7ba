"""Loading errors name the key (and the override), never a raw YAML or merge error (issue 14, class 2)."""

from __future__ import annotations

import warnings

import pytest

from areal_adv.api.cli_args import ConfigError, load_config
from areal_adv.api.train_args import ExperimentConfig, RolloutConfig, TrainConfig


@pytest.mark.parametrize(
    "override, needle",
    [
        ("actor.adv_norm=2", "actor.adv_norm: got 2 (int), expected a mapping of NormConfig fields or null"),
        ("actor.advantage=3", "actor.advantage: got 3 (int), expected a mapping of AdvantageConfig fields"),
        (
            "actor.advantage.estimator=[turn_gae]",
            "actor.advantage.estimator: got ['turn_gae'] (list), expected a mapping of StageSpec fields or null",
        ),
        (
            "actor.advantage.estimator.kwargs=[1,2]",
            "actor.advantage.estimator.kwargs: got [1, 2] (list), expected a mapping",
        ),
        ("actor.gae_lambda_kwargs=[1]", "actor.gae_lambda_kwargs: got [1] (list), expected a mapping"),
        ("actor.kl_ctl=[1", "override 'actor.kl_ctl=[1': the value '[1' of actor.kl_ctl is not valid YAML"),
        ("actor.kl_ctl={a", "override 'actor.kl_ctl={a': the value '{a' of actor.kl_ctl is not valid YAML"),
        ("actor.reward_norm.eps=abc", "actor.reward_norm.eps: got 'abc' (str), expected a float"),
        ("actor.kl_ctl=true", "actor.kl_ctl: got True (bool), expected a float"),
        ("train.steps=abc", "train.steps: got 'abc' (str), expected an int"),  # a / an
        ("actor.no_such_field=1", "actor.no_such_field"),
        # issue 10's lists of structured entries: the entry and the key inside it are named
        ("reward=[{implementation: a.b, kwargs: [1]}]", "reward[0].kwargs: got [1] (list), expected a mapping"),
        (
            "reward=[{implementation: a.b}, {implementation: c.d, weight: null}]",
            "reward[1].weight: got None (NoneType), expected a float",
        ),
        ("reward=[a.b]", "reward[0]: got 'a.b' (str), expected a mapping of RewardFunctionConfig fields"),
        (
            "reward=[{implementation: a.b, wieght: 2}]",
            "reward[0].wieght: unknown key 'wieght' in RewardFunctionConfig; did you mean 'weight'?",
        ),
        ("reward=3", "reward: got 3 (int), expected a list"),
        ("task.kwargs=[1]", "task.kwargs: got [1] (list), expected a mapping"),
        ("task=arith", "task: got 'arith' (str), expected a mapping of TaskConfig fields"),
        ("data.prompt_key=null", "data.prompt_key: got None (NoneType), expected a str"),
    ],
)
def test_override_errors_name_the_key_and_the_override(override, needle):
    with pytest.raises(ConfigError) as err:
        load_config(None, [override])
    message = str(err.value)
    key, _, detail = needle.partition(": ")
    if not key.startswith("override "):  # a merge error: "<key> (in override '<override>'): <detail>"
        assert message.startswith(f"{key} (in override {override!r}): "), message
    assert detail in message, message
    assert "Traceback" not in message and "\n" not in message


@pytest.mark.parametrize(
    "override, needle",
    [
        ("evall.every=2", "evall: unknown key 'evall' in ExperimentConfig; did you mean 'eval'?"),
        ("eval.evry=3", "eval.evry: unknown key 'evry' in EvalConfig; did you mean 'every'?"),
        ("train.stepz=3", "train.stepz: unknown key 'stepz' in TrainConfig; did you mean 'steps'?"),
        (
            "rollout.prm.advantage_shaping.mod=x",
            "rollout.prm.advantage_shaping.mod: unknown key 'mod' in AdvantageShapingConfig; did you mean 'mode'?",
        ),
        (
            "actor.advantage.estimator.kwargz={}",
            "actor.advantage.estimator.kwargz: unknown key 'kwargz' in StageSpec; did you mean 'kwargs'?",
        ),
        (
            "actor.adv_norm.mean_levl=group",  # below a node that is null until this override
            "actor.adv_norm.mean_levl: unknown key 'mean_levl' in NormConfig; did you mean 'mean_level' or 'mean_leave1out'?",
        ),
        (
            "reward=[{implementation: a.b}, {implementation: c.d, nme: x}]",
            "reward[1].nme: unknown key 'nme' in RewardFunctionConfig; did you mean 'name'?",
        ),
        ("xyz=1", "xyz: unknown key 'xyz' in ExperimentConfig (its keys: experiment_name, trial_name, seed, actor, "),
    ],
)
def test_unknown_keys_at_any_depth_get_our_own_did_you_mean(override, needle):
    """Whatever OmegaConf is installed (2.3 has no suggestion, 2.4 has its own): one suggestion, ours."""
    with pytest.raises(ConfigError) as err:
        load_config(None, [override])
    message = str(err.value)
    key, _, detail = needle.partition(": ")
    assert message.startswith(f"{key} (in override {override!r}): {detail}"), message
    assert message.lower().count("did you mean") == (0 if override == "xyz=1" else 1), message


def test_unknown_keys_in_a_file_and_in_checked_mappings_get_a_suggestion(tmp_path):
    path = tmp_path / "my_run.yaml"
    path.write_text("eval:\n  evry: 20\n")
    with pytest.raises(
        ConfigError,
        match=r"^eval\.evry \(in .*my_run\.yaml\): unknown key 'evry' in EvalConfig; "
        r"did you mean 'every'\?$",
    ):
        load_config(path)
    with pytest.raises(
        ConfigError,
        match=r"task\.kwargs: unknown keys \['max_operan'\] for task 'arith', .*; did you "
        r"mean 'max_operand' for 'max_operan'\?$",
    ):
        load_config(None, ["task.kwargs.max_operan=3"])
    with pytest.raises(
        ConfigError,
        match=r"unknown gvpo parameters \['negative_scal'\], .*; did you mean "
        r"'negative_scale' for 'negative_scal'\?$",
    ):
        load_config(None, ["actor.advantage.process_adv_shaping={implementation: gvpo, kwargs: {negative_scal: 1}}"])


def test_merge_errors_in_a_file_name_the_key_and_the_file(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("actor:\n  advantage:\n    outcome_reward_shaping:\n      kwargs: [1, 2]\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    message = str(err.value)
    assert message.startswith("actor.advantage.outcome_reward_shaping.kwargs (in "), message
    assert str(path) in message and "got [1, 2] (list), expected a mapping" in message


def test_a_bare_string_stage_is_valid_and_a_list_is_not():
    assert (
        load_config(None, ["actor.advantage.estimator=turn_gae"]).actor.advantage.estimator.implementation == "turn_gae"
    )


def test_a_good_override_after_a_bad_one_is_not_blamed():
    with pytest.raises(ConfigError, match=r"^actor\.adv_norm \(in override 'actor\.adv_norm=2'\): got 2 "):
        load_config(None, ["actor.kl_ctl=0.2", "actor.adv_norm=2", "actor.discount=0.9"])


@pytest.mark.parametrize(
    "section, kwargs, field",
    [
        (TrainConfig, {"lr": float("inf")}, "train.lr"),
        (TrainConfig, {"dist_timeout_s": float("inf")}, "train.dist_timeout_s"),
        (TrainConfig, {"grad_clip": float("inf")}, "train.grad_clip"),
        (RolloutConfig, {"temperature": float("inf")}, "rollout.temperature"),
    ],
)
def test_infinite_trainer_numbers_are_rejected(section, kwargs, field):
    with pytest.raises(ConfigError, match=rf"^{field.replace('.', r'[.]')}: got inf, expected a finite number"):
        section(**kwargs)


def test_one_sample_per_prompt_with_group_centering_warns():
    with pytest.warns(UserWarning, match=r"rollout\.n_samples=1 with actor\.reward_norm\.mean_level='group'"):
        load_config(None, ["rollout.n_samples=1", "actor.reward_norm.mean_level=group"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_config(None, ["rollout.n_samples=1"])  # no group normalisation: nothing to warn about
        ExperimentConfig()


def test_a_bad_reward_entry_in_a_file_names_the_entry_and_the_file(tmp_path):
    path = tmp_path / "rewards.yaml"
    path.write_text("reward:\n  - {implementation: a.b}\n  - {implementation: c.d, kwargs: [1]}\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    message = str(err.value)
    assert message.startswith("reward[1].kwargs (in "), message
    assert str(path) in message and "got [1] (list), expected a mapping" in message


def test_a_relative_path_that_does_not_exist_names_the_folder_it_was_resolved_in(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    where = f"(relative to {tmp_path})"
    cases = [
        ("nope.yaml", [], f"config file 'nope.yaml' {where} does not exist"),
        (None, ["model.path=models/mine"], f"model.path: 'models/mine' {where} is not a local directory"),
        (None, ["data.eval=data/test.jsonl"], f"data.eval: 'data/test.jsonl' {where} does not exist"),
        (
            None,
            ["diagnostics.estimators=[algo/mine.yaml]"],
            f"diagnostics.estimators[0]: 'algo/mine.yaml' {where} is not a file",
        ),
    ]
    for config, overrides, needle in cases:
        with pytest.raises(ConfigError) as caught:
            load_config(config, overrides)
        assert needle in str(caught.value), (needle, str(caught.value))
    with pytest.raises(ConfigError) as caught:  # an absolute path is shown as it is
        load_config(None, [f"model.path={tmp_path / 'models/mine'}"])
    assert f"model.path: '{tmp_path / 'models/mine'}' is not a local directory" in str(caught.value)


def test_an_unknown_shadow_estimator_gets_a_suggestion() -> None:
    with pytest.raises(ConfigError, match=r"diagnostics\.estimators\[0\]: got 'rlooo', .*; did you mean 'rloo'\?$"):
        load_config("preset:grpo_arith", ["diagnostics.estimators=[rlooo]"])
