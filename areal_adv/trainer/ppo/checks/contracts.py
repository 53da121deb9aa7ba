"""Run-time contracts for stage functions: outputs checked, inputs protected.

The docs list the rules (*Custom advantage computation*, *What is checked, and when*).

Custom stages receive copies of everything they are handed (tensors, the
metadata, the config, their kwargs), so a plugin can never reach the caller's
batch or metadata, nor carry state from one call to the next through them. A
write is still detected, by comparing contents after the call (so writes
through `.data`, `.numpy()` or `object.__setattr__` count too), and reported
with the stage and import path. Built-in stages are covered by tests and run
unchecked on the hot path.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from areal_adv.trainer.ppo.checks.batch_checks import BatchError, all_finite
from areal_adv.trainer.ppo.stage_types import ALLOWED_EXTRAS, AdvantageResult, OutcomeResult, TemporalResult


class StageContractError(RuntimeError):
    """A stage function broke its contract; the message names the stage and path."""

    def __init__(self, stage: str, implementation: str, problem: str):
        self.stage = stage
        self.implementation = implementation
        super().__init__(f"advantage stage {stage!r} ({implementation}): {problem}")


def copy_value(value: Any) -> Any:
    """A copy a stage may do anything with: tensors cloned, mappings rebuilt, everything else deep-copied.

    Metadata (`TrajBatchMeta`, its `RolloutGroup.rewards`), the config and kwargs
    are copied too, so a plugin cannot reach the caller's objects through them.
    """
    if torch.is_tensor(value):
        return value.clone()
    if isinstance(value, Mapping):
        return {k: copy_value(v) for k, v in value.items()}
    return copy.deepcopy(value)


def clone_mapping(data: Mapping[str, Any]) -> dict[str, Any]:
    """A new dict whose values are copies (`copy_value`)."""
    return {k: copy_value(v) for k, v in data.items()}


def protect(inputs: Any) -> tuple[Any, dict[str, Any]]:
    """(a copy of a stage-input dataclass, the copies it holds by field name)."""
    copies = {f.name: copy_value(getattr(inputs, f.name)) for f in dataclasses.fields(inputs)}
    return dataclasses.replace(inputs, **copies), copies


def _same_tensor(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype or a.device != b.device:
        return False
    if torch.equal(a, b):
        return True
    if a.is_floating_point() or a.is_complex():  # NaN != NaN: compare NaN positions separately
        return bool(((a == b) | (a.isnan() & b.isnan())).all())
    return False


def differences(original: Any, handed: Any, name: str) -> list[str]:
    """Paths at which `handed` (a copy of `original` given to a stage) no longer equals it.

    Contents are compared, not version counters, so writes through `.data`,
    `.numpy()` or `object.__setattr__` are found as well as in-place ops.
    """
    if torch.is_tensor(original) or torch.is_tensor(handed):
        same = torch.is_tensor(original) and torch.is_tensor(handed) and _same_tensor(original, handed)
        return [] if same else [name]
    if isinstance(original, Mapping):
        if not isinstance(handed, Mapping) or list(handed) != list(original):
            return [name + "{}"]
        return [d for k in original for d in differences(original[k], handed[k], f"{name}[{k!r}]")]
    if dataclasses.is_dataclass(original) and not isinstance(original, type):
        if type(handed) is not type(original):
            return [name]
        return [
            d
            for f in dataclasses.fields(original)
            for d in differences(getattr(original, f.name), getattr(handed, f.name), f"{name}.{f.name}")
        ]
    if isinstance(original, (list, tuple)):
        if type(handed) is not type(original) or len(handed) != len(original):
            return [name]
        return [d for i, (a, b) in enumerate(zip(original, handed)) for d in differences(a, b, f"{name}[{i}]")]
    try:
        return [] if bool(original == handed) else [name]
    except Exception:  # an object without a usable equality: identity is all we can check
        return [] if original is handed else [name]


def check_unmodified(inputs: Any, protected: Any, copies: Mapping[str, Any], stage: str, implementation: str) -> None:
    """Compare what the stage was handed with the pipeline's own inputs after the call."""
    changed = []
    for f in dataclasses.fields(inputs):
        held = getattr(protected, f.name)
        if held is not copies[f.name]:  # the attribute itself was replaced (object.__setattr__)
            changed.append(f.name)
        changed += differences(getattr(inputs, f.name), held, f.name)
    if changed:
        raise StageContractError(
            stage,
            implementation,
            f"modified its inputs in place ({', '.join(sorted(set(changed)))}); stage functions must return new "
            "tensors and leave the input mapping, its tensors, the metadata and the config untouched (the "
            "caller's batch and metadata were not changed)",
        )


def check_tensor(
    stage: str,
    implementation: str,
    name: str,
    value: Any,
    *,
    shape: tuple[int, ...],
    device: torch.device,
    floating: bool = True,
    allow_integer: bool = False,
) -> torch.Tensor:
    """One output tensor: type, shape, device, dtype and finiteness."""
    if not torch.is_tensor(value):
        raise StageContractError(
            stage, implementation, f"{name}: returned {type(value).__name__}, expected a torch.Tensor"
        )
    if tuple(value.shape) != tuple(shape):
        raise StageContractError(
            stage,
            implementation,
            f"{name}: returned shape {tuple(value.shape)}, expected {tuple(shape)} (row order and count must be kept)",
        )
    if value.device != device:
        raise StageContractError(stage, implementation, f"{name}: returned on device {value.device}, expected {device}")
    if floating and not value.is_floating_point():
        if not (allow_integer and not value.is_complex() and value.dtype != torch.bool):
            raise StageContractError(
                stage, implementation, f"{name}: returned dtype {value.dtype}, expected a floating dtype"
            )
    if value.is_floating_point() and not all_finite(value):
        bad = ~torch.isfinite(value)
        if bool(bad.any()):
            where = bad.nonzero()[0].tolist()
            raise StageContractError(
                stage,
                implementation,
                f"{name}: returned non-finite {value[bad][0].item()!r} at index {where}; expected finite values",
            )
    return value


def check_binary_mask(stage: str, implementation: str, name: str, value: torch.Tensor) -> None:
    if value.dtype == torch.bool:
        return
    bad = (value != 0) & (value != 1)
    if bool(bad.any()):
        raise StageContractError(
            stage, implementation, f"{name}: expected a binary 0/1 mask, found {value[bad][0].item()!r}"
        )


# ---------------------------------------------------------------------------
# Calling stages under their contracts
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ResolvedStage:
    """One stage's resolved function (`stage_resolution`); `custom` ones run under the contracts."""

    stage: str
    implementation: str
    fn: Callable[..., Any]
    custom: bool
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    state: Any = None  # the StageState bound to `fn` when the function declares `state` (stage_state)


def call_stage(stage: ResolvedStage, inputs: Any, **kwargs: Any) -> Any:
    """Call a stage; custom ones get copies of their inputs and kwargs and are checked for writes."""
    if not stage.custom:
        return stage.fn(inputs, **kwargs)
    protected, copies = protect(inputs)
    call_kwargs = copy.deepcopy({**dict(stage.kwargs), **kwargs})  # fresh per call: no state through kwargs
    try:
        result = stage.fn(protected, **call_kwargs)
    except (StageContractError, BatchError):
        raise
    except SystemExit as exc:
        raise StageContractError(
            stage.stage,
            stage.implementation,
            f"called sys.exit({exc.code!r}); a stage function must return its result or raise an exception",
        ) from exc
    except Exception as exc:
        raise StageContractError(stage.stage, stage.implementation, f"raised {type(exc).__name__}: {exc}") from exc
    check_unmodified(inputs, protected, copies, stage.stage, stage.implementation)
    return result


def check_outcome_result(
    stage: ResolvedStage, result: Any, n_rows: int, n_logical: int, device: torch.device
) -> OutcomeResult:
    """An outcome stage's result: one finite float per row, one reference per logical rollout."""
    if not isinstance(result, OutcomeResult):
        raise StageContractError(
            stage.stage, stage.implementation, f"returned {type(result).__name__}, expected OutcomeResult(rewards=...)"
        )
    check_tensor(stage.stage, stage.implementation, "rewards", result.rewards, shape=(n_rows,), device=device)
    if result.normalization_rewards is not None:
        check_tensor(
            stage.stage,
            stage.implementation,
            "normalization_rewards",
            result.normalization_rewards,
            shape=(n_logical,),
            device=device,
        )
    return result


def check_temporal_result(
    stage: ResolvedStage, result: Any, shape: tuple[int, int], device: torch.device
) -> TemporalResult:
    """An estimator's result: three finite float [B, T] tensors on the batch's device."""
    if not isinstance(result, TemporalResult):
        raise StageContractError(
            stage.stage,
            stage.implementation,
            f"returned {type(result).__name__}, expected TemporalResult(advantages, returns, total_rewards)",
        )
    for name in ("advantages", "returns", "total_rewards"):
        check_tensor(stage.stage, stage.implementation, name, getattr(result, name), shape=shape, device=device)
    return result


def check_full_result(
    stage: ResolvedStage, result: Any, shape: tuple[int, int], device: torch.device
) -> AdvantageResult:
    """A full replacement's result: every field the PPO update reads, and only allowed extras."""
    if not isinstance(result, AdvantageResult):
        raise StageContractError(
            stage.stage, stage.implementation, f"returned {type(result).__name__}, expected AdvantageResult"
        )
    for name in ("advantages", "returns", "loss_mask", "logprobs", "total_rewards", "kl_rewards"):
        check_tensor(stage.stage, stage.implementation, name, getattr(result, name), shape=shape, device=device)
    check_binary_mask(stage.stage, stage.implementation, "loss_mask", result.loss_mask)
    # Integer task rewards are valid batch content, and the default (identity) keeps them integer.
    check_tensor(
        stage.stage, stage.implementation, "rewards", result.rewards, shape=shape[:1], device=device, allow_integer=True
    )
    extras = dict(result.extras or {})
    unknown = sorted(set(extras) - ALLOWED_EXTRAS)
    if unknown:
        raise StageContractError(
            stage.stage,
            stage.implementation,
            f"extras may only hold {sorted(ALLOWED_EXTRAS)}; got {unknown} (rollout fields such as input_ids, "
            "values or original rewards cannot be overwritten)",
        )
    for name, value in extras.items():
        _check_extra(stage, name, value, shape, device)
    return result


def _check_extra(stage: ResolvedStage, name: str, value: Any, shape: tuple[int, int], device: torch.device) -> None:
    """`is_truncated` is a bool flag per row, `input_token_loss_mask` a binary [B, T] mask, the rest floats."""
    where = f"extras[{name!r}]"
    if name == "is_truncated":
        check_tensor(stage.stage, stage.implementation, where, value, shape=shape[:1], device=device, floating=False)
        if value.dtype != torch.bool:
            raise StageContractError(
                stage.stage,
                stage.implementation,
                f"{where}: returned dtype {value.dtype}, expected torch.bool (one flag per row)",
            )
        return
    if name == "input_token_loss_mask":
        check_tensor(stage.stage, stage.implementation, where, value, shape=shape, device=device, floating=False)
        if value.is_complex():
            raise StageContractError(
                stage.stage, stage.implementation, f"{where}: returned dtype {value.dtype}, expected a real mask"
            )
        check_binary_mask(stage.stage, stage.implementation, where, value)
        return
    check_tensor(stage.stage, stage.implementation, where, value, shape=shape, device=device)
