"""The tasks and estimators of bench/estimator_suite.py, and the config of one run.

A task is a base run (the tiny random-init model, a task plugin from
bench/suite_tasks.py, batch, learning rate, updates, evaluation) with the
reason estimators should differ on it and the estimators compared there. An
estimator is the algorithm part of its preset or example file, read from that
file so the suite runs exactly what the presets ship.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

# the actor keys that define an estimator's algorithm: the package's list, the one its shadow estimators use
from areal_adv.trainer.diagnostics.shadow_estimators import ALGORITHM_KEYS

ROOT = Path(__file__).resolve().parents[1]
PRESETS, EXAMPLES = ROOT / "areal_adv" / "presets", ROOT / "examples"
ROLLOUT_KEYS = ("n_samples", "greedy_baseline")


@dataclass(frozen=True)
class SuiteTask:
    """One task: why estimators should differ on it, its base run, and the estimators compared (GRPO first)."""

    reason: str
    situation: str  # the decision table's left column
    task: dict[str, Any]
    max_new_tokens: int
    steps: int
    eval_every: int
    estimators: tuple[str, ...]
    reward: tuple[dict[str, Any], ...] = ()
    success_threshold: float = 1.0


TASKS: dict[str, SuiteTask] = {
    "sparse": SuiteTask(
        reason="chance success is a few percent, so most groups of 8 are all-zero and get no group-relative "
        "signal; the estimators differ in how hard they push the rare success (GRPO's 1/std, RLOO's "
        "leave-one-out, pass@k's best-only, MaxRL's 1/p, batch whitening that also pushes failures down)",
        situation="sparse binary reward, most groups all-zero",
        task={"implementation": "bench.suite_tasks.make_reverse", "kwargs": {"length": 2}},
        max_new_tokens=2,
        steps=100,
        eval_every=10,
        estimators=(
            "grpo",
            "dr_grpo",
            "rloo",
            "reinforce_plus_plus",
            "reinforce_plus_plus_baseline",
            "grpo_passk",
            "gpg",
            "maxrl",
        ),
    ),
    "lengths": SuiteTask(
        reason="right answers are 1 or 3 words long in the same batch; a token-mean loss gives a long answer "
        "three times the weight of a short one, and the estimators scale and baseline each group "
        "differently (std or not, OPO's length-weighted baseline)",
        situation="right answers of very different lengths",
        task={"implementation": "bench.suite_tasks.make_repeat", "kwargs": {"counts": [1, 3]}},
        max_new_tokens=3,
        steps=150,
        eval_every=10,
        estimators=("grpo", "dr_grpo", "rloo", "opo", "reinforce_plus_plus_baseline", "gpg"),
    ),
    "multiturn": SuiteTask(
        reason="four one-word turns, two decisive at random positions, reward only after the last: "
        "trajectory-level credit blames right and free turns of a failed episode alike, turn-level "
        "credit (a critic over turns, GiGPO's anchor states, MT-GRPO's turn rewards) need not",
        situation="multi-turn, reward only at the end, some turns decisive",
        task={"implementation": "bench.suite_tasks.make_echo", "kwargs": {"turns": 4, "decisive": 2}},
        max_new_tokens=4,
        steps=40,
        eval_every=4,
        estimators=("grpo", "rloo", "turn_gae", "gigpo", "mt_grpo", "ppo"),
    ),
    "noisy_process": SuiteTask(
        reason="the same multi-turn task with a per-turn process score that is wrong 30 % of the time: "
        "shaping that trusts it (additive, GVPO, process-weighted, MT-GRPO's turn rewards) gains "
        "dense credit but inherits the noise; outcome-only estimators ignore it",
        situation="noisy per-turn process rewards",
        task={"implementation": "bench.suite_tasks.make_echo", "kwargs": {"turns": 4, "decisive": 2, "noise": 0.3}},
        max_new_tokens=4,
        steps=40,
        eval_every=4,
        estimators=("grpo", "rloo", "grpo_prm_additive", "gvpo", "process_weighted", "mt_grpo"),
    ),
    "two_rewards": SuiteTask(
        reason="a common component (answer starts with a letter, chance about one half) beside a rare one "
        "(the exact answer, a few percent): normalising their sum lets the common one set the scale, "
        "GDPO normalises each on its own",
        situation="two reward components, one rare",
        task={"implementation": "bench.suite_tasks.make_reverse", "kwargs": {"length": 2}},
        reward=({"implementation": "bench.suite_tasks.any_letter", "weight": 1.0},),
        success_threshold=2.0,
        max_new_tokens=2,
        steps=120,
        eval_every=10,
        estimators=("grpo", "gdpo", "dr_grpo", "rloo", "reinforce_plus_plus_baseline", "gpg"),
    ),
}


@dataclass(frozen=True)
class EstimatorSource:
    """Where an estimator's algorithm comes from, and what the suite adds to it."""

    path: Path
    full_run: bool = False  # an example run (take ALGORITHM_KEYS only) rather than an algorithm-only preset
    extra: dict[str, Any] | None = None


def _preset(name: str, **kw: Any) -> EstimatorSource:
    return EstimatorSource(PRESETS / f"{name}.yaml", **kw)


ESTIMATORS: dict[str, EstimatorSource] = {
    **{
        name: _preset(name)
        for name in (
            "grpo",
            "dr_grpo",
            "rloo",
            "reinforce_plus_plus",
            "reinforce_plus_plus_baseline",
            "grpo_passk",
            "gpg",
            "opo",
            "gdpo",
            "ppo",
            "maxrl",
        )
    },
    "turn_gae": EstimatorSource(EXAMPLES / "ppo_turn_gae_guess.yaml", full_run=True),
    "gigpo": EstimatorSource(EXAMPLES / "guess_gigpo.yaml", full_run=True),
    "mt_grpo": EstimatorSource(EXAMPLES / "guess_mt_grpo.yaml", full_run=True),
    "gvpo": EstimatorSource(EXAMPLES / "guess_gvpo.yaml", full_run=True),
    "process_weighted": EstimatorSource(EXAMPLES / "guess_process_weighted.yaml", full_run=True),
    # GRPO plus the process scores added to each turn's tokens (the default process stage, `additive`)
    "grpo_prm_additive": _preset(
        "grpo",
        extra={
            "rollout": {"prm": {"enabled": True}},
            "actor": {
                "token_rewards_as_adv": True,
                "advantage": {"process_adv_shaping": {"implementation": "additive"}},
            },
        },
    ),
}


def _resolved(section: Any, keys: Any) -> dict[str, Any]:
    from omegaconf import OmegaConf

    plain = OmegaConf.to_container(OmegaConf.structured(section), enum_to_str=True)
    return {key: plain[key] for key in keys}


def algorithm(name: str) -> dict[str, Any]:
    """The estimator's algorithm as config sections, fully resolved (a key replaces the run's value whole)."""
    from areal_adv.api.cli_args import load_config

    source = ESTIMATORS[name]
    raw = yaml.safe_load(source.path.read_text(encoding="utf-8")) or {}
    cfg = load_config(source.path)
    actor_keys = [k for k in raw.get("actor", {}) if not source.full_run or k in ALGORITHM_KEYS]
    out: dict[str, Any] = {"actor": _resolved(cfg.actor, actor_keys)}
    out["critic"] = _resolved(cfg.critic, list(raw.get("critic", {})))
    rollout = {
        k: v for k, v in _resolved(cfg.rollout, [k for k in raw.get("rollout", {}) if k in ROLLOUT_KEYS]).items()
    }
    if raw.get("rollout", {}).get("prm", {}).get("enabled"):
        rollout["prm"] = {"enabled": True}
    out["rollout"] = rollout
    process = raw.get("task", {}).get("kwargs", {}).get("process_reward")
    out["task_kwargs"] = {"process_reward": process} if process else {}
    return _merge(out, copy.deepcopy(source.extra or {}))


def _merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            base[key] = _merge(base[key], value)
        else:
            base[key] = value
    return base


def run_config(
    task: str, estimator: str, seed: int, *, steps: int | None = None, eval_every: int | None = None
) -> dict[str, Any]:
    """The full config mapping of one run (`load_config` input); `output.dir` is set by the runner."""
    spec, algo = TASKS[task], algorithm(estimator)
    task_section = copy.deepcopy(spec.task)
    task_section["kwargs"] = {**task_section.get("kwargs", {}), **algo.pop("task_kwargs")}
    if task_section["implementation"].endswith("make_echo"):
        task_section["kwargs"]["seed"] = seed  # the process-score noise stream, one per run seed
    actor = {
        "max_new_tokens": spec.max_new_tokens,
        "temperature": 1.0,
        "eps_clip": 0.2,
        "ppo_n_minibatches": 2,
        **algo["actor"],
        "kl_ctl": 0.0,
    }
    return {
        "experiment_name": f"{task}-{estimator}",
        "trial_name": f"seed{seed}",
        "seed": seed,
        "model": {"path": None},
        "task": task_section,
        "reward": [dict(r) for r in spec.reward],
        "rollout": {"batch_size": 16, "n_samples": 8, **algo["rollout"]},
        "critic": {"enabled": False, "lr": 1.0e-3, **algo["critic"]},
        "actor": actor,
        "train": {
            "steps": steps or spec.steps,
            "lr": 5.0e-4,
            "grad_clip": 1.0,
            "num_threads": 1,
            "save_every": 0,
            "log_every": 10_000,
        },
        "eval": {
            "every": eval_every or spec.eval_every,
            "n_prompts": 32,
            "samples_per_step": 0,
            "success_threshold": spec.success_threshold,
        },
        "output": {"plot": False, "progress_bar": False, "loggers": ["jsonl"]},
    }
