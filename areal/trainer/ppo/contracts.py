"""Run-time contracts for stage functions: outputs checked, inputs protected (advantage.md §5).

Custom stages receive clones of the tensors they read, so a plugin that writes
in place can never corrupt the caller's batch; the write is still detected
(through tensor version counters) and reported with the stage and import path.
Built-in stages are covered by tests and run unchecked on the hot path.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from areal.trainer.ppo.batch_checks import BatchError, all_finite
from areal.trainer.ppo.stage_types import ALLOWED_EXTRAS, AdvantageResult, OutcomeResult, TemporalResult


class StageContractError(RuntimeError):
    """A stage function broke its contract; the message names the stage and path."""

    def __init__(self, stage: str, implementation: str, problem: str):
        self.stage = stage
        self.implementation = implementation
        super().__init__(f"advantage stage {stage!r} ({implementation}): {problem}")


def clone_mapping(data: Mapping[str, Any]) -> dict[str, Any]:
    """A new dict whose tensors are clones (other values shared)."""
    return {k: (v.clone() if torch.is_tensor(v) else v) for k, v in data.items()}


def clone_dataclass(obj: Any) -> Any:
    """Shallow-copy a frozen stage-input dataclass with cloned tensors / mappings."""
    changes = {}
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if torch.is_tensor(value):
            changes[f.name] = value.clone()
        elif isinstance(value, Mapping) and f.name == "data":
            changes[f.name] = clone_mapping(value)
    return dataclasses.replace(obj, **changes)


def snapshot(obj: Any) -> dict[str, tuple[int, int]]:
    """Version counters and identities of every tensor reachable from a stage input."""
    found: dict[str, tuple[int, int]] = {}

    def visit(name: str, value: Any) -> None:
        if torch.is_tensor(value):
            found[name] = (id(value), value._version)
        elif isinstance(value, Mapping):
            found[name + "{}"] = (id(value), hash(tuple(sorted(map(str, value.keys())))))
            for k, v in value.items():
                visit(f"{name}[{k!r}]", v)

    for f in dataclasses.fields(obj):
        visit(f.name, getattr(obj, f.name))
    return found


def check_unmodified(before: dict[str, tuple[int, int]], obj: Any, stage: str, implementation: str) -> None:
    after = snapshot(obj)
    changed = [name for name, state in before.items() if after.get(name) != state]
    if changed:
        raise StageContractError(
            stage,
            implementation,
            f"modified its inputs in place ({', '.join(sorted(changed))}); stage functions must return "
            "new tensors and leave the input mapping and tensors untouched (the caller's batch was not changed)",
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
        raise StageContractError(stage, implementation, f"{name}: returned {type(value).__name__}, expected a torch.Tensor")
    if tuple(value.shape) != tuple(shape):
        raise StageContractError(
            stage, implementation, f"{name}: returned shape {tuple(value.shape)}, expected {tuple(shape)} (row order and count must be kept)"
        )
    if value.device != device:
        raise StageContractError(stage, implementation, f"{name}: returned on device {value.device}, expected {device}")
    if floating and not value.is_floating_point():
        if not (allow_integer and not value.is_complex() and value.dtype != torch.bool):
            raise StageContractError(stage, implementation, f"{name}: returned dtype {value.dtype}, expected a floating dtype")
    if value.is_floating_point() and not all_finite(value):
        bad = ~torch.isfinite(value)
        if bool(bad.any()):
            where = bad.nonzero()[0].tolist()
            raise StageContractError(
                stage, implementation, f"{name}: returned non-finite {value[bad][0].item()!r} at index {where}; expected finite values"
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


def check_outcome_result(stage: ResolvedStage, result: Any, n_rows: int, n_logical: int, device: torch.device) -> OutcomeResult:
    """An outcome stage's result: one finite float per row, one reference per logical rollout."""
    if not isinstance(result, OutcomeResult):
        raise StageContractError(stage.stage, stage.implementation, f"returned {type(result).__name__}, expected OutcomeResult(rewards=...)")
    check_tensor(stage.stage, stage.implementation, "rewards", result.rewards, shape=(n_rows,), device=device)
    if result.normalization_rewards is not None:
        check_tensor(stage.stage, stage.implementation, "normalization_rewards", result.normalization_rewards,
                     shape=(n_logical,), device=device)
    return result


def check_temporal_result(stage: ResolvedStage, result: Any, shape: tuple[int, int], device: torch.device) -> TemporalResult:
    """An estimator's result: three finite float [B, T] tensors on the batch's device."""
    if not isinstance(result, TemporalResult):
        raise StageContractError(stage.stage, stage.implementation,
                                 f"returned {type(result).__name__}, expected TemporalResult(advantages, returns, total_rewards)")
    for name in ("advantages", "returns", "total_rewards"):
        check_tensor(stage.stage, stage.implementation, name, getattr(result, name), shape=shape, device=device)
    return result


def check_full_result(stage: ResolvedStage, result: Any, shape: tuple[int, int], device: torch.device) -> AdvantageResult:
    """A full replacement's result: every field the PPO update reads, and only allowed extras."""
    if not isinstance(result, AdvantageResult):
        raise StageContractError(stage.stage, stage.implementation, f"returned {type(result).__name__}, expected AdvantageResult")
    for name in ("advantages", "returns", "loss_mask", "logprobs", "total_rewards", "kl_rewards"):
        check_tensor(stage.stage, stage.implementation, name, getattr(result, name), shape=shape, device=device)
    check_binary_mask(stage.stage, stage.implementation, "loss_mask", result.loss_mask)
    check_tensor(stage.stage, stage.implementation, "rewards", result.rewards, shape=shape[:1], device=device)
    extras = dict(result.extras or {})
    unknown = sorted(set(extras) - ALLOWED_EXTRAS)
    if unknown:
        raise StageContractError(
            stage.stage, stage.implementation,
            f"extras may only hold {sorted(ALLOWED_EXTRAS)}; got {unknown} (rollout fields such as input_ids, "
            "values or original rewards cannot be overwritten)",
        )
    for name, value in extras.items():
        check_tensor(stage.stage, stage.implementation, f"extras[{name!r}]", value,
                     shape=shape[:1] if name == "is_truncated" else shape, device=device,
                     floating=name != "is_truncated")
    return result
