"""Start-up of the task side of a run: task, rewards, datasets, tokenizer, prompt sources.

Runs in every rank's own process: task and reward plugins are imported here
(never at config load), and in a process group the ranks agree on failure so
that one rank's bad plugin stops every rank with the rank and the cause named.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from areal_adv.api.config_checks import ConfigError
from areal_adv.api.train_args import ExperimentConfig
from areal_adv.trainer.lm.codec import ChatCodec, stop_token_ids
from areal_adv.trainer.parallel.distributed import DistContext, all_gather_objects
from areal_adv.trainer.ppo.actor import WorkerInitError
from areal_adv.trainer.rollout.prompt_data import (
    DatasetPromptSource,
    TaskPromptSource,
    check_prompt_column,
    load_prompt_dataset,
    rows_of,
)
from areal_adv.trainer.rollout.reward_functions import RewardFunction, RewardSet, resolve_reward_functions
from areal_adv.trainer.rollout.tasks.registry import make_task
from areal_adv.trainer.rollout.tasks.runtime import TaskRuntime
from areal_adv.trainer.run.evaluation import eval_rows_from_task


class StartupError(WorkerInitError):
    """Task/reward start-up failed on at least one data-parallel rank (raised on all of them)."""


@dataclass
class TaskParts:
    """What the config names, resolved: the task object, reward functions, datasets."""

    task: Any
    reward_functions: list[RewardFunction]
    train_data: Any
    eval_data: Any


def agree(fn: Any, ctx: DistContext) -> Any:
    """Run `fn()`; in a process group, every rank raises if any rank failed (no rank hangs)."""
    result, error = None, None
    try:
        result = fn()
    except Exception as exc:  # reported below, on every rank
        error = exc
    if not ctx.is_distributed:
        if error is not None:
            raise error
        return result
    reports = all_gather_objects(None if error is None else f"rank {ctx.rank}: {error}", ctx)
    failures = [r for r in reports if r]
    if failures:
        raise StartupError("trainer start-up failed: " + "; ".join(failures)) from error
    return result


def _uses_prompt_column(task: Any) -> bool:
    return not getattr(task, "multi_turn", False) and not callable(getattr(task, "prompt", None))


def resolve_task_parts(cfg: ExperimentConfig) -> TaskParts:
    """Import/build the task and reward functions and read the datasets (one rank)."""
    data = cfg.data
    task = make_task(cfg.task, seed=cfg.seed, prompt_key=data.prompt_key)
    if cfg.rollout.prm.enabled and not getattr(task, "has_process_scorer", False):
        raise ConfigError(
            f"rollout.prm.enabled: task {cfg.task.implementation!r} has no process scorer "
            "(has_process_scorer is not true)"
        )
    functions = resolve_reward_functions(cfg.reward)
    train = eval_ = None
    if data.train is not None:
        train = load_prompt_dataset(data.train, split=data.train_split, field="data.train")
        if _uses_prompt_column(task) or cfg.task.implementation == "dataset":
            check_prompt_column(train, data.prompt_key, "data.train")
    elif not callable(getattr(task, "sample", None)):
        raise ConfigError(
            f"data.train: task {cfg.task.implementation!r} does not generate its own problems "
            "(no sample(rng, split) method), so it needs a prompt dataset"
        )
    if data.eval is not None:
        eval_ = load_prompt_dataset(data.eval, split=data.eval_split, field="data.eval")
        if _uses_prompt_column(task) or cfg.task.implementation == "dataset":
            check_prompt_column(eval_, data.prompt_key, "data.eval")
    elif cfg.eval.every is not None and not callable(getattr(task, "sample", None)):
        raise ConfigError(
            f"data.eval: eval.every is set, but task {cfg.task.implementation!r} cannot generate "
            "held-out problems; set data.eval"
        )
    return TaskParts(task, functions, train, eval_)


def build_codec(tokenizer: Any, model: Any, task: Any) -> ChatCodec:
    eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    return ChatCodec(tokenizer, stop_token_ids(tokenizer, eos, getattr(task, "stop_words", ()) or ()))


def build_runtime(cfg: ExperimentConfig, parts: TaskParts, tokenizer: Any, model: Any) -> TaskRuntime:
    """The task bound to the model's tokenizer, stop ids, context limit and reward set."""
    task = parts.task
    scores = getattr(task, "multi_turn", False) or callable(getattr(task, "score", None))
    rewards = RewardSet(
        parts.reward_functions,
        cfg.task.reward_name if scores else None,
        cfg.task.reward_weight,
        prompt_key=cfg.data.prompt_key,
    )
    limit = getattr(model.config, "max_position_embeddings", None)
    return TaskRuntime(
        task,
        build_codec(tokenizer, model, task),
        rewards,
        implementation=cfg.task.implementation,
        prompt_key=cfg.data.prompt_key,
        max_length=limit,
    )


def make_prompt_source(cfg: ExperimentConfig, parts: TaskParts, rng: random.Random) -> Any:
    """`data.train` in shuffled epochs, else the task's own generator driven by `rng`."""
    if parts.train_data is not None:
        return DatasetPromptSource(parts.train_data, seed=cfg.seed, shuffle=cfg.data.shuffle)
    return TaskPromptSource(parts.task, rng)


def make_eval_rows(cfg: ExperimentConfig, parts: TaskParts) -> list[dict[str, Any]]:
    """The fixed held-out rows: the first `eval.n_prompts` of `data.eval`, or the task's eval split."""
    if cfg.eval.every is None:
        return []
    n = cfg.eval.n_prompts
    if parts.eval_data is not None:
        return rows_of(parts.eval_data, list(range(min(n, len(parts.eval_data)))))
    return eval_rows_from_task(parts.task, cfg.seed, n)
