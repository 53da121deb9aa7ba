"""An estimator's algorithm part: the config sections that make one run differ from another only in its estimator.

Three features put "another estimator" on a run: shadow estimators
(`diagnostics.estimators`, actor keys only: they never train), races
(`areal-adv race`, whole runs: a critic or process rewards too) and the
benchmark suite (`bench/suite/suite_definitions.py`). They share this one rule, so an
estimator means the same thing in each:

- a preset (`grpo`, `preset:maxrl`; `areal-adv presets`) gives every key of
  its own `actor:` section (a preset sets the algorithm and nothing else: OPO's
  and GPG's one update per batch, `ppo_n_minibatches: 1`, is part of theirs); a
  config file (`*.yaml`, named by its path, usually a whole run) gives the keys
  of `ALGORITHM_KEYS` that its `actor:` section sets. Each value is resolved in
  full and replaces the run's value whole, so no sub-field of the run leaks
  into the estimator. Either also gives the keys of its `critic:` section, the
  `ROLLOUT_KEYS` it sets, `rollout.prm.enabled` when it turns process rewards
  on, and the task's `process_reward` kwarg when its task names one;
- any other name is a built-in estimator stage (`actor.advantage.estimator`),
  put in the run's `advantage` section in place of its estimator.

Everything else (task, model, batch, learning rate, schedule, PPO clip and
minibatches) stays the run's.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from areal_adv.api.cli_args import config_to_dict, load_config
from areal_adv.api.presets import PREFIX, PRESET_DIR, preset_names, preset_path
from areal_adv.api.train_args import ExperimentConfig, is_config_file

__all__ = [
    "ALGORITHM_KEYS",
    "ROLLOUT_KEYS",
    "Algorithm",
    "algorithm_of",
    "apply_algorithm",
    "resolved_config",
    "source_file",
]

#: The actor keys that make up an estimator's algorithm (the rest, e.g. the PPO clip and minibatches, is the update).
ALGORITHM_KEYS = (
    "kl_ctl",
    "kl_estimator",
    "discount",
    "gae_lambda",
    "gae_timestep_unit",
    "reward_norm",
    "adv_norm",
    "advantage",
    "token_rewards_as_adv",
    "mask_no_eos_with_zero",
    "reward_clip",
)
#: The rollout keys an estimator may set: how many samples its groups need, a greedy baseline it reads, and
#: whether groups whose advantages are all zero are dropped before the update.
ROLLOUT_KEYS = ("n_samples", "greedy_baseline", "filter_zero_advantage")


@dataclass(frozen=True)
class Algorithm:
    """The sections an estimator sets (each value resolved in full), or the built-in stage it names.

    `estimator` is set only for a built-in stage name: then the run keeps its
    whole actor section and only `actor.advantage.estimator` changes.
    """

    actor: dict[str, Any] = field(default_factory=dict)
    critic: dict[str, Any] = field(default_factory=dict)
    rollout: dict[str, Any] = field(default_factory=dict)
    task_kwargs: dict[str, Any] = field(default_factory=dict)
    estimator: str | None = None


def source_file(name: str) -> Path | None:
    """The file whose algorithm `name` names (a preset's, or a `*.yaml` path), or None for a built-in stage name."""
    bare = name[len(PREFIX) :] if name.startswith(PREFIX) else name
    if bare in preset_names():
        return preset_path(bare)
    if is_config_file(name):
        return Path(name).resolve()
    return None


@functools.cache
def resolved_config(path: Path) -> ExperimentConfig:
    """The file's config resolved with its defaults, loaded once per process (callers only read it)."""
    return load_config(path)


@functools.cache
def _read(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the file's own YAML, the file's config resolved with its defaults, as plain dicts)."""
    raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    return raw, config_to_dict(resolved_config(path))


def algorithm_of(name: str) -> Algorithm:
    """The algorithm part of a preset, config file or built-in estimator name (the module docstring's rule)."""
    path = source_file(name)
    if path is None:
        return Algorithm(estimator=name)
    raw, resolved = _read(path)
    own_actor = raw.get("actor") or {}
    keys = list(own_actor) if path.parent == PRESET_DIR else [k for k in ALGORITHM_KEYS if k in own_actor]
    own_rollout = raw.get("rollout") or {}
    rollout = {key: resolved["rollout"][key] for key in ROLLOUT_KEYS if key in own_rollout}
    if (own_rollout.get("prm") or {}).get("enabled"):
        rollout["prm"] = {"enabled": True}
    process = ((raw.get("task") or {}).get("kwargs") or {}).get("process_reward")
    return Algorithm(
        actor=copy.deepcopy({key: resolved["actor"][key] for key in keys}),
        critic=copy.deepcopy({key: resolved["critic"][key] for key in (raw.get("critic") or {})}),
        rollout=rollout,
        task_kwargs={"process_reward": process} if process else {},
    )


def apply_algorithm(run: Mapping[str, Any], algorithm: Algorithm) -> dict[str, Any]:
    """A copy of the run's config mapping with the algorithm put on (`run` itself is not changed).

    `run` is a config as `load_config` accepts it (a resolved config's
    `config_to_dict` is one); sections the algorithm sets are merged key by key,
    each key replaced whole.
    """
    out = copy.deepcopy(dict(run))
    actor = out.setdefault("actor", {})
    if algorithm.estimator is not None:
        advantage = dict(actor.get("advantage") or {})
        advantage["estimator"] = {"implementation": algorithm.estimator, "kwargs": {}}
        actor["advantage"] = advantage
        return out
    for section, values in (("actor", algorithm.actor), ("critic", algorithm.critic)):
        out.setdefault(section, {}).update(copy.deepcopy(values))
    rollout = out.setdefault("rollout", {})
    for key, value in algorithm.rollout.items():
        if key == "prm":
            rollout["prm"] = {**(rollout.get("prm") or {}), **value}
        else:
            rollout[key] = value
    if algorithm.task_kwargs:
        task = out.setdefault("task", {})
        task["kwargs"] = {**(task.get("kwargs") or {}), **copy.deepcopy(algorithm.task_kwargs)}
    return out
