"""OmegaConf DictConfig / ListConfig objects are accepted wherever a mapping or list is (issue 14, class 8)."""

from __future__ import annotations

import json

import pytest
from omegaconf import OmegaConf

from areal_adv.api.cli_args import AdvantageConfig, ConfigError, NormConfig, PPOActorConfig, StageSpec, config_to_dict
from areal_adv.api.config_values import plain
from areal_adv.trainer.ppo.actor import PPOActor


def test_plain_turns_omegaconf_containers_into_dicts_and_lists():
    value = OmegaConf.create({"a": [1, {"b": 2}], "c": "${a}"})
    assert plain(value) == {"a": [1, {"b": 2}], "c": [1, {"b": 2}]}  # interpolations resolved
    assert type(plain(value)["a"]) is list and plain((1, 2)) == (1, 2) and plain("s") == "s"


def test_dictconfig_everywhere_a_mapping_is_accepted():
    cfg = PPOActorConfig(
        reward_norm=OmegaConf.create({"mean_level": "group", "std_level": "group"}),
        adv_norm=OmegaConf.create({}),
        gae_lambda="vapo",
        gae_lambda_kwargs=OmegaConf.create({"alpha": 0.5}),
        advantage=OmegaConf.create(
            {
                "outcome_reward_shaping": {
                    "implementation": "examples.custom_advantage.plugins.scale_outcome",
                    "kwargs": {"factor": 0.5},
                },
                "estimator": {"implementation": "turn_gae", "kwargs": {}},
                "process_adv_shaping": {"implementation": "gvpo", "kwargs": OmegaConf.create({"negative_scale": 0.3})},
            }
        ),
    )
    plain_cfg = PPOActorConfig(
        reward_norm=NormConfig(mean_level="group", std_level="group"),
        adv_norm=NormConfig(),
        gae_lambda="vapo",
        gae_lambda_kwargs={"alpha": 0.5},
        advantage=AdvantageConfig(
            outcome_reward_shaping=StageSpec("examples.custom_advantage.plugins.scale_outcome", {"factor": 0.5}),
            estimator=StageSpec("turn_gae"),
            process_adv_shaping=StageSpec("gvpo", {"negative_scale": 0.3}),
        ),
    )
    assert cfg == plain_cfg
    assert type(cfg.gae_lambda_kwargs) is dict and type(cfg.advantage.process_adv_shaping.kwargs) is dict
    json.dumps(config_to_dict(cfg))  # still serialisable for shipping to workers
    PPOActor(cfg)  # and resolvable


def test_stage_spec_kwargs_and_nested_lists_from_omegaconf():
    spec = StageSpec("pkg.fn", OmegaConf.create({"weights": [1, 2], "inner": {"x": [0.5]}}))
    AdvantageConfig(estimator=spec)
    assert spec.kwargs == {"weights": [1, 2], "inner": {"x": [0.5]}} and type(spec.kwargs["weights"]) is list
    stage = AdvantageConfig(estimator=OmegaConf.create({"implementation": "token_gae"})).estimator
    assert stage == StageSpec("token_gae", {})


@pytest.mark.parametrize(
    "kwargs, needle",
    [
        (dict(adv_norm=OmegaConf.create({"bogus": 1})), r"actor\.adv_norm: unknown keys \['bogus'\]"),
        (
            dict(advantage=OmegaConf.create({"estimator": {"implementation": "turn_gae", "extra": 1}})),
            r"actor\.advantage\.estimator: unknown keys \['extra'\]",
        ),
        (
            dict(advantage=OmegaConf.create({"estimator": {"implementation": "turn_gae", "kwargs": [1, 2]}})),
            r"actor\.advantage\.estimator\.kwargs: got \[1, 2\] \(list\), expected a mapping",
        ),
        (
            dict(gae_lambda="vapo", gae_lambda_kwargs=OmegaConf.create({"alpha": float("nan")})),
            r"actor\.gae_lambda_kwargs\.alpha: got nan",
        ),
    ],
)
def test_bad_omegaconf_values_name_the_field(kwargs, needle):
    with pytest.raises(ConfigError, match=needle):
        PPOActorConfig(**kwargs)
