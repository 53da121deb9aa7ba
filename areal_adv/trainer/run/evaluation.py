"""Held-out evaluation (greedy decoding) and the per-step sample log (`samples.jsonl`).

The evaluation set is fixed for the run (`eval.n_prompts` rows of `data.eval`,
or of a procedural task's `eval` split drawn from a separate seed), so its
numbers are comparable across steps. Under data parallelism every rank decodes
its round-robin share and the means are weighted by episodes.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from areal_adv.api.train_args import EvalConfig
from areal_adv.trainer.parallel.distributed import DistContext, reduce_metrics
from areal_adv.trainer.rollout.episodes import EpisodeRecord, collect_episodes
from areal_adv.trainer.rollout.tasks.runtime import TaskRuntime

#: Offset of the evaluation RNG's seed from the run seed (a procedural task's held-out stream).
EVAL_SEED_OFFSET = 7_919


def eval_rows_from_task(task: Any, seed: int, n: int) -> list[dict[str, Any]]:
    """`n` held-out rows of a procedural task (its `eval` split, a separate RNG)."""
    rng = random.Random(seed + EVAL_SEED_OFFSET)
    return [task.sample(rng, "eval") for _ in range(n)]


def episode_metrics(records: Sequence[EpisodeRecord], threshold: float, prefix: str) -> dict[str, float]:
    """accuracy / reward_mean / reward/<name> means over `records` (empty: nothing to report)."""
    if not records:
        return {}
    n = len(records)
    out = {
        f"{prefix}accuracy": sum(r.reward >= threshold for r in records) / n,
        f"{prefix}reward_mean": sum(r.reward for r in records) / n,
    }
    for name in records[0].rewards:
        out[f"{prefix}reward/{name}"] = sum(r.rewards[name] for r in records) / n
    return out


class Evaluator:
    """Greedy decoding of the fixed held-out rows; `due` says when."""

    def __init__(self, cfg: EvalConfig, rows: list[dict[str, Any]], total_steps: int) -> None:
        self.cfg = cfg
        self.rows = rows
        self.total_steps = total_steps

    def due(self, step: int, *, after_update: bool) -> bool:
        """Before step i's update when i % every == 0 (not the last step); after the last update."""
        every = self.cfg.every
        if every is None or not self.rows:
            return False
        last = step == self.total_steps - 1
        return last if after_update else (step % every == 0 and not last)

    @torch.no_grad()
    def run(
        self, model: Any, runtime: TaskRuntime, ctx: DistContext, *, budget: int, temperature: float, updates: int
    ) -> tuple[dict[str, float], list[EpisodeRecord]]:
        share = self.rows[ctx.rank :: ctx.world_size] if ctx.is_distributed else self.rows
        groups = collect_episodes(model, runtime, share, 1, budget=budget, temperature=temperature, greedy=True)
        records = [g[0] for g in groups]
        local = episode_metrics(records, self.cfg.success_threshold, "eval/")
        metrics = reduce_metrics(local, ctx, weights=float(len(records))) if ctx.is_distributed else local
        metrics["eval/updates"] = float(updates)
        return metrics, records


def _plain(value: Any) -> Any:
    """JSON-safe: tensors and numpy values to lists/numbers, anything else unknown to str."""
    if isinstance(value, torch.Tensor):
        return value.tolist()
    if hasattr(value, "tolist"):
        return value.tolist()
    return str(value)


def sample_rows(
    records: Sequence[EpisodeRecord], k: int, n_samples: int, step: int, split: str
) -> list[dict[str, Any]]:
    """Up to `k` rows: the first episode of successive prompts, then the others."""
    order = list(range(0, len(records), max(n_samples, 1)))
    order += [i for i in range(len(records)) if i not in set(order)]
    out = []
    for i in order[:k]:
        rec = records[i]
        row: dict[str, Any] = {
            "step": step,
            "split": split,
            "prompt": rec.prompt,
            "completion": rec.completion,
            "reward": rec.reward,
            "rewards": rec.rewards,
            "truncated": rec.truncated,
            "row": rec.row,
        }
        if len(rec.turn_texts) != 1:
            row["turns"] = [{"action": a, "observation": o} for a, o in zip(rec.turn_texts, [*rec.observations, None])]
        out.append(row)
    return out


class SampleLog:
    """Appends rows to `samples.jsonl` (created fresh by the first write of this process)."""

    def __init__(self, path: Path, *, append: bool = False) -> None:
        self.path = Path(path)
        self._mode = "a" if append else "w"

    def write(self, rows: Sequence[dict[str, Any]]) -> None:
        if not rows and self._mode == "a":
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open(self._mode, encoding="utf-8") as fh:
            for row in rows:
                fh.write(json.dumps(row, default=_plain, ensure_ascii=False) + "\n")
        self._mode = "a"
