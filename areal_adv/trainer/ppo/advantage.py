"""The advantage pipeline: the list of stages, in order.

The docs give the same list with the fields each stage reads and writes (*Custom advantage
computation*, *The default pipeline*).

1. length penalty            -> `rewards.apply_length_penalty`
2. outcome reward shaping    -> `actor.advantage.outcome_reward_shaping` (replaceable)
3. reward scaling / norm     -> `rewards.normalise_scores`
4. KL and reward placement   -> `placement`
5. temporal estimator        -> `actor.advantage.estimator` (replaceable)
6. advantage normalisation   -> `Normalization(actor.adv_norm)`
7. process advantage shaping -> `actor.advantage.process_adv_shaping` (replaceable)
8. output fields

On CPU, steps 4-6 of the built-in GAE estimators run in fused kernels
(`fused`, same results) unless something in the batch or config needs the
tensor steps. `actor.advantage.compute` replaces the whole list. The public stage types live in
`stage_types` and stage resolution in `stage_resolution`; both are re-exported
here, the public module path for plugins. The caller's batch is never modified;
a new dict is returned.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from areal_adv.api.cli_args import AdvantageConfig, AdvantageShaping, PPOActorConfig
from areal_adv.trainer.ppo.checks.aux_fields import (
    ROLLOUT_IS_WEIGHTS,
    SUM_PI_SQUARED,
    aligned_anchor_ids,
    aligned_token_entropy,
    aligned_token_values,
    check_aux_fields,
    declared_fields,
    stage_reads,
)
from areal_adv.trainer.ppo.checks.batch_checks import BatchStats, check_batch_structure, check_batch_values, check_meta
from areal_adv.trainer.ppo.checks.contracts import (
    call_stage,
    check_full_result,
    check_outcome_result,
    check_temporal_result,
    check_tensor,
)
from areal_adv.trainer.ppo.fused import run_fused_steps, use_fused
from areal_adv.trainer.ppo.output_guard import GuardContext, guard_outputs
from areal_adv.trainer.ppo.outputs import unalias
from areal_adv.trainer.ppo.placement import (
    AlignedBatch,
    StepFields,
    align_batch,
    kl_rewards,
    place_outcome,
    process_rewards,
    reward_kl,
)
from areal_adv.trainer.ppo.rewards.components import check_reduced, outcome_stage_inputs
from areal_adv.trainer.ppo.rewards.running_norm import running_normalise
from areal_adv.trainer.ppo.rewards.scores import normalise_scores
from areal_adv.trainer.ppo.stage_resolution import (
    PRM_MODES,
    CallOptions,
    ResolvedAdvantage,
    ResolvedStage,
    default_estimator,
    resolve_advantage,
    select_process,
)
from areal_adv.trainer.ppo.stage_state import StageState
from areal_adv.trainer.ppo.stage_types import (
    ALLOWED_EXTRAS,
    AdvantageInputs,
    AdvantageResult,
    OutcomeResult,
    OutcomeRewardInputs,
    ProcessAdvantageInputs,
    TemporalInputs,
    TemporalResult,
)
from areal_adv.utils.data import Normalization, TrajBatchMeta

__all__ = [
    "AdvantageInputs",
    "AdvantageResult",
    "OutcomeResult",
    "OutcomeRewardInputs",
    "ProcessAdvantageInputs",
    "TemporalInputs",
    "TemporalResult",
    "CallOptions",
    "PRM_MODES",
    "ResolvedAdvantage",
    "ResolvedStage",
    "resolve_advantage",
    "run_advantage_pipeline",
    "compute_default_advantages",
    "ALLOWED_EXTRAS",
]


def run_advantage_pipeline(
    data: Mapping[str, Any],
    meta: TrajBatchMeta | None,
    config: PPOActorConfig,
    resolved: ResolvedAdvantage,
    options: AdvantageShaping = AdvantageShaping(),
) -> dict[str, Any]:
    """Validate the batch, run the configured computation, return a NEW output dict.

    Every field the pipeline emits is a tensor of its own (never the caller's);
    the batch's other fields are passed through as the caller's tensors. One
    sharing is by design: without `use_decoupled_loss`, `prox_logp` is the same
    tensor as `logprobs` (the proximal policy is the behaviour policy).
    """
    n_rows, n_pos = check_batch_structure(
        data, recompute_prox=config.recompute_logprob and not config.use_decoupled_loss
    )
    if meta is None:
        meta = synthesise_meta(config, n_rows)
    else:
        check_meta(meta, n_rows)
    if resolved.compute is not None:
        magnitudes = check_batch_values(data)
        fields = _run_full_replacement(data, meta, config, resolved.compute, options)
    else:
        fields, magnitudes = _default_fields(data, meta, config, resolved, options)
    context = GuardContext(
        config=config,
        resolved=resolved,
        options=options,
        stats=BatchStats(n_rows, n_pos, magnitudes),
        meta=meta,
        has_token_rewards=data.get("token_rewards") is not None,
    )
    guard_outputs(fields, context)
    out = dict(data)
    out.update(unalias(fields, data))
    return out


def synthesise_meta(config: PPOActorConfig, n_rows: int) -> TrajBatchMeta:
    """Metadata for a bare batch: the legacy fixed group size when it divides B."""
    norm = config.reward_norm or config.adv_norm
    size = norm.fallback_group_size if norm is not None and n_rows % norm.fallback_group_size == 0 else 1
    return dataclasses.replace(TrajBatchMeta.from_group_sizes([size] * (n_rows // size)), complete=False)


# ---------------------------------------------------------------------------
# The default pipeline
# ---------------------------------------------------------------------------


def _default_fields(
    data: Mapping[str, Any],
    meta: TrajBatchMeta,
    config: PPOActorConfig,
    resolved: ResolvedAdvantage,
    options: AdvantageShaping,
) -> tuple[dict[str, Any], dict[str, float]]:
    """The new and replaced batch fields, one block per stage of the default pipeline, and the input magnitudes.

    The fused kernels check the batch's [B, T] values as they read them and
    return the largest |values| for the output guard; the tensor steps need the
    values checked first, and `check_batch_values` finds the magnitudes.
    """
    process_stage, process_kwargs = select_process(resolved, config, options)
    estimator = default_estimator(resolved, config)
    fused = use_fused(data, config, resolved)
    magnitudes = None if fused else check_batch_values(data)
    check_aux_fields(data, stage_reads(estimator) | stage_reads(process_stage))
    try:
        # 1. Length penalty (one more reward component when rewards are [B, K]).
        outcome_inputs, unpenalized = outcome_stage_inputs(data, config, meta, resolved.outcome)
        # 2. Outcome reward shaping.
        outcome = _run_outcome(resolved.outcome, outcome_inputs)
        # 3. Reward scaling and normalisation.
        score = normalise_scores(
            outcome, unpenalized, resolved.outcome, config, meta, resolved.norm_states.get("reward_norm")
        )
    except Exception:
        if fused:
            check_batch_values(data)  # a bad batch is reported first, as on the tensor path
        raise
    if fused:  # 4.-6. in one fused CPU pass per row, then the normalisation passes
        steps = run_fused_steps(data, score, config, resolved, meta)
        magnitudes = dict(steps.input_magnitudes)
    else:
        steps = _tensor_steps(data, score, config, resolved, meta)
    # 7. Process advantage shaping.
    advantages = _shape_process(
        process_stage,
        process_kwargs,
        ProcessAdvantageInputs(
            steps.advantages,
            steps.token_adv,
            steps.loss_mask,
            meta,
            aligned_token_entropy(data, steps.loss_mask, stage_reads(process_stage)),
        ),
    )
    # 8. Output.
    return _output_fields(steps, advantages, outcome.rewards), magnitudes


def _tensor_steps(
    data: Mapping[str, Any],
    score: torch.Tensor,
    config: PPOActorConfig,
    resolved: ResolvedAdvantage,
    meta: TrajBatchMeta,
) -> StepFields:
    """Steps 4-6 as tensor operations around the configured estimator stage."""
    estimator = default_estimator(resolved, config)
    # 4. Alignment, KL rewards and reward placement.
    aligned = align_batch(data, config)
    kl = kl_rewards(aligned, data.get("ref_logp"), config)
    token_adv, folded = process_rewards(data, aligned, config)
    # 5. Temporal estimator (the placed outcome and folded rewards are freed when it returns).
    reads = stage_reads(estimator)
    temporal_inputs = _temporal_inputs(
        aligned,
        PlacedRewards(kl=kl, outcome=place_outcome(score, aligned, config), folded=folded),
        config=config,
        resolved=resolved,
        meta=meta,
        optional_fields={
            "anchor_ids": aligned_anchor_ids(data, reads),
            **_token_fields(data, aligned.loss_mask, reads),
            **_teacher_fields(data, estimator),
        },
    )
    del folded
    temporal = _run_temporal(estimator, temporal_inputs)
    del temporal_inputs
    # 6. Advantage normalisation.
    advantages = _normalise_advantages(
        temporal.advantages, aligned.loss_mask, config, meta, resolved.norm_states.get("adv_norm")
    )
    return StepFields(
        aligned.loss_mask,
        aligned.old_logp,
        aligned.prox_logp,
        aligned.truncated,
        aligned.mopd_behavior_logprobs,
        kl,
        temporal,
        advantages,
        token_adv,
    )


def _run_outcome(stage: ResolvedStage, inputs: OutcomeRewardInputs) -> OutcomeResult:
    result = call_stage(stage, inputs)
    if not stage.custom:
        return result
    check_reduced(stage, result, inputs)
    ids = inputs.data["input_ids"]
    return check_outcome_result(stage, result, ids.shape[0], inputs.meta.n_logical, ids.device)


def _token_fields(
    data: Mapping[str, Any], loss_mask: torch.Tensor, reads: frozenset[str]
) -> dict[str, torch.Tensor | None]:
    """The aligned optional float token fields the estimator reads (None when absent or not read)."""
    return {key: aligned_token_values(data, key, loss_mask, reads) for key in (SUM_PI_SQUARED, ROLLOUT_IS_WEIGHTS)}


def _teacher_fields(data: Mapping[str, Any], estimator: ResolvedStage) -> dict[str, torch.Tensor | None]:
    """The batch's `ref_logp` / `teacher_logp` as given, for an estimator that declares it reads them (`combine`
    with a distillation term); None otherwise."""
    wanted = declared_fields(estimator.fn)
    return {key: data.get(key) if key in wanted else None for key in ("ref_logp", "teacher_logp")}


@dataclass(frozen=True)
class PlacedRewards:
    """The [B, T] rewards step 4 placed for the estimator (`folded` None: no process rewards)."""

    kl: torch.Tensor
    outcome: torch.Tensor
    folded: torch.Tensor | None


def _temporal_inputs(
    aligned: AlignedBatch,
    rewards: PlacedRewards,
    *,
    config: PPOActorConfig,
    resolved: ResolvedAdvantage,
    meta: TrajBatchMeta,
    optional_fields: Mapping[str, torch.Tensor | None],
) -> TemporalInputs:
    """`optional_fields`: the TemporalInputs fields the estimator may read (anchor ids, token fields, teachers)."""
    values = aligned.values
    folded = rewards.folded
    if folded is None:  # a zero view, no memory
        folded = torch.zeros((), dtype=torch.float32, device=values.device).expand(values.shape)
    return TemporalInputs(
        outcome_rewards=rewards.outcome,
        kl_rewards=reward_kl(rewards.kl, aligned),
        process_rewards=folded,
        values=values,
        loss_mask=aligned.loss_mask,
        turn_ids=aligned.turn_ids,
        is_truncated=aligned.truncated,
        bootstrap_values=values[aligned.rows, aligned.seqlens - 1],
        seqlens=aligned.seqlens,
        discount=config.discount,
        gae_lambda=resolved.gae_lambda,
        gae_lambda_kwargs=resolved.gae_lambda_kwargs,
        gae_lambda_source=resolved.gae_lambda_source,
        meta=meta,
        old_logp=aligned.old_logp,
        **optional_fields,
    )


def _run_temporal(stage: ResolvedStage, inputs: TemporalInputs) -> TemporalResult:
    result = call_stage(stage, inputs)
    if not stage.custom:
        return result
    return check_temporal_result(stage, result, tuple(inputs.loss_mask.shape), inputs.loss_mask.device)


def _normalise_advantages(
    advantages: torch.Tensor,
    loss_mask: torch.Tensor,
    config: PPOActorConfig,
    meta: TrajBatchMeta,
    running: StageState | None = None,
) -> torch.Tensor:
    """Token-weighted by the aligned mask; groups from the metadata when it is complete; `running`: level running."""
    if config.adv_norm is None:
        return advantages
    if running is not None:  # the step's active tokens enter the running moments first
        return running_normalise(advantages, loss_mask, config.adv_norm, running)
    return Normalization(config.adv_norm)(
        advantages,
        loss_mask,
        group_sizes=list(meta.traj_group_sizes) if meta.complete else None,
        logical_group_sizes=list(meta.logical_group_sizes) if meta.complete else None,
    )


def _shape_process(stage: ResolvedStage, kwargs: Mapping[str, Any], inputs: ProcessAdvantageInputs) -> torch.Tensor:
    """The built-in PRM shapings are the identity without process rewards, so they are skipped then."""
    if not stage.custom and stage.implementation in PRM_MODES and inputs.token_rewards is None:
        return inputs.advantages
    advantages = call_stage(stage, inputs, **kwargs)
    if stage.custom:
        check_tensor(
            stage.stage,
            stage.implementation,
            "advantages",
            advantages,
            shape=tuple(inputs.loss_mask.shape),
            device=inputs.loss_mask.device,
        )
    return advantages


def _output_fields(steps: StepFields, advantages: torch.Tensor, rewards: torch.Tensor) -> dict[str, Any]:
    fields = {
        "advantages": advantages,
        "returns": steps.temporal.returns,
        "loss_mask": steps.loss_mask,
        "logprobs": steps.logprobs,
        "kl_rewards": steps.kl_rewards,
        "total_rewards": steps.temporal.total_rewards,  # the name of TemporalResult's and AdvantageResult's field
        "tot_rewards": steps.temporal.total_rewards,  # the same tensor under AReaL 1.0.4's output key
        "prox_logp": steps.prox_logp,
        "is_truncated": steps.is_truncated,
        "rewards": rewards,
    }
    if steps.prox_logp is None:
        del fields["prox_logp"]
    if steps.mopd_behavior_logprobs is not None:
        fields["mopd_behavior_logprobs"] = steps.mopd_behavior_logprobs
    return fields


# ---------------------------------------------------------------------------
# Full replacement
# ---------------------------------------------------------------------------


def compute_default_advantages(inputs: AdvantageInputs) -> AdvantageResult:
    """The default pipeline as an `AdvantageInputs -> AdvantageResult` function.

    A full replacement can call this and post-process, or use it as a template.
    """
    resolved = resolve_advantage(dataclasses.replace(inputs.config, advantage=AdvantageConfig()))
    fields, _ = _default_fields(inputs.data, inputs.meta, inputs.config, resolved, inputs.shaping)
    extras = {k: fields[k] for k in ALLOWED_EXTRAS if k in fields}
    return AdvantageResult(
        advantages=fields["advantages"],
        returns=fields["returns"],
        loss_mask=fields["loss_mask"],
        logprobs=fields["logprobs"],
        rewards=fields["rewards"],
        total_rewards=fields["total_rewards"],
        kl_rewards=fields["kl_rewards"],
        extras=extras,
    )


def _run_full_replacement(
    data: Mapping[str, Any],
    meta: TrajBatchMeta,
    config: PPOActorConfig,
    stage: ResolvedStage,
    options: AdvantageShaping,
) -> dict[str, Any]:
    """The replacement's fields, checked against the full-replacement contract."""
    inputs = AdvantageInputs(dict(data), config, meta, shaping=options)
    ids = data["input_ids"]
    result = check_full_result(stage, call_stage(stage, inputs), tuple(ids.shape), ids.device)
    return {
        "advantages": result.advantages,
        "returns": result.returns,
        "loss_mask": result.loss_mask.to(torch.float32),
        "logprobs": result.logprobs,
        "rewards": result.rewards,
        "total_rewards": result.total_rewards,
        "tot_rewards": result.total_rewards,
        "kl_rewards": result.kl_rewards,
        **dict(result.extras or {}),
    }
