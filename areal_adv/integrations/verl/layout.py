"""verl's tensors -> `ResponseBatch`: outcome rewards, groups, values, log-probs, turns.

verl hands every estimator `token_level_rewards` [B, R]: the reward manager's
score at one response position (plus, with `algorithm.use_kl_in_reward`, a dense
KL penalty). The pipeline takes one outcome reward per response and places it
at the response's last generated token itself, and computes its KL reward from
log-probs (`actor.kl_ctl`), so a row must carry at most one non-zero entry; a
dense row is refused with a message that says where it came from.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from areal_adv.integrations.response_layout import LayoutError, ResponseBatch

__all__ = ["outcome_rewards", "group_ids", "from_registry_call", "from_data_proto", "DENSE_HINT"]

DENSE_HINT = (
    "The areal estimator takes one outcome score per response and computes its own KL reward from "
    "old_log_probs/ref_log_prob (actor.kl_ctl, actor.kl_estimator) in areal_adv.integrations.verl.compute_advantage; "
    "set algorithm.use_kl_in_reward=false. Dense per-token rewards go in data.batch['token_rewards'] "
    "(process rewards) through the same wrapper."
)


def outcome_rewards(
    token_level_rewards: torch.Tensor, *, field: str = "token_level_rewards", scores: torch.Tensor | None = None
) -> torch.Tensor:
    """One reward per row (the row sum); error when a row has more than one non-zero entry."""
    if not torch.is_tensor(token_level_rewards) or token_level_rewards.dim() != 2:
        raise LayoutError(
            f"{field}: expected a [B, R] tensor, got {getattr(token_level_rewards, 'shape', token_level_rewards)!r}"
        )
    if not token_level_rewards.is_floating_point():
        token_level_rewards = token_level_rewards.to(torch.float32)
    finite = torch.isfinite(token_level_rewards)
    if not bool(finite.all()):
        row, col = (int(i) for i in (~finite).nonzero()[0])
        raise LayoutError(
            f"{field}: row {row}, response position {col} is {float(token_level_rewards[row, col])!r}, "
            "expected finite rewards"
        )
    nonzero = (token_level_rewards != 0).sum(dim=1)
    dense = nonzero > 1
    if bool(dense.any()):
        row = int(dense.nonzero()[0, 0])
        cols = (token_level_rewards[row] != 0).nonzero()[:, 0].tolist()
        cause = ""
        if scores is not None and not torch.equal(scores, token_level_rewards):
            cause = (
                " token_level_rewards differs from token_level_scores, i.e. verl added its in-reward KL "
                "penalty (algorithm.use_kl_in_reward=true)."
            )
        raise LayoutError(
            f"{field}: row {row} has {int(nonzero[row])} non-zero entries (response positions {cols[:6]}"
            f"{'...' if len(cols) > 6 else ''}), expected at most one outcome score per response.{cause} {DENSE_HINT}"
        )
    return token_level_rewards.sum(dim=1)


def group_ids(index: Any, n_rows: int, *, field: str = "uid") -> list[Any]:
    """verl's `uid` index (numpy object array, list or tensor) as a list of hashable keys."""
    if index is None:
        raise LayoutError(
            f"{field}: verl passed no uid index; the areal estimator groups responses by prompt through "
            "data.non_tensor_batch['uid'] (set by verl's trainer for every rollout)"
        )
    if torch.is_tensor(index):
        keys = index.tolist()
    else:
        keys = np.asarray(index, dtype=object).reshape(-1).tolist()
    if len(keys) != n_rows:
        raise LayoutError(f"{field}: got {len(keys)} ids, expected one per response ({n_rows})")
    return [tuple(k) if isinstance(k, list) else k for k in keys]


def from_registry_call(
    token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: Any, reward_baselines: torch.Tensor | None
) -> ResponseBatch:
    """What verl's registry call passes: rewards, mask, uid and (ReMax) baselines only."""
    rewards = outcome_rewards(token_level_rewards)
    return ResponseBatch(
        response_mask=response_mask,
        rewards=rewards,
        group_ids=group_ids(index, rewards.shape[0]),
        reward_baselines=reward_baselines,
        names=(
            ("response_mask", "response_mask"),
            ("rewards", "token_level_rewards"),
            ("group_ids", "uid"),
            ("reward_baselines", "reward_baselines"),
        ),
    )


def _optional(batch: Mapping[str, Any], key: str) -> torch.Tensor | None:
    return batch[key] if key in batch.keys() else None


def from_data_proto(data: Any) -> ResponseBatch:
    """A whole DataProto: also values, log-probs, turn ids, process rewards, truncation flags.

    Keys beyond verl's own (`turn_ids`, `token_rewards`, `is_truncated`, all per
    response token or per row) are read when the rollout adds them; without
    `turn_ids`, each run of generated tokens in `response_mask` is one turn.
    verl's `sum_pi_squared` (its actor computes it with
    `actor.calculate_sum_pi_squared=True`) and `rollout_is_weights` (its rollout
    correction) are read when present, for the optimal token baseline.
    """
    batch = data.batch
    mask = batch["response_mask"]
    R = mask.shape[1]
    scores = _optional(batch, "token_level_scores")
    rewards = outcome_rewards(batch["token_level_rewards"], scores=scores)
    lengths = None
    if "attention_mask" in batch.keys():
        lengths = batch["attention_mask"][:, -R:].long().sum(dim=1)
    uid = data.non_tensor_batch.get("uid") if data.non_tensor_batch is not None else None
    return ResponseBatch(
        response_mask=mask,
        rewards=rewards,
        group_ids=group_ids(uid, rewards.shape[0], field="data.non_tensor_batch['uid']"),
        lengths=lengths,
        values=_optional(batch, "values"),
        logprobs=_optional(batch, "old_log_probs"),
        ref_logprobs=_optional(batch, "ref_log_prob"),
        token_rewards=_optional(batch, "token_rewards"),
        turn_ids=_optional(batch, "turn_ids"),
        is_truncated=_optional(batch, "is_truncated"),
        reward_baselines=_optional(batch, "reward_baselines"),
        sum_pi_squared=_optional(batch, "sum_pi_squared"),
        rollout_is_weights=_optional(batch, "rollout_is_weights"),
        names=tuple(
            (f, f"data.batch[{k!r}]")
            for f, k in (
                ("response_mask", "response_mask"),
                ("rewards", "token_level_rewards"),
                ("values", "values"),
                ("logprobs", "old_log_probs"),
                ("ref_logprobs", "ref_log_prob"),
                ("token_rewards", "token_rewards"),
                ("turn_ids", "turn_ids"),
                ("is_truncated", "is_truncated"),
                ("reward_baselines", "reward_baselines"),
                ("lengths", "attention_mask"),
                ("sum_pi_squared", "sum_pi_squared"),
                ("rollout_is_weights", "rollout_is_weights"),
            )
        )
        + (("group_ids", "data.non_tensor_batch['uid']"),),
    )
