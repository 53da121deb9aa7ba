"""The advantage pipeline: public stage types, stage resolution and orchestration.

Default order (advantage.md §4): length penalty -> outcome reward shaping ->
reward scaling/normalisation -> KL and reward placement -> temporal estimator ->
advantage normalisation -> process advantage shaping. Each of the three marked
stages (`outcome_reward_shaping`, `estimator`, `process_adv_shaping`) can be
replaced by an importable function, or the whole computation by `compute`.
The caller's batch is never modified; a new dict is returned.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from areal.api.cli_args import GVPO_PARAMS, PPOActorConfig, StageSpec
from areal.trainer.ppo import advantage_algorithms as algos
from areal.trainer.ppo.advantage_algorithms import (
    ProcessAdvantageInputs,
    TemporalInputs,
    TemporalResult,
)
from areal.trainer.ppo.batch_checks import BatchError, check_batch
from areal.trainer.ppo.contracts import (
    StageContractError,
    check_binary_mask,
    check_tensor,
    check_unmodified,
    clone_dataclass,
    snapshot,
)
from areal.trainer.ppo.rewards import normalize_rollout_rewards, overlong_penalty, scale_scores
from areal.utils.data import KLEstimator, Normalization, TrajBatchMeta
from areal.utils.dynamic_import import bind_kwargs, resolve_function

__all__ = [
    "AdvantageInputs",
    "AdvantageResult",
    "OutcomeResult",
    "OutcomeRewardInputs",
    "ProcessAdvantageInputs",
    "TemporalInputs",
    "TemporalResult",
    "ResolvedAdvantage",
    "resolve_advantage",
    "run_advantage_pipeline",
    "compute_default_advantages",
    "ALLOWED_EXTRAS",
]

PRM_MODES = ("additive", "gvpo", "process_weighted")
ALLOWED_EXTRAS = frozenset({"input_token_loss_mask", "is_truncated", "mopd_behavior_logprobs", "prox_logp", "ref_logp"})


# ---------------------------------------------------------------------------
# Public stage types
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class OutcomeRewardInputs:
    """Input of an outcome-reward shaping function.

    `data` is the rollout batch after the length penalty (`data["rewards"]` is the
    penalised per-row reward); `meta` holds trajectory and logical-rollout grouping.
    """

    data: Mapping[str, Any]
    config: PPOActorConfig
    meta: TrajBatchMeta


@dataclass(frozen=True)
class OutcomeResult:
    """One reward per tensor row; optionally one shaped reference per logical rollout.

    `normalization_rewards` are the transformed references used by reward
    normalisation over split rollouts, before bias, scaling and clipping.
    """

    rewards: torch.Tensor
    normalization_rewards: torch.Tensor | None = None


@dataclass(frozen=True)
class AdvantageInputs:
    """Input of a full replacement (`actor.advantage.compute.implementation`): the raw batch."""

    data: Mapping[str, Any]
    config: PPOActorConfig
    meta: TrajBatchMeta
    advantage_shaping_mode: str = "additive"
    gvpo_negative_scale: float = 0.2
    gvpo_zero_penalty: float = 0.4
    gvpo_zero_eps: float = 1e-6
    #: False when `meta` was synthesised for a bare batch (legacy fixed group size).
    meta_is_complete: bool = True


@dataclass(frozen=True)
class AdvantageResult:
    """Everything the PPO update needs, aligned to next-token prediction."""

    advantages: torch.Tensor
    returns: torch.Tensor
    loss_mask: torch.Tensor
    logprobs: torch.Tensor
    rewards: torch.Tensor
    total_rewards: torch.Tensor
    kl_rewards: torch.Tensor
    extras: Mapping[str, torch.Tensor] = field(default_factory=dict)


# ---------------------------------------------------------------------------
# Resolution (runs once per actor worker, in PPOActor.__init__)
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ResolvedStage:
    stage: str
    implementation: str
    fn: Callable[..., Any]
    custom: bool
    kwargs: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ResolvedAdvantage:
    """The functions an actor worker will run, resolved from the config."""

    compute: ResolvedStage | None  # None = the default pipeline
    outcome: ResolvedStage
    estimator: ResolvedStage | None  # None = follow actor.gae_timestep_unit
    process: ResolvedStage | None  # None = the call-time PRM mode
    gae_lambda: float | Callable[..., torch.Tensor]
    gae_lambda_kwargs: Mapping[str, Any]
    gae_lambda_source: str

    def describe(self, config: PPOActorConfig) -> list[tuple[str, str, str]]:
        """(stage, implementation, kwargs) rows for `areal validate`."""
        if self.compute is not None:
            return [("compute", self.compute.implementation, repr(dict(self.compute.kwargs)))]
        estimator = self.estimator.implementation if self.estimator else f"{config.gae_timestep_unit}_gae (follows actor.gae_timestep_unit)"
        process = self.process.implementation if self.process else "call-time PRM mode (additive unless the trainer passes one)"
        rows = [
            ("compute", "default", "{}"),
            ("outcome_reward_shaping", self.outcome.implementation, repr(dict(self.outcome.kwargs))),
            ("estimator", estimator, repr(dict(self.estimator.kwargs)) if self.estimator else "{}"),
            ("process_adv_shaping", process, repr(dict(self.process.kwargs)) if self.process else "{}"),
        ]
        lam = self.gae_lambda if isinstance(self.gae_lambda, float) else self.gae_lambda_source
        rows.append(("gae_lambda", str(lam), repr(dict(self.gae_lambda_kwargs))))
        return rows


def _resolve_stage(stage: str, spec: StageSpec, builtins: Mapping[str, Callable[..., Any]], default: str) -> ResolvedStage:
    name = default if spec.implementation == "auto" else spec.implementation
    if name in builtins:
        fn = builtins[name]
        if spec.kwargs:
            fn = bind_kwargs(fn, spec.kwargs, stage=f"actor.advantage.{stage}", path=name)
        return ResolvedStage(stage, name, fn, custom=False, kwargs=dict(spec.kwargs))
    fn = resolve_function(name, spec.kwargs, stage=f"actor.advantage.{stage}")
    return ResolvedStage(stage, name, fn, custom=True, kwargs=dict(spec.kwargs))


def _resolve_gae_lambda(config: PPOActorConfig) -> tuple[float | Callable[..., torch.Tensor], str]:
    from areal.trainer.ppo.lambda_fn import BUILTIN_LAMBDAS

    value = config.gae_lambda
    if not isinstance(value, str):
        return float(value), "actor.gae_lambda"
    source = f"actor.gae_lambda ({value})"
    if value in BUILTIN_LAMBDAS:
        fn = BUILTIN_LAMBDAS[value]
        bind_kwargs(fn, config.gae_lambda_kwargs, stage="actor.gae_lambda", path=value)
        return fn, source
    fn = resolve_function(value, config.gae_lambda_kwargs, stage="actor.gae_lambda")
    # Keep the raw function; kwargs travel separately through compute_gae_lambda.
    return getattr(fn, "func", fn), source


def resolve_advantage(config: PPOActorConfig) -> ResolvedAdvantage:
    """Resolve every configured function; import errors name the stage and path."""
    adv = config.advantage
    adv.validate()
    gae_lambda, lambda_source = _resolve_gae_lambda(config)
    lambda_kwargs = dict(config.gae_lambda_kwargs) if callable(gae_lambda) else {}
    if adv.replaces_compute:
        fn = resolve_function(adv.compute.implementation, adv.compute.kwargs, stage="actor.advantage.compute")
        compute = ResolvedStage("compute", adv.compute.implementation, fn, custom=True, kwargs=dict(adv.compute.kwargs))
        identity = ResolvedStage("outcome_reward_shaping", "identity", algos.identity_outcome, custom=False)
        return ResolvedAdvantage(compute, identity, None, None, gae_lambda, lambda_kwargs, lambda_source)
    from areal.trainer.ppo import peer_algorithms

    outcome_spec = adv.outcome_reward_shaping or StageSpec("identity")
    outcome_builtins = {**algos.BUILTIN_OUTCOME, **peer_algorithms.OUTCOME}
    outcome = _resolve_stage("outcome_reward_shaping", outcome_spec, outcome_builtins, "identity")
    estimator = None
    if adv.estimator is not None:
        default = f"{config.gae_timestep_unit}_gae"
        estimator_builtins = {**algos.BUILTIN_ESTIMATORS, **peer_algorithms.ESTIMATORS}
        estimator = _resolve_stage("estimator", adv.estimator, estimator_builtins, default)
    process = None
    spec = adv.process_adv_shaping
    if spec is not None and spec.implementation != "auto":
        if spec.implementation == "gvpo":
            # GVPO kwargs are merged with the call-time legacy values at run time.
            process = ResolvedStage("process_adv_shaping", "gvpo", algos.gvpo, custom=False, kwargs=dict(spec.kwargs))
        else:
            process = _resolve_stage("process_adv_shaping", spec, algos.BUILTIN_PROCESS, "additive")
    return ResolvedAdvantage(None, outcome, estimator, process, gae_lambda, lambda_kwargs, lambda_source)


# ---------------------------------------------------------------------------
# Running stages under their contracts
# ---------------------------------------------------------------------------


def _call_stage(stage: ResolvedStage, inputs: Any, **kwargs: Any) -> Any:
    """Call a stage; custom ones get cloned inputs and are checked for in-place writes."""
    if not stage.custom:
        return stage.fn(inputs, **kwargs)
    protected = clone_dataclass(inputs)
    if hasattr(protected, "config"):
        object.__setattr__(protected, "config", copy.deepcopy(protected.config))
    before = snapshot(protected)
    try:
        result = stage.fn(protected, **kwargs)
    except (StageContractError, BatchError):
        raise
    except Exception as exc:
        raise StageContractError(stage.stage, stage.implementation, f"raised {type(exc).__name__}: {exc}") from exc
    check_unmodified(before, protected, stage.stage, stage.implementation)
    return result


@dataclass(frozen=True)
class CallOptions:
    """Call-time PRM selection (the legacy interface the trainer passes through)."""

    advantage_shaping_mode: str = "additive"
    gvpo_negative_scale: float = 0.2
    gvpo_zero_penalty: float = 0.4
    gvpo_zero_eps: float = 1e-6

    def legacy_gvpo(self) -> dict[str, float]:
        return {
            "negative_scale": self.gvpo_negative_scale,
            "zero_penalty": self.gvpo_zero_penalty,
            "zero_eps": self.gvpo_zero_eps,
        }


def _select_process(resolved: ResolvedAdvantage, config: PPOActorConfig, options: CallOptions) -> tuple[ResolvedStage, dict[str, Any]]:
    """Explicit config wins over the call-time mode; explicit GVPO kwargs override legacy ones."""
    stage = resolved.process
    if stage is None:
        mode = options.advantage_shaping_mode
        if mode not in PRM_MODES:
            raise ValueError(f"advantage_shaping_mode: got {mode!r}, expected one of {list(PRM_MODES)}")
        if mode in ("gvpo", "process_weighted") and not config.token_rewards_as_adv:
            raise ValueError(f"advantage_shaping_mode={mode!r} requires actor.token_rewards_as_adv=true (got false)")
        if mode == "process_weighted" and config.mask_no_eos_with_zero:
            raise ValueError("advantage_shaping_mode='process_weighted' requires actor.mask_no_eos_with_zero=false (got true)")
        stage = ResolvedStage("process_adv_shaping", mode, algos.BUILTIN_PROCESS[mode], custom=False)
        return stage, (options.legacy_gvpo() if mode == "gvpo" else {})
    if stage.implementation == "gvpo" and not stage.custom:
        merged = options.legacy_gvpo()
        merged.update({k: v for k, v in stage.kwargs.items() if k in GVPO_PARAMS})
        algos.check_gvpo_params(**merged, where="actor.advantage.process_adv_shaping (gvpo)")
        return stage, merged
    return stage, {}


# ---------------------------------------------------------------------------
# The default pipeline
# ---------------------------------------------------------------------------


def _run_outcome(stage: ResolvedStage, inputs: OutcomeRewardInputs, B: int, device: torch.device) -> OutcomeResult:
    result = _call_stage(stage, inputs)
    if not stage.custom:  # built-ins are covered by tests, not re-checked on the hot path
        return result
    if not isinstance(result, OutcomeResult):
        raise StageContractError(stage.stage, stage.implementation, f"returned {type(result).__name__}, expected OutcomeResult(rewards=...)")
    check_tensor(stage.stage, stage.implementation, "rewards", result.rewards, shape=(B,), device=device)
    if result.normalization_rewards is not None:
        n_logical = sum(inputs.meta.logical_group_sizes)
        check_tensor(stage.stage, stage.implementation, "normalization_rewards", result.normalization_rewards,
                     shape=(n_logical,), device=device)
    return result


def _has_explicit_references(meta: TrajBatchMeta) -> bool:
    return any(g is not None and g.rewards is not None for g in (meta.rollout_groups or ()))


def _normalise_scores(
    rewards: torch.Tensor,
    unpenalized: torch.Tensor | None,
    outcome: OutcomeResult,
    stage: ResolvedStage,
    config: PPOActorConfig,
    meta: TrajBatchMeta,
    meta_complete: bool,
) -> torch.Tensor:
    """Step 3: bias/scale/clip, then reward normalisation (per logical rollout when split)."""
    scale_kw = dict(bias=config.reward_bias, scaling=config.reward_scaling, clip=config.reward_clip)
    if config.reward_norm is None:
        return scale_scores(rewards, **scale_kw)
    norm = Normalization(config.reward_norm)
    shaped_refs = outcome.normalization_rewards
    if shaped_refs is not None and not meta_complete:
        raise StageContractError(
            stage.stage, stage.implementation,
            "returned normalization_rewards, but the batch has no complete concat_batch metadata; shaped "
            "references need the TrajBatchMeta produced by concat_batch",
        )
    if stage.custom and shaped_refs is None and meta_complete and _has_explicit_references(meta):
        raise StageContractError(
            stage.stage, stage.implementation,
            "the batch has explicit per-logical-rollout reference rewards (meta.rollout_groups[*].rewards) and "
            "reward_norm is on, so a custom outcome stage must return OutcomeResult.normalization_rewards: one "
            f"transformed reference per logical rollout ({sum(meta.logical_group_sizes)} here), before bias, "
            "scaling and clipping",
        )
    if meta_complete and (meta.rollout_groups is not None or shaped_refs is not None):
        return normalize_rollout_rewards(
            rewards, norm, meta, **scale_kw, unpenalized_rewards=unpenalized, shaped_references=shaped_refs
        )
    group_sizes = list(meta.traj_group_sizes) if meta_complete else None
    return norm(scale_scores(rewards, **scale_kw), group_sizes=group_sizes)


def _process_rewards(
    data: Mapping[str, Any],
    loss_mask: torch.Tensor,
    turn_ids: torch.Tensor | None,
    truncated: torch.Tensor,
    config: PPOActorConfig,
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """Step 4 (process part): direct token advantages, or rewards folded at turn ends."""
    token_rewards = data.get("token_rewards")
    if token_rewards is None:
        return None, None
    tr = token_rewards.to(torch.float32)
    if config.mask_no_eos_with_zero:
        tr = torch.where(truncated.unsqueeze(-1), torch.zeros_like(tr), tr)
    rolled = torch.roll(tr, shifts=-1, dims=-1)
    if config.token_rewards_as_adv:
        return rolled * loss_mask, None
    raw_mask = data["loss_mask"].bool()
    same_turn = raw_mask[:, :-1] & raw_mask[:, 1:]
    if data.get("turn_ids") is not None:
        raw_turns = data["turn_ids"]
        same_turn &= raw_turns[:, :-1] == raw_turns[:, 1:]
    differs = same_turn & (tr[:, :-1] != tr[:, 1:])
    if bool(differs.any()):
        row, col = (int(i) for i in differs.nonzero()[0])
        raise BatchError(
            "token_rewards: with actor.token_rewards_as_adv=false process rewards are folded into the reward at "
            f"each turn's last token and must be constant within a turn; row {row} changes from "
            f"{float(tr[row, col])!r} to {float(tr[row, col + 1])!r} at positions {col}->{col + 1}. "
            "Use token_rewards_as_adv=true for dense per-token rewards"
        )
    next_active = torch.zeros_like(loss_mask)
    next_active[:, :-1] = loss_mask[:, 1:]
    if turn_ids is not None:
        next_active[:, :-1] *= turn_ids[:, :-1] == turn_ids[:, 1:]
    return None, rolled * (loss_mask * (1 - next_active))


def _run_temporal(stage: ResolvedStage, inputs: TemporalInputs, B: int, T: int, device: torch.device) -> TemporalResult:
    result = _call_stage(stage, inputs)
    if not stage.custom:
        return result
    if not isinstance(result, TemporalResult):
        raise StageContractError(stage.stage, stage.implementation,
                                 f"returned {type(result).__name__}, expected TemporalResult(advantages, returns, total_rewards)")
    for name in ("advantages", "returns", "total_rewards"):
        check_tensor(stage.stage, stage.implementation, name, getattr(result, name), shape=(B, T), device=device)
    return result


def _synthesise_meta(config: PPOActorConfig, B: int) -> TrajBatchMeta:
    """Metadata for a bare batch: the legacy fixed group size when it divides B."""
    norm = config.reward_norm or config.adv_norm
    size = norm.group_size if norm is not None and B % norm.group_size == 0 else 1
    return TrajBatchMeta.from_group_sizes([size] * (B // size))


def run_advantage_pipeline(
    data: Mapping[str, Any],
    meta: TrajBatchMeta | None,
    config: PPOActorConfig,
    resolved: ResolvedAdvantage,
    options: CallOptions = CallOptions(),
) -> dict[str, Any]:
    """Validate the batch, run the configured computation, return a NEW output dict."""
    recompute_prox = config.recompute_logprob and not config.use_decoupled_loss
    check_batch(data, recompute_prox=recompute_prox)
    B, T = data["input_ids"].shape
    meta_complete = meta is not None
    if meta is None:
        meta = _synthesise_meta(config, B)
    else:
        meta.validate(B)
    if resolved.compute is not None:
        return _run_full_replacement(data, meta, meta_complete, config, resolved.compute, options)
    fields = _default_fields(data, meta, meta_complete, config, resolved, options)
    out = dict(data)
    out.update(fields)
    return out


def _default_fields(
    data: Mapping[str, Any],
    meta: TrajBatchMeta,
    meta_complete: bool,
    config: PPOActorConfig,
    resolved: ResolvedAdvantage,
    options: CallOptions,
) -> dict[str, Any]:
    B, T = data["input_ids"].shape
    device = data["input_ids"].device
    rows = torch.arange(B, device=device)
    process_stage, process_kwargs = _select_process(resolved, config, options)
    estimator = resolved.estimator or ResolvedStage(
        "estimator", f"{config.gae_timestep_unit}_gae", algos.BUILTIN_ESTIMATORS[f"{config.gae_timestep_unit}_gae"], custom=False
    )

    # 1. Length penalty.
    rewards = data["rewards"]
    unpenalized = None
    if config.overlong_reward_penalty:
        unpenalized = rewards
        rewards = overlong_penalty(
            rewards, data["loss_mask"], max_new_tokens=config.max_new_tokens,
            overlong_tokens=config.overlong_tokens, overlong_penalty_factor=config.overlong_penalty_factor,
        )
    penalised = dict(data)
    penalised["rewards"] = rewards

    # 2. Outcome reward shaping.
    outcome = _run_outcome(resolved.outcome, OutcomeRewardInputs(penalised, config, meta), B, device)
    # 3. Reward scaling and normalisation.
    score = _normalise_scores(outcome.rewards, unpenalized, outcome, resolved.outcome, config, meta, meta_complete)

    # 4. Alignment, KL rewards and reward placement.
    loss_mask = torch.roll(data["loss_mask"].to(torch.float32), shifts=-1, dims=-1)
    extras: dict[str, Any] = {}
    if "mopd_teacher_logp_sum" in data:
        extras["mopd_behavior_logprobs"] = (torch.roll(data["logprobs"], shifts=-1, dims=-1) * loss_mask).detach()
    turn_ids = data.get("turn_ids")
    if turn_ids is not None:
        turn_ids = torch.roll(turn_ids.long(), shifts=-1, dims=-1)
        turn_ids[:, -1] = -1
    if config.recompute_logprob and not config.use_decoupled_loss:
        old_logp = data["prox_logp"] * loss_mask
    else:
        old_logp = torch.roll(data["logprobs"], shifts=-1, dims=-1) * loss_mask
    prox_logp = data.get("prox_logp") if config.use_decoupled_loss else old_logp
    seqlens = data["attention_mask"].long().sum(-1)
    truncated = data.get("is_truncated")
    truncated = seqlens == T if truncated is None else truncated.to(torch.bool)
    kl_rewards = _kl_rewards(old_logp, data.get("ref_logp"), loss_mask, config)
    # KL at the position after each row's last token is not a reward. It is zero
    # already unless that position is active (a row without prompt filling T), so
    # the [B, T] copy is only made when it matters.
    gae_kl = kl_rewards
    if bool(kl_rewards[rows, seqlens - 1].any()):
        gae_kl = kl_rewards.clone()
        gae_kl[rows, seqlens - 1] = 0
    score = score.to(torch.float32)
    if config.mask_no_eos_with_zero:
        score = torch.where(truncated, torch.zeros_like(score), score)
    outcome_tok = torch.zeros_like(kl_rewards)
    outcome_tok[rows, torch.clamp(seqlens - 2, min=0)] = score
    token_adv, folded = _process_rewards(data, loss_mask, turn_ids, truncated, config)

    # 5. Temporal estimator.
    zeros = torch.zeros((), dtype=torch.float32, device=device).expand(B, T)  # a view, no memory
    values = data.get("values")
    values = zeros if values is None else values
    temporal_inputs = TemporalInputs(
        outcome_rewards=outcome_tok,
        kl_rewards=gae_kl,
        process_rewards=folded if folded is not None else zeros,
        values=values,
        loss_mask=loss_mask,
        turn_ids=turn_ids,
        is_truncated=truncated,
        bootstrap_values=values[rows, seqlens - 1],
        seqlens=seqlens,
        discount=config.discount,
        gae_lambda=resolved.gae_lambda,
        gae_lambda_kwargs=resolved.gae_lambda_kwargs,
        gae_lambda_source=resolved.gae_lambda_source,
        meta=meta,
    )
    temporal = _run_temporal(estimator, temporal_inputs, B, T, device)
    del temporal_inputs, outcome_tok, folded  # free [B, T] buffers before normalisation

    # 6. Advantage normalisation.
    advantages = temporal.advantages
    if config.adv_norm is not None:
        advantages = Normalization(config.adv_norm)(
            advantages,
            loss_mask,
            group_sizes=list(meta.traj_group_sizes) if meta_complete else None,
            logical_group_sizes=list(meta.logical_group_sizes) if meta_complete else None,
        )

    # 7. Process advantage shaping.
    process_inputs = ProcessAdvantageInputs(advantages=advantages, token_rewards=token_adv, loss_mask=loss_mask, meta=meta)
    if process_stage.custom or token_adv is not None:
        advantages = _call_stage(process_stage, process_inputs, **process_kwargs)
        if process_stage.custom:
            check_tensor(process_stage.stage, process_stage.implementation, "advantages", advantages,
                         shape=(B, T), device=device)

    # 8. Output.
    fields = {
        "advantages": advantages,
        "returns": temporal.returns,
        "loss_mask": loss_mask,
        "logprobs": old_logp,
        "kl_rewards": kl_rewards,
        "tot_rewards": temporal.total_rewards,
        "prox_logp": prox_logp,
        "is_truncated": truncated,
        "rewards": outcome.rewards,
    }
    if prox_logp is None:
        del fields["prox_logp"]
    fields.update(extras)
    return fields


def _kl_rewards(
    old_logp: torch.Tensor, ref_logp: torch.Tensor | None, loss_mask: torch.Tensor, config: PPOActorConfig
) -> torch.Tensor:
    """-kl_ctl * KL(old || ref) on active positions (both log-probs masked)."""
    ref = torch.zeros_like(old_logp) if ref_logp is None else ref_logp * loss_mask
    return KLEstimator(config.kl_estimator)(old_logp, ref).mul_(-config.kl_ctl)


# ---------------------------------------------------------------------------
# Full replacement
# ---------------------------------------------------------------------------


def compute_default_advantages(inputs: AdvantageInputs) -> AdvantageResult:
    """The default pipeline as an `AdvantageInputs -> AdvantageResult` function.

    A full replacement can call this and post-process, or use it as a template.
    """
    resolved = resolve_advantage(_default_stage_config(inputs.config))
    options = CallOptions(inputs.advantage_shaping_mode, inputs.gvpo_negative_scale,
                          inputs.gvpo_zero_penalty, inputs.gvpo_zero_eps)
    fields = _default_fields(inputs.data, inputs.meta, inputs.meta_is_complete, inputs.config, resolved, options)
    extras = {k: fields[k] for k in ALLOWED_EXTRAS if k in fields}
    return AdvantageResult(
        advantages=fields["advantages"], returns=fields["returns"], loss_mask=fields["loss_mask"],
        logprobs=fields["logprobs"], rewards=fields["rewards"], total_rewards=fields["tot_rewards"],
        kl_rewards=fields["kl_rewards"], extras=extras,
    )


def _default_stage_config(config: PPOActorConfig) -> PPOActorConfig:
    """The same actor config with `compute` reset to the default (stages unconfigured)."""
    from areal.api.cli_args import AdvantageConfig

    return dataclasses.replace(config, advantage=AdvantageConfig())


def _run_full_replacement(
    data: Mapping[str, Any],
    meta: TrajBatchMeta,
    meta_complete: bool,
    config: PPOActorConfig,
    stage: ResolvedStage,
    options: CallOptions,
) -> dict[str, Any]:
    B, T = data["input_ids"].shape
    device = data["input_ids"].device
    inputs = AdvantageInputs(dict(data), config, meta, options.advantage_shaping_mode,
                             options.gvpo_negative_scale, options.gvpo_zero_penalty, options.gvpo_zero_eps,
                             meta_is_complete=meta_complete)
    result = _call_stage(stage, inputs)
    if not isinstance(result, AdvantageResult):
        raise StageContractError(stage.stage, stage.implementation, f"returned {type(result).__name__}, expected AdvantageResult")
    for name in ("advantages", "returns", "loss_mask", "logprobs", "total_rewards", "kl_rewards"):
        check_tensor(stage.stage, stage.implementation, name, getattr(result, name), shape=(B, T), device=device)
    check_binary_mask(stage.stage, stage.implementation, "loss_mask", result.loss_mask)
    check_tensor(stage.stage, stage.implementation, "rewards", result.rewards, shape=(B,), device=device)
    extras = dict(result.extras or {})
    unknown = sorted(set(extras) - ALLOWED_EXTRAS)
    if unknown:
        raise StageContractError(
            stage.stage, stage.implementation,
            f"extras may only hold {sorted(ALLOWED_EXTRAS)}; got {unknown} (rollout fields such as input_ids, "
            "values or original rewards cannot be overwritten)",
        )
    for name, value in extras.items():
        shape = (B,) if name == "is_truncated" else (B, T)
        check_tensor(stage.stage, stage.implementation, f"extras[{name!r}]", value, shape=shape, device=device,
                     floating=name != "is_truncated")
    out = dict(data)
    out.update(
        advantages=result.advantages, returns=result.returns, loss_mask=result.loss_mask.to(torch.float32),
        logprobs=result.logprobs, rewards=result.rewards, tot_rewards=result.total_rewards,
        kl_rewards=result.kl_rewards,
    )
    out.update(extras)
    return out
