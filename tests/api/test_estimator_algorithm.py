"""areal_adv.api.estimator_algorithm: the one rule for "the same run with another estimator"."""

from __future__ import annotations

from pathlib import Path

from areal_adv.api.cli_args import config_to_dict, load_config
from areal_adv.api.estimator_algorithm import ALGORITHM_KEYS, algorithm_of, apply_algorithm, source_file

ROOT = Path(__file__).resolve().parents[2]


def test_a_preset_gives_its_whole_actor_section_resolved():
    part = algorithm_of("opo")
    assert part.actor["ppo_n_minibatches"] == 1  # OPO's one update per batch is part of OPO
    assert part.actor["advantage"]["outcome_reward_shaping"]["implementation"] == "opo"
    assert part.actor["advantage"]["estimator"] == {"implementation": "reinforce_return", "kwargs": {}}
    assert part.estimator is None and part.critic == {} and part.rollout == {}
    assert algorithm_of("preset:opo") == part
    assert algorithm_of("ppo").critic == {"enabled": True, "value_eps_clip": 0.2}
    assert algorithm_of("remax").rollout == {"greedy_baseline": True}


def test_a_config_file_gives_only_its_algorithm_keys_and_what_its_batches_need():
    path = ROOT / "examples" / "guess_gvpo.yaml"
    part = algorithm_of(str(path))
    assert set(part.actor) <= set(ALGORITHM_KEYS) and "max_new_tokens" not in part.actor
    assert part.rollout == {"n_samples": 8, "prm": {"enabled": True}}
    assert part.task_kwargs == {"process_reward": "signed"}
    assert source_file(str(path)) == path


def test_a_stage_name_replaces_only_the_runs_estimator():
    run = config_to_dict(load_config("preset:maxrl"))
    out = apply_algorithm(run, algorithm_of("turn_gae"))
    assert out["actor"]["advantage"]["estimator"] == {"implementation": "turn_gae", "kwargs": {}}
    assert out["actor"]["advantage"]["outcome_reward_shaping"] == run["actor"]["advantage"]["outcome_reward_shaping"]
    assert source_file("turn_gae") is None


def test_applying_replaces_each_key_whole_and_leaves_the_run_alone():
    run = config_to_dict(load_config("preset:grpo"))
    before = config_to_dict(load_config("preset:grpo"))
    out = apply_algorithm(run, algorithm_of("rloo"))
    assert run == before
    assert out["actor"]["reward_norm"]["std_level"] is None and out["actor"]["reward_norm"]["mean_leave1out"]
    assert out["actor"]["eps_clip"] == run["actor"]["eps_clip"] and out["task"] == run["task"]
    critic = apply_algorithm(run, algorithm_of("ppo"))["critic"]
    assert critic["enabled"] is True and critic["lr"] == run["critic"]["lr"]
    load_config(out)  # a valid config
