"""Generalised advantage estimation: token GAE, turn GAE and the GAE lambda.

All [B, T] tensors here are *aligned* (position t carries the quantity for
predicting token t+1) and right padded, except where a docstring says
"unshifted". Results are float32 on the inputs' device; inputs are never
modified. The recurrence itself runs in a compiled kernel chosen per device
(see `areal_adv.trainer.ppo.kernels`); this module owns the contracts.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from areal_adv.api.config_checks import is_number, is_real
from areal_adv.utils.renamed import renamed_attributes

from .kernels import FUSED_TURN_KERNELS, run_token_gae, select_backend
from .kernels.torch_ref import accumulation_dtype
from .lambda_context import GAELambdaContext

__all__ = [
    "GAELambdaContext",
    "GAELambdaInputs",
    "LambdaFunctionError",
    "canonical_turn_ids",
    "check_turn_ids_type",
    "compute_gae_lambda",
    "count_turns",
    "token_gae_tensors",
    "turn_gae_tensors",
    "validate_turn_ids",
]

TIMESTEP_UNITS = ("token", "turn")
_ALIGNED_FIELD = "turn_ids (aligned)"


# ---------------------------------------------------------------------------
# Token and turn GAE
# ---------------------------------------------------------------------------


def token_gae_tensors(
    rewards: torch.Tensor,
    values: torch.Tensor,
    loss_mask: torch.Tensor,
    *,
    discount: float,
    lam: torch.Tensor | float,
    bootstrap: torch.Tensor | float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Token-level GAE: δ_t = r_t + γ·V_{t+1} − V_t, A_t = δ_t + γλ·A_{t+1}; returns R_t = A_t + V_t.

    Generalized Advantage Estimation (Schulman et al. 2015, arXiv:1506.02438), as
    verl's `verl/trainer/ppo/core_algos.py:compute_gae_advantage_return`, with t
    running over the generated (unmasked) positions of a row: every one is a step.
    `discount` is γ, `lam` is λ (one per row, or a constant). Masked positions
    are skipped: they carry the running next value and advantage through.
    Position T-1 is always 0 (it has no next token).
    `bootstrap[b]` is the value after the row's last step (0 unless the row
    was truncated). Returns (advantages, returns = advantages + values).
    """
    r, v, m = _check_bt("token_gae", rewards=rewards, values=values, loss_mask=loss_mask)
    discount = _check_discount("token_gae", discount)
    lam_t = _per_row("token_gae", "lam", lam, r.shape[0], r.device)
    boot = _per_row("token_gae", "bootstrap", bootstrap, r.shape[0], r.device)
    coef = discount * lam_t  # float32, the same product the reference loop forms
    return run_token_gae(r, v, m, coef, boot, discount)


def turn_gae_tensors(
    rewards: torch.Tensor,
    values: torch.Tensor,
    loss_mask: torch.Tensor,
    turn_ids: torch.Tensor,
    *,
    discount: float,
    lam: torch.Tensor | float,
    bootstrap: torch.Tensor | float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Turn-level GAE: δ_k = R_k + γ·V_{k+1} − V_k, A_k = δ_k + γλ·A_{k+1} over the turns k of a row.

    Generalized Advantage Estimation (Schulman et al. 2015, arXiv:1506.02438) with
    a generated turn as the time step, as AReaL's turn-level GAE; the recurrence is
    the one `token_gae` runs (verl `compute_gae_advantage_return`) over turn sums.
    `turn_ids` is aligned: -1 off generated tokens, non-decreasing ids on
    them (gaps allowed); `canonical_turn_ids` gives that form from ids that
    hold anything off generated tokens (as AReaL's padding does). A turn's reward is the sum of the rewards on its
    generated tokens (rewards on prompt/environment positions belong to no
    turn, as in AReaL's turn GAE and like masked steps of token GAE); its value is
    the value at its first token; the value after the last turn is
    `bootstrap`. The turn advantage A_k is broadcast to the turn's tokens and
    returns there are A_k + V_k; elsewhere advantages are 0 and returns are
    the values. On CPU (numba) one compiled kernel works row by row: it finds
    the turns, sums them, runs the token kernel's row recurrence over them and
    broadcasts back. Other devices scatter per-turn sums into [B, K_max + 1],
    run the token kernel over the turns and gather back (no Python loop over
    rows or tokens).
    """
    r, v, m = _check_bt("turn_gae", rewards=rewards, values=values, loss_mask=loss_mask)
    discount = _check_discount("turn_gae", discount)
    n_rows, n_pos = r.shape
    lam_t = _per_row("turn_gae", "lam", lam, n_rows, r.device)
    boot = _per_row("turn_gae", "bootstrap", bootstrap, n_rows, r.device)
    _check_turn_dtype_shape(turn_ids, m, _ALIGNED_FIELD)
    if turn_ids.device != m.device:
        raise ValueError(f"{_ALIGNED_FIELD}: on device {turn_ids.device}, expected {m.device} like the rewards")
    if n_rows == 0 or n_pos == 0:
        return torch.zeros_like(r), v.clone()
    coef = discount * lam_t
    backend = select_backend(r.device)
    fused = FUSED_TURN_KERNELS.get(backend)
    if fused is not None:
        advantages, returns, errors = fused(r, v, turn_ids, m, coef, boot, discount)
        if bool(errors.any()):
            _aligned_turn_layout(turn_ids, m)  # raises the descriptive error
            raise ValueError(f"{_ALIGNED_FIELD}: invalid turn layout in row {int(errors.nonzero()[0])}")
        return advantages, returns
    layout = _aligned_turn_layout(turn_ids, m)
    turn_r, turn_v, turn_mask = _to_turn_steps(r, v, layout)
    turn_adv, _ = run_token_gae(turn_r, turn_v, turn_mask, coef, boot, discount, backend=backend)
    idx = layout.turn_index.clamp(min=0)
    adv_tok = torch.gather(turn_adv, 1, idx)
    value_tok = torch.gather(turn_v, 1, idx)
    zero = torch.zeros((), dtype=torch.float32, device=r.device)
    advantages = torch.where(layout.generated, adv_tok, zero)
    returns = torch.where(layout.generated, adv_tok + value_tok, v)
    return advantages, returns


# ---------------------------------------------------------------------------
# Turn helpers
# ---------------------------------------------------------------------------


def validate_turn_ids(turn_ids: torch.Tensor, loss_mask: torch.Tensor) -> None:
    """Check raw (unshifted) batch turn ids against the raw loss mask.

    Required: integer dtype, same shape as loss_mask, >= 0 where loss_mask is 1,
    non-decreasing along the generated tokens of each row. Positions where
    loss_mask is 0 carry no turn and are not read (`canonical_turn_ids`).
    Raises ValueError naming the first offending row, position and values.
    """
    _check_turn_dtype_shape(turn_ids, loss_mask, "turn_ids")
    generated = loss_mask != 0
    _check_generated_have_turns(turn_ids, generated, "turn_ids", mask_name="loss_mask")
    _check_non_decreasing(canonical_turn_ids(turn_ids, loss_mask), "turn_ids")


def canonical_turn_ids(turn_ids: torch.Tensor, loss_mask: torch.Tensor) -> torch.Tensor:
    """`turn_ids` with -1 wherever `loss_mask` is 0 (a new tensor of the same dtype).

    Only generated tokens carry a turn. AReaL's workflows write -1 on prompt and
    environment tokens, but its `concat_padded_tensors` pads every tensor with 0,
    so the padding of a shorter row reads as turn 0; AReaL's own turn GAE reads
    turn ids only where the loss mask is 1, and so does this package, through
    this one normal form.
    """
    return torch.where(loss_mask != 0, turn_ids, -1)


def check_turn_ids_type(turn_ids: Any, loss_mask: torch.Tensor) -> None:
    """The cheap part of `validate_turn_ids`: an integer [B, T] tensor shaped like the loss mask."""
    _check_turn_dtype_shape(turn_ids, loss_mask, "turn_ids")


def count_turns(turn_ids: torch.Tensor) -> torch.Tensor:
    """Distinct turns per row of a valid turn-id tensor (aligned or not): LongTensor[B]."""
    _check_turn_dtype_shape(turn_ids, turn_ids, "turn_ids")
    return _turn_starts(turn_ids).sum(dim=1)


@dataclass(frozen=True, eq=False)
class _TurnLayout:
    generated: torch.Tensor  # [B, T] bool, turn_ids >= 0
    turn_index: torch.Tensor  # [B, T] long: latest turn started at or before t (-1 before any)
    starts: torch.Tensor  # [B, T] bool, first token of each turn
    n_turns: torch.Tensor  # [B] long


def _turn_starts(turn_ids: torch.Tensor) -> torch.Tensor:
    """First token of each turn: a generated id above every earlier id of its row."""
    prev_max = torch.cummax(turn_ids.long(), dim=1).values
    prev_max = torch.cat([torch.full_like(prev_max[:, :1], -1), prev_max[:, :-1]], dim=1)
    return (turn_ids >= 0) & (turn_ids > prev_max)


def _aligned_turn_layout(turn_ids: torch.Tensor, mask: torch.Tensor) -> _TurnLayout:
    """Validate aligned turn ids against the aligned loss mask and index the turns.

    The last column is not compared with the mask: the aligned mask's last
    column wraps around from the raw first token and is never a GAE step.
    """
    field = _ALIGNED_FIELD
    generated = turn_ids >= 0
    body = slice(0, max(turn_ids.shape[1] - 1, 0))
    _check_generated_have_turns(turn_ids[:, body], mask[:, body] != 0, field, mask_name="loss_mask (aligned)")
    _check_no_turn_off_mask(turn_ids[:, body], mask[:, body] != 0)
    _check_non_decreasing(turn_ids, field)
    starts = _turn_starts(turn_ids)
    turn_index = torch.cumsum(starts, dim=1) - 1
    n_turns = starts.sum(dim=1)
    return _TurnLayout(generated, turn_index, starts, n_turns)


def _check_no_turn_off_mask(turn_ids: torch.Tensor, generated: torch.Tensor) -> None:
    """Aligned ids for the kernels: -1 off generated tokens (the pipeline aligns them so)."""
    bad = ~generated & (turn_ids != -1)
    if bool(bad.any()):
        row, pos = _first(bad)
        raise ValueError(
            f"{_ALIGNED_FIELD}: row {row}, position {pos} is not a generated token (loss_mask (aligned) == 0) but "
            f"has turn id {int(turn_ids[row, pos])}; expected -1 there (canonical_turn_ids(turn_ids, loss_mask) "
            "gives that form)"
        )


def _to_turn_steps(
    rewards: torch.Tensor, values: torch.Tensor, layout: _TurnLayout
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-turn rewards, values and step mask as [B, K_max + 1] tensors.

    Column K_max (and every column past a row's last turn) is masked, so the
    token kernel sees each turn as a step and bootstraps after the last one.
    """
    n_rows = rewards.shape[0]
    device = rewards.device
    k_max = int(layout.n_turns.max()) if n_rows else 0
    width = k_max + 1
    # Only generated positions carry a turn's reward; the rest go to the unused column.
    attributed = torch.where(layout.generated, layout.turn_index, k_max)
    acc = accumulation_dtype(device)
    turn_r = torch.zeros((n_rows, width), dtype=acc, device=device)
    turn_r.scatter_add_(1, attributed, rewards.to(acc))
    first = torch.where(layout.starts, layout.turn_index, k_max)
    turn_v = torch.zeros((n_rows, width), dtype=torch.float32, device=device)
    turn_v.scatter_add_(1, first, torch.where(layout.starts, values, 0.0))
    steps = torch.arange(width, device=device)[None, :] < layout.n_turns[:, None]
    return turn_r.to(torch.float32), turn_v, steps.to(torch.float32)


def _check_turn_dtype_shape(turn_ids: Any, loss_mask: torch.Tensor, field: str) -> None:
    if not isinstance(turn_ids, torch.Tensor):
        raise ValueError(f"{field}: got {type(turn_ids).__name__}, expected an integer torch.Tensor")
    if turn_ids.dtype.is_floating_point or turn_ids.dtype.is_complex or turn_ids.dtype == torch.bool:
        raise ValueError(f"{field}: got dtype {turn_ids.dtype}, expected an integer dtype (e.g. torch.long)")
    if not isinstance(loss_mask, torch.Tensor) or turn_ids.shape != loss_mask.shape:
        shape = tuple(loss_mask.shape) if isinstance(loss_mask, torch.Tensor) else type(loss_mask).__name__
        raise ValueError(f"{field}: got shape {tuple(turn_ids.shape)}, expected the loss_mask shape {shape}")
    if turn_ids.dim() != 2:
        raise ValueError(f"{field}: got {turn_ids.dim()} dims, expected a 2-D [B, T] tensor")


def _check_generated_have_turns(turn_ids: torch.Tensor, generated: torch.Tensor, field: str, *, mask_name: str) -> None:
    """A turn id >= 0 on every generated token (what other positions hold is not read)."""
    bad_gen = generated & (turn_ids < 0)
    if bool(bad_gen.any()):
        row, pos = _first(bad_gen)
        raise ValueError(
            f"{field}: row {row}, position {pos} is a generated token ({mask_name} == 1) with turn id "
            f"{int(turn_ids[row, pos])}; expected a turn id >= 0 on every generated token"
        )


def _check_non_decreasing(turn_ids: torch.Tensor, field: str) -> None:
    """Along each row's generated tokens, ids never go down."""
    ids = turn_ids.long()
    prev_max = torch.cummax(ids, dim=1).values
    prev_max = torch.cat([torch.full_like(prev_max[:, :1], -1), prev_max[:, :-1]], dim=1)
    bad = (ids >= 0) & (ids < prev_max)
    if bool(bad.any()):
        row, pos = _first(bad)
        earlier = (ids[row, :pos] == prev_max[row, pos]).nonzero()
        where = int(earlier[-1]) if len(earlier) else -1
        raise ValueError(
            f"{field}: row {row} decreases from turn id {int(prev_max[row, pos])} (position {where}) "
            f"to {int(ids[row, pos])} (position {pos}); expected turn ids to be non-decreasing "
            "along the generated tokens of a row"
        )


def _first(bad: torch.Tensor) -> tuple[int, int]:
    """(row, position) of the first True in row-major order."""
    row, pos = bad.nonzero()[0].tolist()
    return int(row), int(pos)


# ---------------------------------------------------------------------------
# GAE lambda
# ---------------------------------------------------------------------------


#: Another name for the same type: functions annotated with either keep working.
GAELambdaInputs = GAELambdaContext


def compute_gae_lambda(
    gae_lambda: float | Callable[..., Any],
    *,
    loss_mask: torch.Tensor,
    turn_ids: torch.Tensor | None = None,
    timestep_unit: str,
    gae_lambda_kwargs: Mapping[str, Any] | None = None,
    source: str = "actor.gae_lambda",
) -> torch.Tensor:
    """One GAE lambda per row (float32 [B] on loss_mask's device).

    A number is broadcast; a callable gets a `GAELambdaContext` built from the
    aligned `loss_mask`/`turn_ids` in `timestep_unit` and `gae_lambda_kwargs`,
    and its result is checked. Every error names `source` (the config field
    or import path) so a misconfigured run points at the culprit.
    """
    _check_lambda_unit(loss_mask, turn_ids, timestep_unit, source)
    kwargs = dict(gae_lambda_kwargs or {})
    if not (is_real(gae_lambda) or callable(gae_lambda)):
        raise ValueError(
            f"{source}: got {gae_lambda!r} ({type(gae_lambda).__name__}), expected a number in [0, 1] "
            "or a callable taking a GAELambdaContext (resolve import paths and built-in names first)"
        )
    n_rows = loss_mask.shape[0]
    if not callable(gae_lambda):
        if kwargs:
            raise ValueError(
                f"{source}: gae_lambda_kwargs {sorted(kwargs)} were given but the lambda is the "
                f"constant {gae_lambda!r}; expected kwargs only with a lambda function"
            )
        value = _check_lambda_number(gae_lambda, source)
        return torch.full((n_rows,), value, dtype=torch.float32, device=loss_mask.device)
    ctx = _lambda_context(loss_mask, turn_ids, timestep_unit, source)  # only functions need lengths
    result = _call_lambda(gae_lambda, ctx, kwargs, source)
    return _check_lambda_result(result, n_rows, loss_mask.device, source)


def _call_lambda(fn: Callable[..., Any], ctx: GAELambdaContext, kwargs: Mapping[str, Any], source: str) -> Any:
    """Call a lambda function with fresh kwargs; its failure names `source` in the message itself."""
    try:
        return fn(ctx, **copy.deepcopy(dict(kwargs)))
    except SystemExit as exc:
        raise LambdaFunctionError(
            f"{source}: the GAE lambda function called sys.exit({exc.code!r}); it must return one lambda "
            "per row or raise an exception"
        ) from exc
    except Exception as exc:
        raise LambdaFunctionError(
            f"{source}: the GAE lambda function raised {type(exc).__name__}: {exc} (kwargs {sorted(kwargs)})"
        ) from exc


class LambdaFunctionError(RuntimeError):
    """A configured GAE lambda function raised; the message names the config field and import path."""


def _check_lambda_unit(loss_mask: Any, turn_ids: torch.Tensor | None, unit: str, source: str) -> None:
    """The cheap checks, done for constants too (no pass over the data)."""
    if unit not in TIMESTEP_UNITS:
        raise ValueError(f"{source}: timestep_unit {unit!r}, expected one of {list(TIMESTEP_UNITS)}")
    if not isinstance(loss_mask, torch.Tensor) or loss_mask.dim() != 2:
        raise ValueError(f"{source}: loss_mask must be an aligned [B, T] tensor, got {_describe(loss_mask)}")
    if turn_ids is None and unit == "turn":
        raise ValueError(
            f"{source}: timestep_unit 'turn' needs turn_ids, but the batch has none; "
            "expected an aligned integer turn_ids tensor (or use timestep_unit 'token')"
        )


def _lambda_context(loss_mask: torch.Tensor, turn_ids: torch.Tensor | None, unit: str, source: str) -> GAELambdaContext:
    tokens = (loss_mask != 0).sum(dim=1)
    if turn_ids is None:
        turns = (tokens > 0).long()
    else:
        _check_turn_dtype_shape(turn_ids, loss_mask, f"{source}: turn_ids")
        turns = count_turns(turn_ids)
    return GAELambdaContext(
        effective_token_lengths=tokens,
        turn_counts=turns,
        timestep_lengths=tokens if unit == "token" else turns,
        timestep_unit=unit,
    )


def _check_lambda_number(value: float, source: str) -> float:
    value = float(value)
    if not math.isfinite(value) or not 0.0 <= value <= 1.0:
        raise ValueError(f"{source}: got lambda {value!r}, expected a finite number in [0, 1]")
    return value


def _check_lambda_result(result: Any, n_rows: int, device: torch.device, source: str) -> torch.Tensor:
    """A [B] floating tensor (or a number, broadcast), finite, in [0, 1], on `device`."""
    if is_real(result):
        value = _check_lambda_number(result, source)
        return torch.full((n_rows,), value, dtype=torch.float32, device=device)
    if not isinstance(result, torch.Tensor):
        raise ValueError(
            f"{source}: returned {type(result).__name__}, expected a torch.Tensor of shape [{n_rows}] "
            "(one lambda per row) or a single number"
        )
    if tuple(result.shape) != (n_rows,):
        raise ValueError(
            f"{source}: returned a tensor of shape {tuple(result.shape)}, expected shape [{n_rows}] "
            "(one lambda per row)"
        )
    if not result.dtype.is_floating_point:
        raise ValueError(f"{source}: returned dtype {result.dtype}, expected a floating-point tensor")
    if result.device != device:
        raise ValueError(f"{source}: returned a tensor on {result.device}, expected device {device}")
    lam = result.detach().to(torch.float32)
    bad = ~torch.isfinite(lam) | (lam < 0) | (lam > 1)
    if bool(bad.any()):
        row = int(bad.nonzero()[0])
        raise ValueError(
            f"{source}: returned lambda {float(result[row])!r} for row {row}, expected finite values in [0, 1]"
        )
    return lam.clone()


# ---------------------------------------------------------------------------
# Argument checks shared by the estimators
# ---------------------------------------------------------------------------


def _check_bt(fn: str, **tensors: Any) -> tuple[torch.Tensor, ...]:
    """Same-shape, same-device 2-D tensors, returned as float32 (not copied when already)."""
    first_name, first = next(iter(tensors.items()))
    out = []
    for name, x in tensors.items():
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{fn}: {name} is {type(x).__name__}, expected a [B, T] torch.Tensor")
        if x.dim() != 2 or x.shape != first.shape:
            raise ValueError(
                f"{fn}: {name} has shape {tuple(x.shape)}, expected a 2-D [B, T] tensor"
                + (f" shaped like {first_name} {tuple(first.shape)}" if name != first_name else "")
            )
        if x.device != first.device:
            raise ValueError(f"{fn}: {name} is on {x.device}, expected {first.device} like {first_name}")
        out.append(x.detach().to(torch.float32))
    return tuple(out)


def _check_discount(fn: str, discount: Any) -> float:
    if not is_number(discount):
        raise ValueError(f"{fn}: discount is {discount!r}, expected a finite number")
    return float(discount)


def _per_row(fn: str, name: str, x: Any, n_rows: int, device: torch.device) -> torch.Tensor:
    """A [B] float32 tensor on `device` from a [B] tensor or a number."""
    if is_real(x):
        return torch.full((n_rows,), float(x), dtype=torch.float32, device=device)
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{fn}: {name} is {type(x).__name__}, expected a [{n_rows}] float tensor")
    if tuple(x.shape) != (n_rows,):
        raise ValueError(f"{fn}: {name} has shape {tuple(x.shape)}, expected [{n_rows}] (one per row)")
    if x.device != device:
        raise ValueError(f"{fn}: {name} is on {x.device}, expected {device} like the rewards")
    return x.detach().to(torch.float32)


def _describe(x: Any) -> str:
    if isinstance(x, torch.Tensor):
        return f"a tensor of shape {tuple(x.shape)} and dtype {x.dtype}"
    return type(x).__name__


#: Former names, still importable (with a DeprecationWarning) for code written against them.
__getattr__ = renamed_attributes(__name__, {"token_gae": "token_gae_tensors", "turn_gae": "turn_gae_tensors"})
