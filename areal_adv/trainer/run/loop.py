"""The RL training loop: rollout → reference/values → advantages → PPO updates → metrics.

`PPOActor.compute_advantages` is the single place advantages come from; this
module only prepares its inputs (aligned `ref_logp`, `values`, `prox_logp`) and
consumes its output. GRPO = `critic.enabled: false` with group reward
normalisation; PPO = a critic whose values feed GAE and which regresses on the
pipeline's `returns`.

Data parallelism (`torchrun`, see docs/distributed.md): one `Trainer` per rank,
given the rank's `DistContext`. Every rank samples the same global prompt list
(shared seed), rolls out only its round-robin share of the prompts (whole
groups), and trains through torch's DDP or FSDP2 (`train.parallel`, see
`areal_adv.trainer.parallel.engine`); metrics are reduced across ranks and only rank 0
writes files. `Trainer.policy` is always the plain `transformers` module that
evaluates and is saved (under FSDP a full copy refreshed after every update);
`Trainer.sampler` samples the training rollouts: the same module, or with
`rollout.weights_dtype` a copy cast to that dtype after every update, whose
mismatch with the trained weights is logged as `rollout_mismatch/*`.
Without a process group the loop is exactly the single-process one.
"""

from __future__ import annotations

import json
import logging
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.distributed import ReduceOp

from areal_adv.api.cli_args import ConfigError, PPOActorConfig, actor_config_from_dict, config_to_dict, config_to_yaml
from areal_adv.api.extras import check_extras
from areal_adv.api.train_args import ExperimentConfig
from areal_adv.trainer.lm.logprobs import aligned_from_rollout
from areal_adv.trainer.lm.model import build_critic, build_policy, frozen_copy, special_ids
from areal_adv.trainer.lm.tokenizer import build_tokenizer
from areal_adv.trainer.parallel.cpu_threads import apply_num_threads
from areal_adv.trainer.parallel.distributed import (
    DistContext,
    all_reduce_tensor,
    assign_prompts_to_ranks,
    barrier,
    broadcast_module,
    reduce_metrics,
)
from areal_adv.trainer.parallel.engine import PolicyEngine, ValueEngine, reference_logprobs
from areal_adv.trainer.parallel.failures import staged
from areal_adv.trainer.parallel.micro_batches import chunked_rows, micro_slices
from areal_adv.trainer.parallel.precision import resolve_mixed_precision
from areal_adv.trainer.ppo.actor import PPOActor
from areal_adv.trainer.ppo.estimators.combine import reads_reference
from areal_adv.trainer.ppo.training.critic import PPOCritic
from areal_adv.trainer.ppo.training.rollout_mismatch import MismatchSums, mismatch_metrics, mismatch_sums
from areal_adv.trainer.rollout.episodes import (
    EpisodeRecord,
    add_reward_baselines,
    collect_episodes,
    export_episodes,
    export_turn_rows,
    groups_to_device,
)
from areal_adv.trainer.rollout.stage_fields import (
    add_prompt_keys,
    add_seat_ids,
    reward_components,
    sampled_token_stats,
    stage_batch_fields,
)
from areal_adv.trainer.run.evaluation import Evaluator, SampleLog, episode_metrics, sample_rows
from areal_adv.trainer.run.kernel_warmup import warm_up_advantage_kernels
from areal_adv.trainer.run.loggers import RunLoggers, open_loggers
from areal_adv.trainer.run.metrics import (
    PhaseTimer,
    masked_stats,
    peak_memory_metrics,
    rate,
    reward_windows,
    window_mean,
)
from areal_adv.trainer.run.plot import plot_curves
from areal_adv.trainer.run.preflight import check_before_launch
from areal_adv.trainer.run.progress import Progress
from areal_adv.trainer.run.run_dir import RunDirectoryError, prepare_run_dir, shared_plan
from areal_adv.trainer.run.run_summary import start_block
from areal_adv.trainer.run.step_observers import Phase, StepObservers, StepServices, StepView
from areal_adv.trainer.run.task_setup import (
    agree,
    build_runtime,
    make_eval_rows,
    make_prompt_source,
    resolve_task_parts,
)
from areal_adv.trainer.run.trainer_state import load_trainer_checkpoint, save_trainer_checkpoint
from areal_adv.trainer.run.training_logprobs import MismatchObserver, logprobs_in_update, stochastic_forward
from areal_adv.utils.batch_meta import TrajBatchMeta
from areal_adv.utils.data import concat_batch

logger = logging.getLogger("areal_adv.trainer")

#: How far apart the ranks' seeds lie: rank r seeds its per-rank streams with seed + offset + RANK_SEED_STRIDE * r.
#: A prime far above the offsets (1, 2), so no two (offset, rank) pairs share a seed, and rank 0 (the
#: single-process run) keeps seed + offset.
RANK_SEED_STRIDE = 1_000_003


@dataclass
class RunResult:
    """Where a run wrote its outputs and how it went."""

    run_dir: Path
    metrics_path: Path
    plot_path: Path | None
    steps_done: int
    interrupted: bool
    seconds: float
    first_reward: float | None  # mean reward of the first `first_steps` steps
    last_reward: float | None  # ... and of the last `last_steps` (disjoint windows: `reward_windows`)
    first_steps: int = 0
    last_steps: int = 0
    checkpoint: Path | None = None  # the newest checkpoint this run wrote (None: none)
    resumed_from: Path | None = None
    last_save_seconds: float = 0.0  # the checkpoint after the last row (earlier ones: the rows' time/save)

    def summary(self, name: str, total_steps: int) -> str:
        def fmt(x: float | None) -> str:
            return "n/a" if x is None else f"{x:.3f}"

        state = "interrupted" if self.interrupted else "done"
        plot = f" | plot {self.plot_path}" if self.plot_path else ""
        saved = f" | last checkpoint {self.last_save_seconds:.1f}s" if self.checkpoint is not None else ""
        return (
            f"[areal-adv] {name}: {state}, {self.steps_done}/{total_steps} steps in {self.seconds:.1f}s | "
            f"{self._reward_change(fmt)} | metrics {self.metrics_path}{plot}{saved}"
        )

    def _reward_change(self, fmt: Callable[[float | None], str]) -> str:
        """'reward first 5 steps x -> last 10 steps y' over disjoint windows; a one-row run has one reward."""
        if not self.last_steps:
            return f"reward {fmt(self.first_reward)} (one step)" if self.first_steps else "reward n/a (no step)"
        first = "first step" if self.first_steps == 1 else f"first {self.first_steps} steps"
        last = "last step" if self.last_steps == 1 else f"last {self.last_steps} steps"
        return f"reward {first} {fmt(self.first_reward)} -> {last} {fmt(self.last_reward)}"


@dataclass
class StepOutput:
    """A step's metrics plus the batch before and after the advantage pipeline (for tests and hooks)."""

    metrics: dict[str, Any]
    batch: dict[str, Any]
    data: dict[str, Any]  # what the update trained on
    records: list[EpisodeRecord]
    meta: TrajBatchMeta


def shipped_actor_config(config: PPOActorConfig) -> PPOActorConfig:
    """The actor config as a remote worker receives it: serialised to JSON and rebuilt (and re-validated)."""
    return actor_config_from_dict(json.loads(json.dumps(config_to_dict(config))))


#: How metrics are averaged over ranks: per episode, per active (loss-mask) token; every other
#: metric has equal weights (the update statistics are all-reduced inside the update and gradient
#: norms are of the synchronised gradient, so they are the same on every rank; `seconds` is a mean).
_EPISODE_KEYS = ("reward_mean", "success_rate", "response_tokens", "turns", "truncated_frac")
_TOKEN_KEYS = ("adv_mean", "_adv_sq_mean", "kl", "process_reward_mean")


def _warn_unused_process_shaping(cfg: ExperimentConfig) -> None:
    """A process stage without process rewards is valid config but probably not what was meant."""
    spec = cfg.actor.advantage.process_adv_shaping
    if spec is not None and spec.implementation in ("gvpo", "process_weighted") and not cfg.rollout.prm.enabled:
        logger.warning(
            "actor.advantage.process_adv_shaping=%s but rollout.prm.enabled=false: the batch carries "
            "no token_rewards, so the shaping has nothing to act on",
            spec.implementation,
        )


def _warn_no_checkpoints(cfg: ExperimentConfig) -> None:
    """`train.save_every=0` is a valid choice, but the run then leaves nothing to resume or export: say so first."""
    if not cfg.train.save_every:
        logger.warning(
            "train.save_every=0: this run writes no checkpoint, so it cannot be resumed (train.resume) or exported "
            "(areal-adv export), and areal-adv diagnose measures no gradients on it; set train.save_every=N to keep them"
        )


class Trainer:
    """Builds everything from an `ExperimentConfig` and runs `train.steps` steps.

    `ctx` is this process's place in a data-parallel job (`init_distributed()`);
    None or a 1-rank context is the plain single-process trainer on CPU.
    """

    def __init__(self, cfg: ExperimentConfig, ctx: DistContext | None = None) -> None:
        """Build the run in its order: place and seeds, task, models, per-rank sampling noise, step features.

        The order is the contract: torch's global RNG is seeded before the models are built (the same initial
        weights on every rank) and again after the last one (per-rank noise), so nothing between the two may
        draw from it; the kernel warm-up and the observers' shadow actors put back what they draw.
        """
        check_extras(cfg)  # every missing extra in one message, before anything is built (as `validate` does)
        self.cfg = cfg
        self._place(ctx)
        self._seed_shared(cfg)
        policy = self._build_task(cfg)
        self._build_models(cfg, policy)
        # per-rank global torch RNG, seeded once every model is built (nothing above it is sampled from it)
        torch.manual_seed(cfg.seed + 2 + RANK_SEED_STRIDE * self.ctx.rank)
        self._build_step_features(cfg)

    @property
    def policy(self) -> torch.nn.Module:
        """The plain policy with the full trained weights: it evaluates and is saved (`PolicyEngine.policy`)."""
        return self.engine.policy

    @property
    def sampler(self) -> torch.nn.Module:
        """The module that samples training rollouts: `policy`, or its `rollout.weights_dtype` copy."""
        return self.engine.sampler

    def _place(self, ctx: DistContext | None) -> None:
        """This process's rank, device, prompt share and run directory (the directory decided on rank 0)."""
        cfg = self.cfg
        self.ctx = ctx if ctx is not None and ctx.is_distributed else DistContext()
        # single process: CPU as always; data parallel: the rank's device (cuda:<local_rank> under nccl)
        self.device = self.ctx.device if self.ctx.is_distributed else torch.device("cpu")
        # prompts are dispatched before rollout, round-robin, so a prompt's whole group stays on one rank
        if cfg.rollout.batch_size < self.ctx.world_size:  # the same verdict on every rank: no collective yet
            raise ConfigError(
                f"rollout.batch_size: got {cfg.rollout.batch_size}, but the job has {self.ctx.world_size} ranks; "
                "batch_size is the global number of prompts per step and a prompt group is never split, so use "
                f"rollout.batch_size >= {self.ctx.world_size}"
            )
        self.prompt_indices = assign_prompts_to_ranks(cfg.rollout.batch_size, self.ctx.world_size)[self.ctx.rank]
        # before anything is built: a taken run directory fails in a second (decided on rank 0, shared)
        self.plan = shared_plan(cfg, self.ctx)
        self.run_dir = self.plan.run_dir

    def _seed_shared(self, cfg: ExperimentConfig) -> None:
        """The seeds every rank shares (initial weights, the prompt list) and this rank's sampling generator."""
        torch.manual_seed(cfg.seed)  # the same initial weights on every rank (and broadcast below)
        self.rng = random.Random(cfg.seed)  # the same global prompt list on every rank
        # independent sampling noise per rank; rank 0 (and a single process) keeps seed + 1. `generate`
        # draws from torch's global RNG: sample_continuations seeds a forked global RNG from this generator
        self.generator = torch.Generator(device=self.device).manual_seed(
            cfg.seed + 1 + RANK_SEED_STRIDE * self.ctx.rank
        )

    def _build_task(self, cfg: ExperimentConfig) -> torch.nn.Module:
        """Task, tokenizer, prompts and evaluation rows, checked before launch; returns the initial policy.

        The policy is built here because the tokenizer sizes it and the task runtime reads it.
        """
        # task and reward plugins are imported here, on every rank; any rank's failure stops all of them
        parts = self.parts = agree(lambda: resolve_task_parts(cfg), self.ctx)
        self.tokenizer = build_tokenizer(
            cfg.model, getattr(parts.task, "vocabulary", None), getattr(parts.task, "stop_words", ()) or ()
        )
        policy = build_policy(cfg.model, len(self.tokenizer), special_ids(self.tokenizer)).to(self.device)
        # by the policy's size: one thread for a tiny model, the cores / local ranks otherwise (cpu_threads)
        self.num_threads = apply_num_threads(cfg.train.num_threads, sum(p.numel() for p in policy.parameters()))
        self.task = build_runtime(cfg, parts, self.tokenizer, policy)
        eval_rows = make_eval_rows(cfg, parts)
        # what `areal-adv validate` checks (context, reward columns): a run that cannot fit fails before step 0
        agree(lambda: check_before_launch(cfg, parts, self.task, eval_rows), self.ctx)
        self.prompt_source = make_prompt_source(cfg, parts, self.rng)
        self.evaluator = Evaluator(cfg.eval, eval_rows, cfg.train.steps)
        return policy

    def _build_models(self, cfg: ExperimentConfig, policy: torch.nn.Module) -> None:
        """The reference, the policy's engine (with its sampling copy), the actor and the critic."""
        broadcast_module(policy, self.ctx)
        # copied from the broadcast weights; a plain frozen module on every rank, also under FSDP. The KL reward
        # reads the reference; so does a `combine` estimator distilling against ref_logp. With LoRA the reference
        # is the policy with its adapters disabled (the frozen base), not a second copy
        estimator = cfg.actor.advantage.estimator
        wants_reference = cfg.actor.kl_ctl != 0 or (
            estimator is not None and reads_reference(estimator.implementation, estimator.kwargs)
        )
        self.reference_is_base = wants_reference and cfg.model.lora is not None
        self.reference = frozen_copy(policy) if wants_reference and cfg.model.lora is None else None
        precision, self.precision_note = resolve_mixed_precision(cfg.model.mixed_precision, self.device)
        # both engines: the same ranks, engine and precision; each its own optimiser settings
        placement = {"ctx": self.ctx, "parallel": cfg.train.parallel, "mixed_precision": precision}
        train = cfg.train
        self.engine = PolicyEngine(
            policy,
            lr=train.lr,
            weight_decay=train.weight_decay,
            grad_clip=train.grad_clip,
            rollout_dtype=getattr(torch, cfg.rollout.weights_dtype) if cfg.rollout.weights_dtype else None,
            **placement,
        )
        # the trained weights' log-probs of the sampled tokens from the update's own forward, not a pass before it,
        # unless a step observer reads them before the update (`training_logprobs`)
        self.logprobs_in_update = logprobs_in_update(cfg) and not stochastic_forward(self.policy)
        # built from the serialised config, as a remote worker would; resolves the plugins in this
        # process and, in a process group, raises WorkerInitError on every rank if any rank fails
        self.actor = PPOActor(shipped_actor_config(cfg.actor), self.engine)
        self.critic = self._build_critic(cfg, placement)

    def _build_critic(self, cfg: ExperimentConfig, placement: dict[str, Any]) -> PPOCritic | None:
        if not cfg.critic.enabled:
            return None
        model = build_critic(cfg.model, len(self.tokenizer), special_ids(self.tokenizer)).to(self.device)
        broadcast_module(model, self.ctx)
        critic = cfg.critic
        engine = ValueEngine(
            model, lr=critic.lr, weight_decay=critic.weight_decay, grad_clip=critic.grad_clip, **placement
        )
        return PPOCritic(critic, engine)

    def _build_step_features(self, cfg: ExperimentConfig) -> None:
        """The sample log, start-up warnings, the advantage kernels' warm-up and the step observers."""
        # a resumed run appends to the samples it already wrote
        self.sample_log = SampleLog(self.run_dir / "samples.jsonl", append=self.plan.resume_from is not None)
        if self.ctx.is_main:
            _warn_unused_process_shaping(cfg)
            _warn_no_checkpoints(cfg)
        # numba loads (or compiles) the pipeline's kernels on their first call: here, not in step 0's timer.
        # A separate actor on synthetic batches; the random states and stage state are put back after it.
        # `run` prints how it went below the opening block
        self.kernel_warmup = warm_up_advantage_kernels(
            cfg, self.actor.config, task=self.parts.task, device=self.device, ctx=self.ctx
        )
        # the features that watch or change the step's batch at a phase (`step_observers`): built last, as the
        # shadow estimators' actors are resolved here like the run's
        services = StepServices(cfg, self.ctx, self.device, self.run_dir, self.actor, self.engine, self._models)
        self.observers = StepObservers.for_run(cfg, services)

    def _models(self) -> dict[str, torch.nn.Module | None]:
        """The run's modules by role; `sampler` only where it is a module of its own (`rollout.weights_dtype`)."""
        return {
            "policy": self.policy,
            "reference": self.reference,
            "critic": None if self.critic is None else self.critic.engine.model,
            "sampler": self.sampler if self.sampler is not self.policy else None,
        }

    # -- one step ---------------------------------------------------------------------------

    @staged("rollout")
    def rollout(self) -> tuple[list[dict[str, Any]], list[EpisodeRecord]]:
        """Sample this rank's prompt groups and export them as trajectory-group dicts.

        The global prompt list is drawn identically on every rank; this rank
        rolls out its round-robin share (all prompts in a single process).
        """
        cfg = self.cfg
        problems = self.prompt_source.sample(cfg.rollout.batch_size)
        if self.ctx.is_distributed:
            problems = [problems[i] for i in self.prompt_indices]
        with self.engine.autocast():  # sampled in the precision the update trains in (mixed_precision)
            groups = collect_episodes(
                self.sampler,
                self.task,
                problems,
                cfg.rollout.n_samples,
                budget=cfg.generation_budget,
                temperature=cfg.sampling_temperature,
                generator=self.generator,
                process_rewards=cfg.rollout.prm.enabled,
            )
        pad = self.task.pad_token_id
        with_process = cfg.rollout.prm.enabled
        components = reward_components(self.task.rewards)
        if cfg.rollout.export == "per_turn":
            dicts = [
                export_turn_rows(
                    g,
                    pad,
                    with_process=with_process,
                    components=components,
                    explicit_rewards=cfg.rollout.explicit_rollout_rewards,
                )
                for g in groups
            ]
        else:
            dicts = [export_episodes(g, pad, with_process=with_process, components=components) for g in groups]
        if cfg.rollout.greedy_baseline:
            with self.engine.autocast():
                greedy = collect_episodes(
                    self.sampler,
                    self.task,
                    problems,
                    1,
                    budget=cfg.generation_budget,
                    temperature=cfg.sampling_temperature,
                    greedy=True,
                )
            dicts = [add_reward_baselines(d, g[0].reward) for d, g in zip(dicts, greedy)]
        dicts = add_prompt_keys(dicts, problems)  # per-prompt stage state (KRPO, SPO)
        if "role_ids" in stage_batch_fields(self.actor.resolved):  # RAE: the seat and game of each problem row
            dicts = add_seat_ids(dicts, problems)
        if self.device.type != "cpu":
            dicts = groups_to_device(dicts, self.device)
        return dicts, [rec for g in groups for rec in g]

    def prepare(self, batch: dict[str, Any]) -> dict[str, Any]:
        """Add the aligned model outputs the advantage pipeline reads (`_prepare`, without the mismatch metrics)."""
        return self._prepare(batch)[0]

    @staged("reference log-probs and values")
    def _prepare(self, batch: dict[str, Any]) -> tuple[dict[str, Any], dict[str, float]]:
        """The batch with the aligned model outputs the advantage pipeline reads, and `rollout_mismatch/*` when
        the trained weights' log-probs come from a pass here (with `rollout.weights_dtype`; else `{}`)."""
        ids, mask, temp = batch["input_ids"], batch["attention_mask"], self.cfg.sampling_temperature
        wanted = aligned_from_rollout(batch["loss_mask"])  # the only positions the pipeline and the loss read
        size = self.cfg.actor.ppo_micro_batch_size
        chunks = micro_slices(ids.shape[0], size, self.ctx)  # the update's micro-batch size bounds these too
        if self.reference is not None or self.reference_is_base:
            batch["ref_logp"] = chunked_rows(self._reference_logprobs, chunks, ids, mask, wanted, temperature=temp)
        if self.critic is not None:
            batch["values"] = self.critic.compute_values(batch)
        separate = not self.logprobs_in_update  # else the update's forward computes them (training_logprobs)
        if separate and (self.cfg.actor.recompute_logprob or self.cfg.actor.use_decoupled_loss):
            batch["prox_logp"] = chunked_rows(
                lambda i, m, w: self.engine.compute_logprobs(i, m, temp, wanted=w), chunks, ids, mask, wanted
            )
        mismatch: dict[str, float] = {}
        if separate and self.engine.rollout_dtype is not None:  # the sampling copy against the trained weights
            training = batch.get("prox_logp")
            if training is None:
                training = chunked_rows(
                    lambda i, m, w: self.engine.compute_logprobs(i, m, temp, wanted=w), chunks, ids, mask, wanted
                )
            cap = self.cfg.actor.behav_imp_weight_cap
            mismatch = self._rollout_mismatch(
                mismatch_sums(aligned_from_rollout(batch["logprobs"]), training, wanted, cap)
            )
        # the behaviour policy's entropy and Σπ², before the update, in one pass; only the fields a stage reads.
        # Under the rollout's autocast and from the module that sampled: Σπ² must describe the distribution the
        # sampled log-probs came from (the optimal token baseline refuses a Σπ² below π_t²; bf16 logits against
        # float32 ones differ far more)
        stats = sampled_token_stats(
            self.engine, batch, temp, stage_batch_fields(self.actor.resolved), rows_per_chunk=size or 16
        )
        batch.update(stats)
        return batch, mismatch

    def _rollout_mismatch(self, local: MismatchSums) -> dict[str, float]:
        """`rollout_mismatch/*` of the sampled tokens over all ranks (sums added, the largest weight's max)."""
        cap = self.cfg.actor.behav_imp_weight_cap
        if self.ctx.is_distributed:
            summed = all_reduce_tensor(local.as_tensor(), self.ctx)
            largest = all_reduce_tensor(torch.tensor([local.weight_max], dtype=torch.float64), self.ctx, ReduceOp.MAX)
            summed[4] = largest[0]
            local = MismatchSums.from_tensor(summed)
        return mismatch_metrics(local, cap)

    def _reference_logprobs(
        self, ids: torch.Tensor, mask: torch.Tensor, wanted: torch.Tensor, *, temperature: float
    ) -> torch.Tensor:
        """The KL reference's aligned log-probs: the frozen copy, or the LoRA policy's base (adapters disabled)."""
        if self.reference_is_base:
            return self.engine.compute_logprobs(ids, mask, temperature, wanted=wanted, base=True)
        with self.engine.autocast():
            return reference_logprobs(self.reference, ids, mask, temperature, wanted=wanted)

    @staged("advantages")
    def compute_advantages(self, batch: dict[str, Any], meta: TrajBatchMeta | None) -> dict[str, Any]:
        return self.actor.compute_advantages(batch, meta, shaping=self.cfg.rollout.prm.advantage_shaping)

    def _policy_update(self, data: dict[str, Any]) -> tuple[dict[str, float], dict[str, float]]:
        """The actor's update statistics; with `logprobs_in_update` its forward also gives the proximal log-probs
        and, with `rollout.weights_dtype`, the `rollout_mismatch/*` metrics (else `{}`)."""
        if not self.logprobs_in_update:
            return self.actor.ppo_update(data), {}
        observer = MismatchObserver(self.cfg.actor.behav_imp_weight_cap) if self.engine.rollout_dtype else None
        stats = self.actor.ppo_update(data, proximal_from_forward=self.cfg.actor.use_decoupled_loss, observe=observer)
        return stats, {} if observer is None else self._rollout_mismatch(observer.sums)

    def _update(self, data: dict[str, Any], skip: bool) -> tuple[dict[str, float], dict[str, float]]:
        """Policy and critic updates (none when an observer left nothing to train on), then the sampling copy's
        refresh; (update statistics, `rollout_mismatch/*` from the update's forward)."""
        stats, mismatch = ({}, {}) if skip else self._policy_update(data)
        if self.critic is not None and stats:
            stats.update(self.critic.ppo_update(data))
        self.engine.sync_copies()  # FSDP or weights_dtype: the sampling copy takes the new weights
        self.engine.release_gradients()
        if self.critic is not None:
            self.critic.engine.release_gradients()
        return stats, mismatch

    @staged("evaluation")
    def evaluate(self, updates: int) -> dict[str, float]:
        """Greedy decoding of the held-out rows (`eval/*` metrics); rank 0 logs a few as samples."""
        start = time.perf_counter()
        metrics, records = self.evaluator.run(
            self.policy,
            self.task,
            self.ctx,
            budget=self.cfg.generation_budget,
            temperature=self.cfg.sampling_temperature,
            updates=updates,
        )
        metrics["eval/seconds"] = time.perf_counter() - start
        if self.ctx.is_main and self.cfg.eval.samples_per_step:
            self.sample_log.write(sample_rows(records, self.cfg.eval.samples_per_step, 1, updates, "eval"))
        return metrics

    @staged(lambda self, step: f"step {step}")
    def step(self, step: int) -> StepOutput:
        """One RL step: rollout, advantages, policy (and critic) update, metrics.

        Evaluation runs before the update of every `eval.every`-th step and
        after the last update (`eval/updates` says which policy it measured);
        rank 0 appends a few of the step's episodes to `samples.jsonl`. The
        row carries this process's `time/<phase>` seconds (see `PhaseTimer`),
        the throughputs of sampling and training and the peak memory so far.
        """
        timer = PhaseTimer(self.device)
        evaluation: dict[str, float] = {}
        if self.evaluator.due(step, after_update=False):
            with timer.phase("eval"):
                evaluation = self.evaluate(step)
        start = time.perf_counter()
        with timer.phase("rollout"):
            dicts, records = self.rollout()
            batch, meta = concat_batch(dicts)
        with timer.phase("reference"):
            batch, mismatch = self._prepare(batch)
        with timer.phase("advantages"):
            data = self.compute_advantages(batch, meta)
        observed = self.observers.at(Phase.ADVANTAGES, StepView(step, batch, meta, data), timer)
        data = observed.data  # what the update trains on: the pipeline's output, or an observer's (the filter's)
        with timer.phase("update"):
            stats, update_mismatch = self._update(data, observed.skip_update)
        # the step's own work: observers' own time (time/diagnostics) is not part of the run's throughput
        seconds = time.perf_counter() - start - sum(timer.seconds.get(name, 0.0) for name in self.observers.timed_as)
        row = self._metrics(step, records, data, stats, seconds)
        row.update(observed.metrics)
        counts = {
            "generated": float(sum(r.generated_tokens for r in records)),
            "trained": float(data["attention_mask"].sum()),
        }
        if self.ctx.is_distributed:
            row, counts = self._reduce_metrics(row, records, data, counts)
        row.update(mismatch or update_mismatch)  # over all ranks already
        if self.evaluator.due(step, after_update=True):
            with timer.phase("eval"):
                evaluation = self.evaluate(step + 1)
        row.update(evaluation)
        row.update(timer.metrics())
        row["throughput/sample_tokens_per_s"] = rate(counts["generated"], timer.seconds["rollout"])
        row["throughput/train_tokens_per_s"] = rate(counts["trained"], timer.seconds["update"])
        row.update(peak_memory_metrics(self.device))
        if self.ctx.is_main and self.cfg.eval.samples_per_step:
            self.sample_log.write(
                sample_rows(records, self.cfg.eval.samples_per_step, self.cfg.rollout.n_samples, step, "train")
            )
        return StepOutput(row, batch, data, records, meta)

    @staged("metrics")
    def _reduce_metrics(
        self, row: dict[str, Any], records: list[EpisodeRecord], data: dict[str, Any], counts: dict[str, float]
    ) -> tuple[dict[str, Any], dict[str, float]]:
        """The step's metrics over all ranks (the same row on every rank), and `counts` summed over ranks.

        Episode means are weighted by each rank's episodes, token means by its
        active tokens; the update statistics are global already. `adv_std` is
        rebuilt from the pooled first and second moments; `tokens_per_s` is all
        ranks' generated tokens per (mean) step time.
        """
        n_episodes, n_tokens = float(len(records)), float(data["loss_mask"].sum())
        local = {k: float(v) for k, v in row.items() if k != "step" and v is not None and k != "tokens_per_s"}
        local["_adv_sq_mean"] = row["adv_std"] ** 2 + row["adv_mean"] ** 2
        local.update({f"_count_{k}": v for k, v in counts.items()})
        local.pop("adv_std")
        weights = {
            k: n_episodes if k in _EPISODE_KEYS or k.startswith("reward/") else n_tokens if k in _TOKEN_KEYS else 1.0
            for k in local
        }
        out = reduce_metrics(local, self.ctx, weights=weights)
        reduced: dict[str, Any] = {"step": row["step"]}
        for key in row:
            if key == "step":
                continue
            reduced[key] = out.get(key)
        reduced["adv_std"] = math.sqrt(max(out["_adv_sq_mean"] - out["adv_mean"] ** 2, 0.0))
        summed = {k: out[f"_count_{k}"] * self.ctx.world_size for k in counts}  # equal weights: mean x ranks
        reduced["tokens_per_s"] = summed["generated"] / out["seconds"] if out["seconds"] > 0 else None
        return reduced, summed

    def _metrics(
        self, step: int, records: list[EpisodeRecord], data: dict[str, Any], stats: dict[str, float], seconds: float
    ) -> dict[str, float]:
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
        row.update({k: v for k, v in episode_metrics(records, 1.0, "").items() if k.startswith("reward/")})
        if "ref_logp" in data and isinstance(data.get("ref_logp"), torch.Tensor):
            row["kl"] = masked_stats(data["logprobs"] - data["ref_logp"], mask)[0]
        if "token_rewards" in data:
            row["process_reward_mean"] = masked_stats(data["token_rewards"].float(), data["loss_mask"])[0]
        return row

    # -- the run ----------------------------------------------------------------------------

    def run(self) -> RunResult:
        """Train up to `train.steps`, resuming first when planned; Ctrl-C stops early but keeps the outputs.

        Checkpoints every `train.save_every` steps and after the last one
        (`areal_adv.trainer.run.trainer_state`). Under data parallelism every rank runs
        the loop (collectives each step); only rank 0 writes config.yaml,
        metrics, the plot and checkpoints and reports progress.
        """
        cfg, main = self.cfg, self.ctx.is_main
        start, records = self._restore()
        if main:
            print(
                start_block(
                    cfg,
                    self.actor,
                    self.parts,
                    num_threads=self.num_threads,
                    device=self.device,
                    world_size=self.ctx.world_size,
                    precision=self.precision_note if cfg.model.mixed_precision is not None else None,
                ),
                flush=True,
            )
            print(self.kernel_warmup.message(), flush=True)
            for lines in self.observers.opening_lines():
                print(lines, flush=True)
            prepare_run_dir(self.plan, start)
            (self.run_dir / "config.yaml").write_text(config_to_yaml(cfg), encoding="utf-8")
        loggers = open_loggers(cfg, self.run_dir, records=records, start_step=start, is_main=main)
        progress = Progress(
            name=cfg.experiment_name,
            total=cfg.train.steps,
            start=start,
            every=cfg.train.log_every,
            enabled=cfg.output.progress_bar and main,
        )
        elapsed_before = float((records[-1].get("elapsed") if records else None) or 0.0)
        begin, interrupted, done, saved = time.perf_counter(), False, start, None
        mark, save_seconds = begin, 0.0
        try:
            for step in range(start, cfg.train.steps):
                out = self.step(step)
                row = out.metrics
                now = time.perf_counter()
                # a checkpoint is written after its row is logged: its time goes into the next row
                row["time/save"], save_seconds = save_seconds, 0.0
                row["time/step"], mark = now - mark, now
                row["elapsed"] = elapsed_before + now - begin
                row = loggers.log(row)
                self._after_logging(step, out, row)
                done = step + 1
                progress.update(done, row)
                if cfg.train.save_every and (done % cfg.train.save_every == 0 or done == cfg.train.steps):
                    save_start = time.perf_counter()
                    saved = self.save_checkpoint(done, loggers) or saved
                    save_seconds = time.perf_counter() - save_start
        except KeyboardInterrupt:
            interrupted = True
        finally:
            progress.close()
            loggers.close()
            self.observers.close()
        result = self._finish(loggers.records, done, interrupted, time.perf_counter() - begin)
        result.checkpoint, result.resumed_from = saved, self.plan.resume_from
        result.last_save_seconds = save_seconds
        if not interrupted:
            barrier(self.ctx)  # ranks leave together, after rank 0 has written everything
        return result

    @staged(lambda self, step, out, row: f"step {step}")
    def _after_logging(self, step: int, out: StepOutput, row: dict[str, Any]) -> None:
        """The `LOGGED` observers, once the step's row is written (the parameter checksums)."""
        self.observers.at(Phase.LOGGED, StepView(step, out.batch, out.meta, out.data, row), PhaseTimer())

    @staged("resuming from a checkpoint")
    def _restore(self) -> tuple[int, list[dict[str, Any]]]:
        """Load the planned checkpoint into this freshly built trainer: (next step, metrics rows before it)."""
        if self.plan.resume_from is None:
            return 0, []
        restored = load_trainer_checkpoint(self, self.plan.resume_from)
        if restored.step > self.cfg.train.steps:
            raise RunDirectoryError(
                f"train.steps: got {self.cfg.train.steps}, but the checkpoint "
                f"{restored.folder} is at step {restored.step}; raise train.steps to continue"
            )
        if self.ctx.is_main:
            print(f"[areal-adv] resuming from {restored.folder} (step {restored.step})", flush=True)
        return restored.step, restored.records

    @staged(lambda self, step, loggers: f"step {step} > checkpoint")
    def save_checkpoint(self, step: int, loggers: RunLoggers) -> Path | None:
        """Write `checkpoints/step_<step>` (a collective; rank 0 writes), then keep the newest `train.keep_last`."""
        from areal_adv.utils.checkpoint_folders import checkpoint_root, prune

        loggers.flush()  # what the checkpoint covers is on disk in every sink
        folder = save_trainer_checkpoint(self, step, loggers.records)
        if folder is not None:
            prune(checkpoint_root(self.run_dir), self.cfg.train.keep_last)
        return folder

    @staged("writing the run's outputs")
    def _finish(self, records: list[dict[str, Any]], done: int, interrupted: bool, seconds: float) -> RunResult:
        cfg = self.cfg
        plot_path = None
        if cfg.output.plot and records:
            plot_path = self.run_dir / "curves.png"
            if self.ctx.is_main:
                plot_curves(records, plot_path, title=cfg.experiment_name, smoothing=cfg.output.plot_smoothing)
        first, last = reward_windows(len(records))
        return RunResult(
            run_dir=self.run_dir,
            metrics_path=self.run_dir / "metrics.jsonl",
            plot_path=plot_path,
            steps_done=done,
            interrupted=interrupted,
            seconds=seconds,
            first_reward=window_mean(records, "reward_mean", first=first) if first else None,
            last_reward=window_mean(records, "reward_mean", last=last) if last else None,
            first_steps=first,
            last_steps=last,
        )
