"""The RL training loop: rollout → reference/values → advantages → PPO updates → metrics.

`PPOActor.compute_advantages` is the single place advantages come from; this
module only prepares its inputs (aligned `ref_logp`, `values`, `prox_logp`) and
consumes its output. GRPO = `critic.enabled: false` with group reward
normalisation; PPO = a critic whose values feed GAE and which regresses on the
pipeline's `returns`.
"""

from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from areal.api.cli_args import ConfigError, config_to_yaml
from areal.api.train_args import ExperimentConfig
from areal.trainer.engine import PolicyEngine, ValueEngine, reference_logprobs
from areal.trainer.metrics import MetricsWriter, masked_stats, window_mean
from areal.trainer.model import build_critic, build_policy, frozen_copy
from areal.trainer.plot import plot_curves
from areal.trainer.ppo.actor import PPOActor
from areal.trainer.ppo.critic import PPOCritic
from areal.trainer.rollout import (
    EpisodeRecord,
    add_reward_baselines,
    collect_episodes,
    export_episodes,
    export_turn_rows,
    sample_problems,
)
from areal.trainer.tasks import make_task
from areal.utils.data import concat_batch

logger = logging.getLogger("areal.trainer")


@dataclass
class RunResult:
    """Where a run wrote its outputs and how it went."""

    run_dir: Path
    metrics_path: Path
    plot_path: Path | None
    steps_done: int
    interrupted: bool
    seconds: float
    first5_reward: float | None
    last10_reward: float | None

    def summary(self, name: str, total_steps: int) -> str:
        def fmt(x: float | None) -> str:
            return "n/a" if x is None else f"{x:.3f}"

        state = "interrupted" if self.interrupted else "done"
        plot = f" | plot {self.plot_path}" if self.plot_path else ""
        return (f"[areal] {name}: {state}, {self.steps_done}/{total_steps} steps in {self.seconds:.1f}s | "
                f"reward first 5 steps {fmt(self.first5_reward)} -> last 10 steps {fmt(self.last10_reward)} | "
                f"metrics {self.metrics_path}{plot}")


@dataclass
class StepOutput:
    """A step's metrics plus the batch before and after the advantage pipeline (for tests and hooks)."""

    metrics: dict[str, Any]
    batch: dict[str, Any]
    data: dict[str, Any]
    records: list[EpisodeRecord]


def _special_ids(tokenizer: Any) -> dict[str, int]:
    return {"pad_token_id": tokenizer.pad_token_id, "bos_token_id": tokenizer.bos_token_id,
            "eos_token_id": tokenizer.eos_token_id}


def _warn_unused_process_shaping(cfg: ExperimentConfig) -> None:
    """A process stage without process rewards is valid config but probably not what was meant."""
    spec = cfg.actor.advantage.process_adv_shaping
    if spec is not None and spec.implementation in ("gvpo", "process_weighted") and not cfg.rollout.prm.enabled:
        logger.warning("actor.advantage.process_adv_shaping=%s but rollout.prm.enabled=false: the batch carries "
                       "no token_rewards, so the shaping has nothing to act on", spec.implementation)


class Trainer:
    """Builds everything from an `ExperimentConfig` and runs `train.steps` steps."""

    def __init__(self, cfg: ExperimentConfig) -> None:
        self.cfg = cfg
        torch.set_num_threads(cfg.train.num_threads)
        torch.manual_seed(cfg.seed)
        self.rng = random.Random(cfg.seed)
        self.generator = torch.Generator().manual_seed(cfg.seed + 1)
        self.task = make_task(cfg.task.name, cfg.task.kwargs)
        tok = self.task.tokenizer
        needed = self.task.max_sequence_length(cfg.generation_budget)
        self.policy = build_policy(cfg.model, len(tok), _special_ids(tok))
        limit = getattr(self.policy.config, "max_position_embeddings", needed)
        if needed > limit:
            raise ConfigError(f"model.max_position_embeddings: {limit} is shorter than the task's trajectories "
                              f"(up to {needed} tokens)")
        self.reference = frozen_copy(self.policy) if cfg.actor.kl_ctl != 0 else None
        self.engine = PolicyEngine(self.policy, lr=cfg.train.lr, weight_decay=cfg.train.weight_decay,
                                   grad_clip=cfg.train.grad_clip)
        self.actor = PPOActor(cfg.actor, self.engine)
        self.critic = None
        if cfg.critic.enabled:
            model = build_critic(cfg.model, len(tok), _special_ids(tok))
            self.critic = PPOCritic(cfg.critic, ValueEngine(model, lr=cfg.critic.lr,
                                                             weight_decay=cfg.critic.weight_decay,
                                                             grad_clip=cfg.critic.grad_clip))
        self.run_dir = Path(cfg.output.dir) / cfg.experiment_name
        _warn_unused_process_shaping(cfg)

    # -- one step ---------------------------------------------------------------------------

    def rollout(self) -> tuple[list[dict[str, Any]], list[EpisodeRecord]]:
        """Sample this step's prompt groups and export them as trajectory-group dicts."""
        cfg = self.cfg
        problems = sample_problems(self.task, self.rng, cfg.rollout.batch_size)
        groups = collect_episodes(
            self.policy, self.task, problems, cfg.rollout.n_samples, budget=cfg.generation_budget,
            temperature=cfg.sampling_temperature, generator=self.generator, process_rewards=cfg.rollout.prm.enabled,
        )
        pad = self.task.pad_token_id
        with_process = cfg.rollout.prm.enabled
        if cfg.rollout.export == "per_turn":
            dicts = [export_turn_rows(g, pad, with_process=with_process,
                                      explicit_rewards=cfg.rollout.explicit_rollout_rewards) for g in groups]
        else:
            dicts = [export_episodes(g, pad, with_process=with_process) for g in groups]
        if cfg.rollout.greedy_baseline:
            greedy = collect_episodes(
                self.policy, self.task, problems, 1, budget=cfg.generation_budget,
                temperature=cfg.sampling_temperature, greedy=True,
            )
            dicts = [add_reward_baselines(d, g[0].reward) for d, g in zip(dicts, greedy)]
        return dicts, [rec for g in groups for rec in g]

    def prepare(self, batch: dict[str, Any]) -> dict[str, Any]:
        """Add the aligned model outputs the advantage pipeline reads."""
        ids, mask, temp = batch["input_ids"], batch["attention_mask"], self.cfg.sampling_temperature
        if self.reference is not None:
            batch["ref_logp"] = reference_logprobs(self.reference, ids, mask, temp)
        if self.critic is not None:
            batch["values"] = self.critic.compute_values(batch)
        if self.cfg.actor.recompute_logprob or self.cfg.actor.use_decoupled_loss:
            batch["prox_logp"] = self.engine.compute_logprobs(ids, mask, temp)
        return batch

    def compute_advantages(self, batch: dict[str, Any], meta: Any) -> dict[str, Any]:
        shaping = self.cfg.rollout.prm.advantage_shaping
        return self.actor.compute_advantages(
            batch, meta, advantage_shaping_mode=shaping.mode, gvpo_negative_scale=shaping.negative_scale,
            gvpo_zero_penalty=shaping.zero_penalty, gvpo_zero_eps=shaping.zero_eps,
        )

    def step(self, step: int) -> StepOutput:
        """One RL step: rollout, advantages, policy (and critic) update, metrics."""
        start = time.perf_counter()
        dicts, records = self.rollout()
        batch, meta = concat_batch(dicts)
        batch = self.prepare(batch)
        data = self.compute_advantages(batch, meta)
        stats = self.actor.ppo_update(data)
        if self.critic is not None:
            stats.update(self.critic.ppo_update(data))
        seconds = time.perf_counter() - start
        return StepOutput(self._metrics(step, records, data, stats, seconds), batch, data, records)

    def _metrics(self, step: int, records: list[EpisodeRecord], data: dict[str, Any],
                 stats: dict[str, float], seconds: float) -> dict[str, float]:
        mask = data["loss_mask"]
        adv_mean, adv_std = masked_stats(data["advantages"], mask)
        generated = sum(r.generated_tokens for r in records)
        row: dict[str, Any] = {
            "step": step,
            "reward_mean": sum(r.reward for r in records) / len(records),
            "success_rate": sum(r.reward >= 1.0 for r in records) / len(records),
            "adv_mean": adv_mean,
            "adv_std": adv_std,
            "kl": None,
            "policy_loss": stats.get("policy_loss"),
            "value_loss": stats.get("value_loss"),
            "entropy": stats.get("entropy"),
            "clip_frac": stats.get("clip_frac"),
            "grad_norm": stats.get("grad_norm"),
            "response_tokens": generated / len(records),
            "turns": sum(len(r.turn_spans) for r in records) / len(records),
            "truncated_frac": sum(r.truncated for r in records) / len(records),
            "tokens_per_s": generated / seconds if seconds > 0 else None,
            "seconds": seconds,
        }
        if "ref_logp" in data and isinstance(data.get("ref_logp"), torch.Tensor):
            row["kl"] = masked_stats(data["logprobs"] - data["ref_logp"], mask)[0]
        if "token_rewards" in data:
            row["process_reward_mean"] = masked_stats(data["token_rewards"].float(), data["loss_mask"])[0]
        return row

    # -- the run ----------------------------------------------------------------------------

    def run(self) -> RunResult:
        """Train for `train.steps`; Ctrl-C stops early but still writes metrics, plot and summary."""
        cfg = self.cfg
        self.run_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / "config.yaml").write_text(config_to_yaml(cfg), encoding="utf-8")
        writer = MetricsWriter(self.run_dir / "metrics.jsonl")
        bar = tqdm(total=cfg.train.steps, desc=cfg.experiment_name, disable=not cfg.output.progress_bar,
                   dynamic_ncols=True)
        begin, interrupted, done = time.perf_counter(), False, 0
        try:
            for step in range(cfg.train.steps):
                row = self.step(step).metrics
                row["elapsed"] = time.perf_counter() - begin
                writer.write(row)
                done = step + 1
                bar.update(1)
                if done % cfg.train.log_every == 0:
                    bar.set_postfix(reward=f"{row['reward_mean']:.2f}", success=f"{row['success_rate']:.2f}")
        except KeyboardInterrupt:
            interrupted = True
        finally:
            bar.close()
            writer.close()
        return self._finish(writer.records, done, interrupted, time.perf_counter() - begin)

    def _finish(self, records: list[dict[str, Any]], done: int, interrupted: bool, seconds: float) -> RunResult:
        cfg = self.cfg
        plot_path = None
        if cfg.output.plot and records:
            plot_path = plot_curves(records, self.run_dir / "curves.png", title=cfg.experiment_name)
        if cfg.output.save_checkpoint:
            ckpt = self.run_dir / "checkpoint"
            self.policy.save_pretrained(ckpt)
            self.task.tokenizer.save_pretrained(ckpt)
        return RunResult(
            run_dir=self.run_dir, metrics_path=self.run_dir / "metrics.jsonl", plot_path=plot_path,
            steps_done=done, interrupted=interrupted, seconds=seconds,
            first5_reward=window_mean(records, "reward_mean", first=5),
            last10_reward=window_mean(records, "reward_mean", last=10),
        )
