"""PPOActorConfig's construction-time warning for group centering of one-member groups (issue 21, item 7)."""

from __future__ import annotations

import dataclasses
import warnings

import pytest
from omegaconf import OmegaConf

from areal_adv.api.cli_args import NormConfig, PPOActorConfig, actor_config_from_dict, config_to_dict, load_config


@pytest.mark.parametrize(
    "reward_norm",
    [
        NormConfig(mean_level="group", std_level="group", group_size=1),
        {"mean_level": "group", "std_level": "group", "group_size": 1},
        OmegaConf.create({"mean_level": "group", "std_level": "group", "group_size": 1}),
    ],
    ids=["norm-config", "dict", "dict-config"],
)
def test_singleton_group_centering_warns_at_construction_in_areal_words(reward_norm):
    """AReaL's upstream test (tests/test_adv_norm_config.py): every config shape warns when it is built."""
    with pytest.warns(UserWarning, match="singleton group centering erases the task reward") as caught:
        PPOActorConfig(reward_norm=reward_norm)
    assert "actor.reward_norm: mean_level='group' with group_size=1" in str(caught[0].message)
    assert caught[0].filename == __file__  # points at the caller's line


@pytest.mark.parametrize(
    "reward_norm",
    [
        None,
        NormConfig(mean_level=None, std_level="group", group_size=1),
        NormConfig(mean_level="group", std_level="group", group_size=2),
        NormConfig(mean_level="batch", std_level="batch", group_size=1),
        NormConfig(mean_level="group", std_level="group"),  # group_size not chosen: groups come from the metadata
        {"mean_level": "group", "std_level": "group"},  # AReaL reads the mapping's key
    ],
    ids=["none", "no-centering", "pairs", "batch", "default-size", "dict-without-size"],
)
def test_no_construction_warning_without_a_chosen_singleton_group(reward_norm):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        PPOActorConfig(reward_norm=reward_norm)
        PPOActorConfig(adv_norm=NormConfig(mean_level="group", group_size=1))  # AReaL checks reward_norm only


def test_loaded_and_copied_configs_do_not_warn_again():
    """A loaded YAML or a worker's copy that leaves group_size unset (null) does not warn: the groups come from the
    batch metadata, and the trainer's rollout.n_samples check and the call-time warning cover singleton groups."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cfg = load_config(None, ["actor.reward_norm.mean_level=group"])
        assert cfg.actor.reward_norm.group_size is None and cfg.actor.reward_norm.fallback_group_size == 1
        actor_config_from_dict(config_to_dict(cfg.actor))
        copy = dataclasses.replace(cfg.actor.reward_norm, eps=1e-3)
        assert copy == NormConfig(mean_level="group", std_level="batch", eps=1e-3)


def test_a_loaded_yaml_that_chooses_singleton_groups_warns():
    """group_size: 1 written in the YAML is a choice, so the loaded config warns as AReaL's constructor does."""
    with pytest.warns(UserWarning, match="singleton group centering erases the task reward"):
        load_config(None, ["actor.reward_norm.mean_level=group", "actor.reward_norm.group_size=1"])
