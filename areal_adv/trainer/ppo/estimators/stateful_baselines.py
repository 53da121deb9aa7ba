"""Outcome stages whose baseline persists across training steps: KRPO and single-stream SPO.

Both keep a small per-prompt table in their `StageState` (keys from the batch's
`prompt_keys`, see `prompt_table`), so a resumed run continues with the baselines
the interrupted one had, and they agree on it across data-parallel ranks: every
rank gathers the step's observations of all ranks and applies the same merge.

* `krpo` (arXiv 2505.07527, the authors' `group_advantages`): a 1-D Kalman filter
  runs over a group's rewards in order; each sample's baseline is the filter's
  posterior mean after seeing it, its scale the posterior std. The authors start
  a fresh filter per group (`carry_over: false`); with `carry_over: true` (the
  default here) a prompt's filter continues from where its last visit left it.
* `spo` (arXiv 2509.13232, the authors' verl recipe): a Beta(alpha, beta) tracker
  of each prompt's success rate, discounted by rho at every visit; the advantage
  is r - alpha/(alpha+beta), normalised over the whole batch. No groups.

Rows of a split rollout share their logical rollout's baseline and scale; the
per-rollout values go out as `normalization_rewards` so a `reward_norm` on top
stays consistent. The filter recursion is sequential within a group, so it loops
over the position inside a group (at most the largest group size), vectorised
over all groups; nothing loops over rows, tokens or groups.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from areal_adv.api.config_checks import is_number
from areal_adv.api.stage_registry import register_stage
from areal_adv.trainer.ppo.estimators.peer_algorithms import LogicalRollouts, logical_rollouts
from areal_adv.trainer.ppo.estimators.prompt_table import group_prompt_keys, table_lookup, table_merge
from areal_adv.trainer.ppo.stage_state import StageState, distributed_world, gather_rows
from areal_adv.trainer.ppo.stage_types import OutcomeResult, OutcomeRewardInputs
from areal_adv.utils.call_agreement import before_collective

__all__ = ["SPO_RHO_MODES", "kalman_pass", "krpo", "spo"]

SPO_RHO_MODES = ("constant", "kl")
_KEYS, _VALUES = "prompt_keys", "values"


def _where(name: str) -> str:
    return f"outcome_reward_shaping {name!r}"


def _number(where: str, name: str, value: Any, *, low: float | None = None, positive: bool = False) -> float:
    if not is_number(value):
        raise ValueError(f"{where}: {name} must be a finite number, got {value!r}")
    if positive and value <= 0:
        raise ValueError(f"{where}: {name} must be > 0, got {value!r}")
    if low is not None and value < low:
        raise ValueError(f"{where}: {name} must be >= {low}, got {value!r}")
    return float(value)


def _flag(where: str, name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{where}: {name} must be true or false, got {value!r}")
    return value


def _table(state: StageState, width: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    keys = state.get(_KEYS)
    if keys is None:
        return torch.zeros(0, dtype=torch.long, device=device), torch.zeros(
            0, width, dtype=torch.float64, device=device
        )
    values = state.get(_VALUES)
    if values.ndim != 2 or values.shape[1] != width or values.shape[0] != keys.shape[0]:
        raise ValueError(
            f"{state.where}: the saved table has shape {tuple(values.shape)} for {keys.shape[0]} "
            f"prompts, expected [prompts, {width}]"
        )
    return keys.to(device), values.to(device, torch.float64)


def _store(state: StageState, keys: torch.Tensor, values: torch.Tensor) -> None:
    state.set(_KEYS, keys.cpu())
    state.set(_VALUES, values.cpu())


# ---------------------------------------------------------------------------
# KRPO
# ---------------------------------------------------------------------------


def _group_matrix(
    group: torch.Tensor, z: torch.Tensor, n_groups: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Members laid out [G, L] in their order (`group` sorted, as in the batch): (Z, valid, position)."""
    sizes = torch.bincount(group, minlength=n_groups)
    starts = torch.cumsum(sizes, 0) - sizes
    position = torch.arange(group.shape[0], device=group.device) - starts[group]
    width = int(sizes.max()) if group.numel() else 0
    matrix = torch.zeros(n_groups, width, dtype=torch.float64, device=z.device)
    valid = torch.zeros(n_groups, width, dtype=torch.bool, device=z.device)
    matrix[group, position] = z.to(torch.float64)
    valid[group, position] = True
    return matrix, valid, position


def kalman_pass(
    z: torch.Tensor, valid: torch.Tensor, x0: torch.Tensor, p0: torch.Tensor, process_var: float, meas_var: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Run one scalar Kalman filter per row of `z` [G, L] over its valid prefix.

    Predict P- = P + Q; gain K = P- / (P- + R); update x += K (z - x), P = (1 - K) P-.
    Returns the posterior mean and variance after each observation [G, L] and
    after the last one [G]. The loop is over positions, vectorised over groups.
    """
    x, p = x0.to(torch.float64).clone(), p0.to(torch.float64).clone()
    xs, ps = torch.zeros_like(z), torch.zeros_like(z)
    for j in range(z.shape[1]):
        p_pred = p + process_var
        gain = p_pred / (p_pred + meas_var)
        step = valid[:, j]
        x = torch.where(step, x + gain * (z[:, j] - x), x)
        p = torch.where(step, (1.0 - gain) * p_pred, p)
        xs[:, j], ps[:, j] = x, p
    return xs, ps, x, p


def _krpo_params(
    where: str, process_var: Any, meas_var: Any, init_mean: Any, init_var: Any, eps: Any, carry_over: Any
) -> tuple[float, float, float, float, float, bool]:
    return (
        _number(where, "process_var", process_var, low=0.0),
        _number(where, "meas_var", meas_var, positive=True),
        _number(where, "init_mean", init_mean),
        _number(where, "init_var", init_var, positive=True),
        _number(where, "eps", eps, low=0.0),
        _flag(where, "carry_over", carry_over),
    )


@register_stage("outcome_reward_shaping", "krpo")
def krpo(
    inputs: OutcomeRewardInputs,
    *,
    state: StageState,
    process_var: float = 1e-5,
    meas_var: float = 1e-2,
    init_mean: float = 0.0,
    init_var: float = 1.0,
    eps: float = 1e-8,
    carry_over: bool = True,
) -> OutcomeResult:
    """KRPO: (r - x_k) / (sqrt(P_k) + eps), x_k, P_k the Kalman posterior after the group's k-th sample.

    Kalman-filter enhanced GRPO (arXiv:2505.07527); reference code: the authors'
    `group_advantages`.

    Defaults are the authors' (Q 1e-5, R 1e-2, x0 0, P0 1, eps 1e-8). With
    `carry_over` each prompt's filter starts from its state after its previous
    visit (a prompt seen for the first time starts from x0, P0); the state is
    updated with every group of the step, identically on every rank.
    """
    where = _where("krpo")
    q, r, x_init, p_init, eps, carry_over = _krpo_params(
        where, process_var, meas_var, init_mean, init_var, eps, carry_over
    )
    logical = logical_rollouts(inputs, "krpo")
    device = logical.rewards.device
    z, valid, position = _group_matrix(logical.rollout_group, logical.rewards, logical.n_groups)
    default = torch.tensor([x_init, p_init], dtype=torch.float64, device=device)
    if carry_over:
        keys = group_prompt_keys(inputs.data, inputs.meta, where)
        table_keys, table_values = _table(state, 2, device)
        prior, _ = table_lookup(table_keys, table_values, keys, default)
    else:
        prior = default.expand(logical.n_groups, 2)
    xs, ps, _, _ = kalman_pass(z, valid, prior[:, 0], prior[:, 1], q, r)
    baseline = xs[logical.rollout_group, position]
    scale = torch.sqrt(ps[logical.rollout_group, position]) + eps
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    rows = (inputs.data["rewards"].to(torch.float64) - baseline[logical.row_rollout]) / scale[logical.row_rollout]
    rollouts = (logical.rewards - baseline) / scale
    if carry_over:
        _update_krpo(state, table_keys, table_values, keys, logical, default, q, r)
    return _shaped(rows, rollouts, logical)


def _shaped(rows: torch.Tensor, rollouts: torch.Tensor, logical: LogicalRollouts) -> OutcomeResult:
    references = rollouts.to(torch.float32) if logical.split else None
    return OutcomeResult(rewards=rows.to(torch.float32), normalization_rewards=references)


def _global_groups(keys: torch.Tensor, logical: LogicalRollouts) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Every rank's rollouts: (group key [N], reward [N], global group id [N]), rank 0's first."""
    rank = torch.full_like(logical.rollout_group, _rank())
    g_keys, rewards, local, ranks = gather_rows(
        keys[logical.rollout_group], logical.rewards, logical.rollout_group, rank
    )
    new = torch.ones_like(local, dtype=torch.bool)
    new[1:] = (local[1:] != local[:-1]) | (ranks[1:] != ranks[:-1])
    return g_keys, rewards, torch.cumsum(new.long(), 0) - 1


def _rank() -> int:
    import torch.distributed as dist

    return dist.get_rank() if distributed_world() > 1 else 0


def _canonical_group_order(group_keys: torch.Tensor, z: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Groups sorted by key, then by their reward sequence: the same order whatever the rank layout.

    Sequences compare like Python lists: element by element, a prefix first.
    """
    padded = torch.where(valid, z, torch.full_like(z, -math.inf))
    order = torch.arange(group_keys.shape[0], device=group_keys.device)
    for j in range(z.shape[1] - 1, -1, -1):  # least significant column first, each sort stable
        order = order[torch.argsort(padded[order, j], stable=True)]
    return order[torch.argsort(group_keys[order], stable=True)]


def _update_krpo(
    state: StageState,
    table_keys: torch.Tensor,
    table_values: torch.Tensor,
    keys: torch.Tensor,
    logical: LogicalRollouts,
    default: torch.Tensor,
    q: float,
    r: float,
) -> None:
    """Chain the step's groups of each prompt (canonical order) through its filter and store the result.

    Every group's advantages used the state from before the step; the stored
    state is what a filter that saw all of the step's groups of the prompt, one
    after the other, ends with.
    """
    g_keys, rewards, gid = _global_groups(keys, logical)
    n_groups = int(gid[-1]) + 1
    z, valid, _ = _group_matrix(gid, rewards, n_groups)
    group_keys = torch.zeros(n_groups, dtype=torch.long, device=g_keys.device).index_copy_(0, gid, g_keys)
    order = _canonical_group_order(group_keys, z, valid)
    z, valid, group_keys = z[order], valid[order], group_keys[order]
    unique, first = torch.unique_consecutive(group_keys, return_inverse=True)
    starts = torch.searchsorted(group_keys, unique)
    occurrence = torch.arange(n_groups, device=z.device) - starts[first]
    current, _ = table_lookup(table_keys, table_values, unique, default)
    for rnd in range(int(occurrence.max()) + 1):  # rounds: the r-th group of every prompt at once
        pick = occurrence == rnd
        slot = first[pick]
        _, _, x, p = kalman_pass(z[pick], valid[pick], current[slot, 0], current[slot, 1], q, r)
        current = current.index_copy(0, slot, torch.stack([x, p], dim=1))
    _store(state, *table_merge(table_keys, table_values, unique, current))


# ---------------------------------------------------------------------------
# SPO
# ---------------------------------------------------------------------------


def _spo_rho(
    inputs: OutcomeRewardInputs,
    logical: LogicalRollouts,
    where: str,
    mode: str,
    rho: float,
    d_half: float,
    rho_min: float,
    rho_max: float,
) -> torch.Tensor:
    """Per logical rollout: the tracker's discount at this visit."""
    if mode == "constant":
        return torch.full_like(logical.rewards, rho)
    drift = inputs.data.get("policy_drift")
    n_rows = logical.row_rollout.shape[0]
    if drift is None or not torch.is_tensor(drift) or tuple(drift.shape) != (n_rows,) or not drift.is_floating_point():
        raise ValueError(
            f"{where}: rho_mode 'kl' reads the batch's 'policy_drift', a float tensor [B] = [{n_rows}] holding, per "
            "row, the mean absolute log-prob change of the prompt's previous response since the tracker last saw it "
            f"(got {None if drift is None else (tuple(drift.shape) if torch.is_tensor(drift) else type(drift).__name__)})"
        )
    bad = ~torch.isfinite(drift) | (drift < 0)
    if bool(bad.any()):
        row = int(bad.nonzero()[0, 0])
        raise ValueError(f"{where}: 'policy_drift'[{row}] is {float(drift[row])!r}, expected a finite number >= 0")
    first_row = torch.zeros(logical.n_rollouts, dtype=torch.long, device=drift.device).scatter_reduce(
        0, logical.row_rollout, torch.arange(n_rows, device=drift.device), reduce="amin", include_self=False
    )
    value = torch.pow(2.0, -drift.to(torch.float64)[first_row] / d_half)
    return value.clamp(min=rho_min, max=rho_max)


def _spo_params(
    where: str,
    prior_alpha: Any,
    prior_beta: Any,
    rho: Any,
    rho_mode: Any,
    d_half: Any,
    rho_min: Any,
    rho_max: Any,
    normalize: Any,
    eps: Any,
) -> tuple:
    if rho_mode not in SPO_RHO_MODES:
        raise ValueError(f"{where}: rho_mode must be one of {list(SPO_RHO_MODES)}, got {rho_mode!r}")
    values = (
        _number(where, "prior_alpha", prior_alpha, positive=True),
        _number(where, "prior_beta", prior_beta, positive=True),
        _number(where, "rho", rho, low=0.0),
        rho_mode,
        _number(where, "d_half", d_half, positive=True),
        _number(where, "rho_min", rho_min, low=0.0),
        _number(where, "rho_max", rho_max, low=0.0),
        _flag(where, "normalize", normalize),
        _number(where, "eps", eps, low=0.0),
    )
    for name, value in (("rho", values[2]), ("rho_min", values[5]), ("rho_max", values[6])):
        if value > 1:
            raise ValueError(f"{where}: {name} must lie in [0, 1], got {value!r}")
    if values[5] > values[6]:
        raise ValueError(f"{where}: rho_min ({values[5]}) must not exceed rho_max ({values[6]})")
    return values


def _batch_whiten(rows: torch.Tensor, rollouts: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(a - mean) / (std + eps) over every rank's logical rollouts (unbiased std; 1 for a single sample)."""
    import torch.distributed as dist

    stats = torch.stack(
        [
            torch.tensor(float(rollouts.numel()), dtype=torch.float64, device=rollouts.device),
            rollouts.sum(),
            (rollouts * rollouts).sum(),
        ]
    )
    if distributed_world() > 1:
        before_collective()  # the ranks agree on any failure first (areal_adv.utils.call_agreement)
        dist.all_reduce(stats, op=dist.ReduceOp.SUM)
    n, total, squares = stats.unbind(0)
    mean = total / n
    var = torch.clamp(squares - n * mean * mean, min=0.0) / torch.clamp(n - 1, min=1.0)
    std = torch.where(n > 1, torch.sqrt(var), torch.ones_like(var)) + eps
    std = torch.where(std > 0, std, torch.ones_like(std))
    return (rows - mean) / std, (rollouts - mean) / std


@register_stage("outcome_reward_shaping", "spo")
def spo(
    inputs: OutcomeRewardInputs,
    *,
    state: StageState,
    prior_alpha: float = 0.5,
    prior_beta: float = 0.5,
    rho: float = 0.875,
    rho_mode: str = "constant",
    d_half: float = 0.06,
    rho_min: float = 0.875,
    rho_max: float = 0.96,
    normalize: bool = True,
    eps: float = 1e-8,
) -> OutcomeResult:
    """Single-stream SPO: A = r - v(x), v(x) = alpha / (alpha + beta) of the prompt's Beta tracker.

    Single-stream Policy Optimization (arXiv:2509.13232); reference code: the authors'
    verl recipe (`spo_ray_trainer.py`).

    Rewards must lie in [0, 1] (success rates). After the advantages are taken,
    each prompt's tracker is updated with the step's samples of it: alpha = rho
    alpha + sum r, beta = rho beta + sum (1 - r); a prompt not seen before starts
    from (prior_alpha, prior_beta). `rho_mode: constant` uses `rho`; `kl` uses
    rho = clip(2^(-D / d_half), rho_min, rho_max) with D the batch's per-row
    `policy_drift`. `normalize` whitens the advantages over the whole batch (all
    ranks), per sample, as the authors do.
    """
    where = _where("spo")
    prior_alpha, prior_beta, rho, rho_mode, d_half, rho_min, rho_max, normalize, eps = _spo_params(
        where, prior_alpha, prior_beta, rho, rho_mode, d_half, rho_min, rho_max, normalize, eps
    )
    logical = logical_rollouts(inputs, "spo")
    outside = (logical.rewards < 0) | (logical.rewards > 1)
    if bool(outside.any()):
        k = int(outside.nonzero()[0, 0])
        raise ValueError(
            f"{where}: logical rollout {k} has reward {float(logical.rewards[k])!r}; SPO's Beta tracker "
            "needs success rewards in [0, 1]"
        )
    device = logical.rewards.device
    keys = group_prompt_keys(inputs.data, inputs.meta, where)[logical.rollout_group]
    table_keys, table_values = _table(state, 2, device)
    default = torch.tensor([prior_alpha, prior_beta], dtype=torch.float64, device=device)
    ab, _ = table_lookup(table_keys, table_values, keys, default)
    value = ab[:, 0] / (ab[:, 0] + ab[:, 1])
    rows = inputs.data["rewards"].to(torch.float64) - value[logical.row_rollout]
    rollouts = logical.rewards - value
    if normalize:
        rows, rollouts = _batch_whiten(rows, rollouts, eps)
    discount = _spo_rho(inputs, logical, where, rho_mode, rho, d_half, rho_min, rho_max)
    _update_spo(state, table_keys, table_values, keys, logical.rewards, discount, default)
    return _shaped(rows, rollouts, logical)


def _update_spo(
    state: StageState,
    table_keys: torch.Tensor,
    table_values: torch.Tensor,
    keys: torch.Tensor,
    rewards: torch.Tensor,
    discount: torch.Tensor,
    default: torch.Tensor,
) -> None:
    """alpha = rho alpha + sum r, beta = rho beta + sum (1 - r) per prompt, over every rank's samples.

    Sums run over the samples sorted by (prompt, reward), so the result does not
    depend on how the prompts were spread over ranks. A prompt's rho is the mean
    over its samples (they share it in practice).
    """
    keys, rewards, discount = gather_rows(keys, rewards, discount)
    order = torch.argsort(rewards, stable=True)
    order = order[torch.argsort(keys[order], stable=True)]
    keys, rewards, discount = keys[order], rewards[order], discount[order]
    unique, slot = torch.unique_consecutive(keys, return_inverse=True)
    n = unique.shape[0]

    def per_prompt(x: torch.Tensor) -> torch.Tensor:
        return torch.zeros(n, dtype=torch.float64, device=x.device).index_add_(0, slot, x.to(torch.float64))

    counts = per_prompt(torch.ones_like(rewards))
    rho = per_prompt(discount) / counts
    ab, _ = table_lookup(table_keys, table_values, unique, default)
    alpha = rho * ab[:, 0] + per_prompt(rewards)
    beta = rho * ab[:, 1] + per_prompt(1.0 - rewards)
    _store(state, *table_merge(table_keys, table_values, unique, torch.stack([alpha, beta], dim=1)))


krpo.batch_fields = ("prompt_keys",)
spo.batch_fields = ("prompt_keys", "policy_drift")
