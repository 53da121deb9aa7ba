"""RAE: role-conditioned advantage estimation with one EMA baseline per (game, role).

A_i = r_i - b_{g,p}, then b_{g,p} <- d * b_{g,p} + (1 - d) * r_i
(SPIRAL, arXiv 2506.24119; the authors' `spiral/utils.py:EMA` and
`train_spiral.py:SelfPlayActor.prepare_trajectories`, commit a02d0ed).

In two-player zero-sum self-play one policy plays both seats, and a seat can
win more often by construction (moving first, holding the better card). A shared
baseline would then credit the seat rather than the play; RAE keeps a baseline
per game and role, so each sample is compared with how that seat usually fares.

The authors' order, kept exactly: the baseline a sample sees is the EMA *before*
its own reward enters, and samples update their (game, role) EMA one after the
other in batch order, so a later sample of the same seat in the same step sees
the earlier ones. Every EMA starts at 0.0 (the authors' `EMA.value = 0.0`), and
the decay defaults to their `role_baseline_ema_gamma = 0.95`.

The ids come from the batch: `role_ids` [B] (the seat a row's rollout played)
and optional `game_ids` [B] (which game; absent = one game). The trainer fills
them from each problem row's `role_id` / `game_id` when this stage is configured.
Under data parallelism every rank gathers the step's samples of all ranks, rank 0's
first, and runs the same sequence, so the state is identical on every rank; a
rank's own samples are baselined by their place in that global sequence. The EMA
recursion loops over a sample's position within its (game, role) in the step,
vectorised over all (game, role) pairs.
"""

from __future__ import annotations

from typing import Any

import torch

from areal_adv.api.config_checks import is_number
from areal_adv.api.stage_registry import register_stage
from areal_adv.trainer.ppo.estimators.peer_algorithms import logical_rollouts
from areal_adv.trainer.ppo.estimators.prompt_table import table_lookup, table_merge
from areal_adv.trainer.ppo.stage_state import StageState, distributed_world, gather_rows
from areal_adv.trainer.ppo.stage_types import OutcomeResult, OutcomeRewardInputs

__all__ = ["GAME_IDS", "ROLE_IDS", "ema_sequence", "rae"]

ROLE_IDS, GAME_IDS = "role_ids", "game_ids"
_KEYS, _VALUES = "keys", "values"
_ID_LIMIT = 2**31  # a (game, role) pair packs into one int64 key: game * 2^31 + role
_WHERE = "outcome_reward_shaping 'rae'"


def _ids(data: Any, name: str, n_rows: int, required: bool) -> torch.Tensor:
    ids = data.get(name)
    if ids is None:
        if required:
            raise ValueError(
                f"{_WHERE}: the batch has no {name!r}; RAE needs one integer role id per row [B] = "
                f"[{n_rows}] (the seat the row's rollout played; the trainer takes it from each "
                "problem row's 'role_id')"
            )
        return torch.zeros(n_rows, dtype=torch.long, device=data["rewards"].device)
    if (
        not torch.is_tensor(ids)
        or tuple(ids.shape) != (n_rows,)
        or ids.is_floating_point()
        or ids.is_complex()
        or ids.dtype == torch.bool
    ):
        got = f"{ids.dtype} {tuple(ids.shape)}" if torch.is_tensor(ids) else type(ids).__name__
        raise ValueError(f"{_WHERE}: {name!r} is {got}, expected an integer tensor of shape ({n_rows},)")
    ids = ids.long()
    bad = (ids < 0) | (ids >= _ID_LIMIT)
    if bool(bad.any()):
        row = int(bad.nonzero()[0, 0])
        raise ValueError(f"{_WHERE}: {name!r}[{row}] is {int(ids[row])}, expected an id in [0, 2^31)")
    return ids


def _rollout_keys(inputs: OutcomeRewardInputs, row_rollout: torch.Tensor, n_rollouts: int) -> torch.Tensor:
    """[N] int64: each logical rollout's packed (game, role) key; rows of a rollout must agree."""
    n_rows = row_rollout.shape[0]
    role = _ids(inputs.data, ROLE_IDS, n_rows, True)
    game = _ids(inputs.data, GAME_IDS, n_rows, False)
    row_key = game * _ID_LIMIT + role
    first = torch.full((n_rollouts,), -1, dtype=torch.long, device=row_key.device)
    first = first.scatter_reduce(0, row_rollout, row_key, reduce="amax", include_self=False)
    differs = row_key != first[row_rollout]
    if bool(differs.any()):
        row = int(differs.nonzero()[0, 0])
        raise ValueError(
            f"{_WHERE}: rows of logical rollout {int(row_rollout[row])} have different (game, role) "
            f"ids (row {row}: ({int(game[row])}, {int(role[row])})); one rollout plays one seat"
        )
    return first


def ema_sequence(
    keys: torch.Tensor, rewards: torch.Tensor, start: torch.Tensor, decay: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Run one EMA per distinct key over `rewards` [N] in order: (baseline seen by each [N], unique keys, final).

    `start(unique_keys)` gives each key's value before the sequence. The loop is
    over a sample's occurrence among its key's samples, vectorised over keys;
    each update is `decay * value + (1 - decay) * reward` in float64, the
    authors' expression.
    """
    unique, slot = torch.unique(keys, sorted=True, return_inverse=True)
    n = keys.shape[0]
    order = torch.argsort(slot, stable=True)
    counts = torch.bincount(slot, minlength=unique.shape[0])
    begins = torch.cumsum(counts, 0) - counts
    occurrence = torch.empty_like(slot)
    occurrence[order] = torch.arange(n, device=keys.device) - begins[slot[order]]
    value = start(unique).clone()
    baseline = torch.zeros(n, dtype=torch.float64, device=keys.device)
    for j in range(int(counts.max()) if n else 0):
        pick = (occurrence == j).nonzero(as_tuple=True)[0]
        s = slot[pick]
        baseline[pick] = value[s]
        value[s] = decay * value[s] + (1 - decay) * rewards[pick]
    return baseline, unique, value


@register_stage("outcome_reward_shaping", "rae")
def rae(inputs: OutcomeRewardInputs, *, state: StageState, decay: float = 0.95) -> OutcomeResult:
    """RAE: r - b_{game, role}, b the (game, role) EMA before this sample; see the module docstring.

    SPIRAL's role-conditioned advantage estimation (arXiv:2506.24119); reference code:
    the authors' `spiral/utils.py:EMA` and `train_spiral.py:prepare_trajectories`.
    """
    if not is_number(decay, low=0.0, high=1.0, low_open=True, high_open=True):
        raise ValueError(f"{_WHERE}: decay must be a number in (0, 1) (the authors' check), got {decay!r}")
    logical = logical_rollouts(inputs, "rae")
    keys = _rollout_keys(inputs, logical.row_rollout, logical.n_rollouts)
    device = logical.rewards.device
    table_keys = state.get(_KEYS)
    if table_keys is None:
        table_keys = torch.zeros(0, dtype=torch.long)
        table_values = torch.zeros(0, 1, dtype=torch.float64)
    else:
        table_values = state.get(_VALUES)
    table_keys, table_values = table_keys.to(device), table_values.to(device, torch.float64)
    zero = torch.zeros(1, dtype=torch.float64, device=device)

    def start(unique: torch.Tensor) -> torch.Tensor:
        return table_lookup(table_keys, table_values, unique, zero)[0][:, 0]

    rank = torch.full_like(keys, _rank())
    all_keys, all_rewards, all_ranks = gather_rows(keys, logical.rewards, rank)
    baseline, unique, final = ema_sequence(all_keys, all_rewards, start, float(decay))
    own = baseline[all_ranks == _rank()]
    merged_keys, merged_values = table_merge(table_keys, table_values, unique, final[:, None])
    state.set(_KEYS, merged_keys.cpu())
    state.set(_VALUES, merged_values.cpu())
    rows = inputs.data["rewards"].to(torch.float64) - own[logical.row_rollout]
    references = (logical.rewards - own).to(torch.float32) if logical.split else None
    return OutcomeResult(rewards=rows.to(torch.float32), normalization_rewards=references)


def _rank() -> int:
    import torch.distributed as dist

    return dist.get_rank() if distributed_world() > 1 else 0


rae.batch_fields = (ROLE_IDS, GAME_IDS)
