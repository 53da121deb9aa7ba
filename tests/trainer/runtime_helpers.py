"""Build a task runtime and a tiny policy the way the trainer does, for rollout-level tests."""

from __future__ import annotations

import random
from typing import Any

import torch

from areal_adv.api.cli_args import load_config
from areal_adv.trainer.lm.model import build_policy, special_ids
from areal_adv.trainer.lm.tokenizer import build_tokenizer
from areal_adv.trainer.rollout.episodes import collect_episodes
from areal_adv.trainer.rollout.tasks.runtime import TaskRuntime
from areal_adv.trainer.run.task_setup import build_runtime, resolve_task_parts


def make_runtime(
    name: str,
    kwargs: dict[str, Any] | None = None,
    *,
    attn: str = "eager",
    seed: int = 0,
    extra: dict[str, Any] | None = None,
) -> tuple[TaskRuntime, Any]:
    """(runtime, tiny random policy) for task `name` with `kwargs`."""
    source = {
        "task": {"implementation": name, "kwargs": dict(kwargs or {})},
        "model": {
            "hidden_size": 32,
            "num_layers": 2,
            "num_heads": 2,
            "intermediate_size": 64,
            "attn_implementation": attn,
        },
        **(extra or {}),
    }
    cfg = load_config(source)
    parts = resolve_task_parts(cfg)
    tokenizer = build_tokenizer(
        cfg.model, getattr(parts.task, "vocabulary", None), getattr(parts.task, "stop_words", ()) or ()
    )
    torch.manual_seed(seed)
    model = build_policy(cfg.model, len(tokenizer), special_ids(tokenizer))
    return build_runtime(cfg, parts, tokenizer, model), model


def sample_rows(runtime: TaskRuntime, n: int, seed: int = 0) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [runtime.task.sample(rng, "train") for _ in range(n)]


def run(
    runtime: TaskRuntime,
    model: Any,
    n_prompts: int = 4,
    n_samples: int = 4,
    budget: int = 16,
    temperature: float = 1.0,
    process: bool = False,
    seed: int = 0,
):
    rows = sample_rows(runtime, n_prompts, seed)
    gen = torch.Generator().manual_seed(seed)
    return collect_episodes(
        model, runtime, rows, n_samples, budget=budget, temperature=temperature, generator=gen, process_rewards=process
    )
