"""Steps 4-6 of the default pipeline in fused CPU kernels, when the configuration allows it.

The tensor steps (`placement`, the estimator stage, `Normalization`) stay the
definition; this module only decides when the fused kernels of
`kernels.fused_cpu` may replace them and maps their outputs back onto the
pipeline's fields. The results are the same, bit for bit with every KL
estimator and on every finite input (tests/trainer/ppo/test_fused_pipeline.py). `AREAL_FUSED_ADVANTAGE`
selects the path: `auto` (default) uses the fused kernels whenever
`fused_blockers` finds nothing in the way, `off` never does, and `on` makes a
blocker an error, so a benchmark cannot silently measure the tensor path.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import torch

from areal_adv.api.cli_args import PPOActorConfig
from areal_adv.trainer.ppo.advantage_algorithms import require_turn_ids
from areal_adv.trainer.ppo.checks.batch_checks import check_batch_values
from areal_adv.trainer.ppo.gae import compute_gae_lambda
from areal_adv.trainer.ppo.kernels import NUMBA_AVAILABLE, select_backend
from areal_adv.trainer.ppo.kernels.fused_cpu import ROW_ERRORS, FusedInputs, FusedOptions, run_fused
from areal_adv.trainer.ppo.placement import StepFields, truncation_width
from areal_adv.trainer.ppo.stage_resolution import ResolvedAdvantage, default_estimator
from areal_adv.trainer.ppo.stage_types import TemporalResult
from areal_adv.utils.data import Normalization, TrajBatchMeta

__all__ = ["FUSED_ENV", "fused_blockers", "run_fused_steps", "use_fused"]

FUSED_ENV = "AREAL_FUSED_ADVANTAGE"
_MODES = ("auto", "on", "off")
_FLOAT_KEYS = ("logprobs", "ref_logp", "values", "prox_logp")
_INT_KEYS = ("attention_mask", "loss_mask", "turn_ids")


def fused_blockers(data: Mapping[str, Any], config: PPOActorConfig, resolved: ResolvedAdvantage) -> list[str]:
    """Why the fused kernels cannot run this batch and configuration (empty: they can)."""
    ids = data["input_ids"]
    if ids.device.type != "cpu":
        return [f"the batch is on {ids.device}, the fused kernels run on CPU"]
    blockers = []
    if not NUMBA_AVAILABLE:
        blockers.append("numba is not importable")
    elif select_backend(ids.device) != "numba":
        blockers.append("AREAL_GAE_BACKEND selects a GAE backend other than numba")
    estimator = default_estimator(resolved, config)
    if estimator.custom or estimator.implementation not in ("token_gae", "turn_gae"):
        blockers.append(f"the estimator is {estimator.implementation!r}, not the built-in token_gae or turn_gae")
    if resolved.norm_states.get("adv_norm") is not None:
        blockers.append("adv_norm uses running statistics")
    if callable(resolved.gae_lambda):
        blockers.append(f"gae_lambda is a function ({resolved.gae_lambda_source})")
    if data.get("token_rewards") is not None:
        blockers.append("the batch has process rewards (token_rewards)")
    blockers += [
        f"{k} is {data[k].dtype}, not torch.float32"
        for k in _FLOAT_KEYS
        if data.get(k) is not None and data[k].dtype != torch.float32
    ]
    blockers += [
        f"{k} is {data[k].dtype}, not an integer or bool dtype"
        for k in _INT_KEYS
        if data.get(k) is not None and (data[k].is_floating_point() or data[k].is_complex())
    ]
    return blockers


def _as_int64(x: torch.Tensor | None) -> torch.Tensor | None:
    """The kernels are compiled for int64 masks and ids; AReaL's workflows write bool attention masks and int32
    loss masks and turn ids, converted here in one pass each (the tensor steps would cost far more)."""
    return x if x is None or x.dtype == torch.int64 else x.to(torch.int64)


def use_fused(data: Mapping[str, Any], config: PPOActorConfig, resolved: ResolvedAdvantage) -> bool:
    """Apply `AREAL_FUSED_ADVANTAGE` (auto | on | off) to `fused_blockers`."""
    mode = os.environ.get(FUSED_ENV, "auto").strip().lower() or "auto"
    if mode not in _MODES:
        raise ValueError(f"{FUSED_ENV}={mode!r}: expected one of {list(_MODES)} or unset")
    if mode == "off":
        return False
    blockers = fused_blockers(data, config, resolved)
    if blockers and mode == "on":
        raise RuntimeError(f"{FUSED_ENV}=on, but the fused advantage kernels cannot run: " + "; ".join(blockers))
    return not blockers


def run_fused_steps(
    data: Mapping[str, Any],
    score: torch.Tensor,
    config: PPOActorConfig,
    resolved: ResolvedAdvantage,
    meta: TrajBatchMeta,
) -> StepFields:
    """Steps 4-6 for a batch `use_fused` accepted; raises the tensor path's error for a bad batch."""
    unit = default_estimator(resolved, config).implementation.removesuffix("_gae")
    if unit == "turn" and data.get("turn_ids") is None:
        check_batch_values(data)  # as on the tensor path, a bad batch is reported first
        require_turn_ids(None)
    use_prox = config.recompute_logprob and not config.use_decoupled_loss
    lam = compute_gae_lambda(
        resolved.gae_lambda,
        loss_mask=data["loss_mask"],
        turn_ids=data.get("turn_ids"),
        timestep_unit=unit,
        source=resolved.gae_lambda_source,
    )
    inputs = FusedInputs(
        _as_int64(data["attention_mask"]),
        _as_int64(data["loss_mask"]),
        data["logprobs"],
        data.get("ref_logp"),
        data.get("values"),
        data.get("prox_logp"),
        _as_int64(data.get("turn_ids")),
        score.to(torch.float32),
        _truncation(data),
    )
    options = FusedOptions(
        unit,
        use_prox,
        config.mask_no_eos_with_zero,
        config.kl_estimator,
        config.kl_ctl,
        config.discount,
        config.discount * lam,
        row_moments=config.adv_norm is not None,
    )
    out = run_fused(inputs, options)
    _raise_for_bad_rows(data, out.errors)
    advantages = out.advantages
    if config.adv_norm is not None:
        advantages = Normalization(config.adv_norm)(
            advantages,
            out.loss_mask,
            row_moments=out.row_moments,
            group_sizes=list(meta.traj_group_sizes) if meta.complete else None,
            logical_group_sizes=list(meta.logical_group_sizes) if meta.complete else None,
        )
    return StepFields(
        loss_mask=out.loss_mask,
        logprobs=out.logprobs,
        prox_logp=data.get("prox_logp") if config.use_decoupled_loss else out.logprobs,
        is_truncated=out.truncated if inputs.is_truncated is None else inputs.is_truncated,
        mopd_behavior_logprobs=_mopd_behaviour(data, out.loss_mask, out.logprobs, use_prox),
        kl_rewards=out.kl_rewards,
        temporal=TemporalResult(advantages=out.advantages, returns=out.returns, total_rewards=out.total_rewards),
        advantages=advantages,
        token_adv=None,
        input_magnitudes=_magnitudes(data, out.values_max_abs),
    )


def _truncation(data: Mapping[str, Any]) -> torch.Tensor | None:
    """The given flags; None lets the kernels infer seqlen == T, unless a wider rank makes every row untruncated."""
    if data.get("is_truncated") is not None:
        return data["is_truncated"].to(torch.bool)
    n_rows, n_pos = data["attention_mask"].shape
    if truncation_width(n_pos, data["attention_mask"].device) > n_pos:
        return torch.zeros(n_rows, dtype=torch.bool)  # no row fills the whole batch's width
    return None


def _magnitudes(data: Mapping[str, Any], values_max_abs: torch.Tensor) -> dict[str, float]:
    """What `check_batch_values` would return: max |values| from the kernels' per-row maxima.

    (The fused path never has `token_rewards`, the other magnitude field.)
    """
    if data.get("values") is None:
        return {}
    return {"values": float(values_max_abs.max())}


def _mopd_behaviour(
    data: Mapping[str, Any], loss_mask: torch.Tensor, logprobs: torch.Tensor, use_prox: bool
) -> torch.Tensor | None:
    """Aligned masked behaviour log-probs, a tensor of their own (later edits of `logprobs` leave them)."""
    if "mopd_teacher_logp_sum" not in data:
        return None
    if not use_prox:
        return logprobs.clone()
    return (torch.roll(data["logprobs"], shifts=-1, dims=-1) * loss_mask).detach()


def _raise_for_bad_rows(data: Mapping[str, Any], errors: torch.Tensor) -> None:
    """A row failed a check in the kernel: the descriptive checks name the field and position."""
    bad = errors.nonzero()
    if bad.numel() == 0:
        return
    check_batch_values(data)
    row = int(bad[0, 0])
    found = [text for bit, text in ROW_ERRORS.items() if int(errors[row]) & bit]
    raise RuntimeError(
        f"fused advantage kernel: row {row} failed {found}, but check_batch_values accepts the batch; "
        f"this is a bug (set AREAL_FUSED_ADVANTAGE=off to use the tensor path)"
    )
