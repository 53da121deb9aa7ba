"""Optional per-token batch fields some stages read: anchor-state keys, entropies, Σπ², IS weights.

* `anchor_ids` [B, T] integer: on each generated token, a key of the environment
  state its turn acted in (e.g. a hash of the observation); equal for every token
  of a turn, anything elsewhere. GiGPO groups steps of a prompt's trajectories that
  share a key. The guess task's rollout adds it.
* `token_entropy` [B, T] float: the entropy of the behaviour policy's next-token
  distribution that sampled token t, stored at t like `logprobs`. The entropy
  advantage term reads it; the trainer computes it at prepare time.
* `sum_pi_squared` [B, T] float: Σ_a π(a)² of the same distribution, stored at t
  like `logprobs`. With π_t = exp(logprob) it gives the optimal token baseline's
  per-token variance proxy 1 - 2π_t + Σπ² = ||e_t - π||²; the trainer computes it
  in the entropy's pass when a stage reads it.
* `rollout_is_weights` [B, T] float: per-token importance weights of the
  training policy against the rollout policy (verl's field of that name), stored
  at t. The optimal token baseline scales its variance proxy by their square
  when the batch has them.

Like the other token fields they are unshifted in the batch and aligned here
(position t carries token t+1's entry); the pipeline hands the aligned copies to
the stages (`TemporalInputs.anchor_ids`, `ProcessAdvantageInputs.token_entropy`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

import torch

from areal_adv.trainer.ppo.checks.batch_checks import BatchError, all_finite

__all__ = [
    "ANCHOR_IDS",
    "AUX_FIELDS",
    "ROLLOUT_IS_WEIGHTS",
    "SUM_PI_SQUARED",
    "TOKEN_ENTROPY",
    "aligned_anchor_ids",
    "aligned_token_entropy",
    "aligned_token_values",
    "check_aux_fields",
    "check_sum_pi_squared_covers_pi",
    "declared_fields",
    "stage_reads",
]

ANCHOR_IDS = "anchor_ids"
TOKEN_ENTROPY = "token_entropy"
SUM_PI_SQUARED = "sum_pi_squared"
ROLLOUT_IS_WEIGHTS = "rollout_is_weights"
AUX_FIELDS = (ANCHOR_IDS, TOKEN_ENTROPY, SUM_PI_SQUARED, ROLLOUT_IS_WEIGHTS)
#: Σπ² is at most 1; float32 sums of squared probabilities may exceed it by rounding.
_SUM_PI_SQUARED_MAX = 1.0 + 1e-5
#: How far below pi_t^2 = exp(old log-prob)^2 a Σπ² may read and still count as rounding, relative to pi_t^2:
#: the two come from two float32 passes over one distribution (the sampler's, the trainer's statistics pass),
#: whose log-probs of a token agree to 2e-5 (tests/trainer/lm/test_sampling.py), so pi_t^2 to about 4e-5.
_PI_SQUARED_SLACK = 4e-5
#: ... plus a few float32 ulps of 1 (the largest Σπ²), for values computed in float32 end to end.
_PI_SQUARED_ULPS = 4 * torch.finfo(torch.float32).eps
#: The attribute through which a stage function names the optional batch fields it reads.
BATCH_FIELDS_ATTRIBUTE = "batch_fields"


def stage_reads(stage: Any) -> frozenset[str]:
    """The optional fields a resolved stage gets: all for a custom stage, the declared ones for a built-in.

    A built-in declares them as its function's `batch_fields` attribute; aligning
    and checking a field costs passes over [B, T], so nobody else pays for them.
    """
    if stage is None:
        return frozenset()
    if stage.custom:
        return frozenset(AUX_FIELDS)
    return declared_fields(stage.fn) & frozenset(AUX_FIELDS)


def declared_fields(fn: Any) -> frozenset[str]:
    """The `batch_fields` a stage function declares, looked up through functools.partial layers."""
    fields: set[str] = set()
    while fn is not None:
        fields.update(getattr(fn, BATCH_FIELDS_ATTRIBUTE, ()) or ())
        fn = getattr(fn, "func", None)
    return frozenset(fields)


def _tensor(data: Mapping[str, Any], key: str) -> torch.Tensor | None:
    value = data.get(key)
    if value is None:
        return None
    ids = data["input_ids"]
    if not torch.is_tensor(value) or tuple(value.shape) != tuple(ids.shape):
        shape = tuple(value.shape) if torch.is_tensor(value) else type(value).__name__
        raise BatchError(f"{key}: expected a tensor of shape {tuple(ids.shape)} like input_ids, got {shape}")
    if value.device != ids.device:
        raise BatchError(f"{key}: on device {value.device}, expected {ids.device} like input_ids")
    return value


def _check_token_floats(data: Mapping[str, Any], key: str, high: float | None, expected: str) -> None:
    """A floating [B, T] field whose values on generated tokens are finite, >= 0 and <= `high`."""
    value = _tensor(data, key)
    if value is None:
        return
    if not value.is_floating_point():
        raise BatchError(f"{key}: expected a floating tensor, got {value.dtype}")
    ok = bool(value.min() >= 0) and (high is None or bool(value.max() <= high))
    if all_finite(value) and ok:  # a few reductions; the exact check only on failure
        return
    valid = torch.isfinite(value) & (value >= 0)
    if high is not None:
        valid &= value <= high
    bad = data["loss_mask"].bool() & ~valid
    if bool(bad.any()):
        row, col = (int(i) for i in bad.nonzero()[0])
        raise BatchError(
            f"{key}: expected {expected} on generated tokens, found {float(value[row, col])!r} "
            f"at row {row}, position {col}"
        )


def check_aux_fields(data: Mapping[str, Any], fields: Collection[str]) -> None:
    """Shape, dtype and values of the optional `fields` that are present (the ones a stage reads)."""
    anchors = _tensor(data, ANCHOR_IDS) if ANCHOR_IDS in fields else None
    if anchors is not None and (anchors.is_floating_point() or anchors.is_complex() or anchors.dtype == torch.bool):
        raise BatchError(f"{ANCHOR_IDS}: expected an integer tensor (one key per generated token), got {anchors.dtype}")
    if TOKEN_ENTROPY in fields:
        _check_token_floats(data, TOKEN_ENTROPY, None, "finite entropies >= 0")
    if SUM_PI_SQUARED in fields:
        _check_token_floats(data, SUM_PI_SQUARED, _SUM_PI_SQUARED_MAX, "sums of squared probabilities in [0, 1]")
    if ROLLOUT_IS_WEIGHTS in fields:
        _check_token_floats(data, ROLLOUT_IS_WEIGHTS, None, "finite importance weights >= 0")


def check_sum_pi_squared_covers_pi(sum_pi_squared: torch.Tensor, old_logp: torch.Tensor, steps: torch.Tensor) -> None:
    """Σπ² >= π_t² at every step: a distribution's sum of squared probabilities covers its sampled token's.

    Aligned [B, T] tensors (position t carries token t + 1's entry, as the stages
    get them) and the [B, T] bool `steps` to check. A value below π_t² cannot come
    from the distribution that gave the old log-prob (another temperature, another
    token's entry, a shifted field); it is refused naming the row and the batch
    position of the token. Rounding between the two passes that computed them is
    allowed (`_PI_SQUARED_SLACK`, `_PI_SQUARED_ULPS`).
    """
    pi_squared = torch.exp(2.0 * old_logp.to(torch.float64))
    floor = pi_squared * (1.0 - _PI_SQUARED_SLACK) - _PI_SQUARED_ULPS
    short = steps & (sum_pi_squared.to(torch.float64) < floor)
    if not bool(short.any()):
        return
    row, col = (int(i) for i in short.nonzero()[0])
    raise BatchError(
        f"{SUM_PI_SQUARED}: expected at least pi_t^2 = exp(old log-prob)^2 on generated tokens (a distribution's "
        f"sum of squared probabilities is at least its sampled token's squared probability), found "
        f"{float(sum_pi_squared[row, col]):.7g} < pi_t^2 = {float(pi_squared[row, col]):.7g} at row {row}, "
        f"position {col + 1}; sum_pi_squared and the log-probs do not describe the same next-token distribution"
    )


def aligned_anchor_ids(data: Mapping[str, Any], fields: Collection[str]) -> torch.Tensor | None:
    """[B, T] long, rolled left one position (last column 0), or None (absent, or not among `fields`)."""
    anchors = data.get(ANCHOR_IDS) if ANCHOR_IDS in fields else None
    if anchors is None:
        return None
    out = torch.roll(anchors.long(), shifts=-1, dims=-1)
    out[:, -1] = 0
    return out


def aligned_token_values(
    data: Mapping[str, Any], key: str, loss_mask: torch.Tensor, fields: Collection[str]
) -> torch.Tensor | None:
    """[B, T] float32 values of a token field rolled left one position and masked by the aligned mask, or None."""
    value = data.get(key) if key in fields else None
    if value is None:
        return None
    active = loss_mask.bool()
    rolled = torch.roll(value.to(torch.float32), shifts=-1, dims=-1)
    return torch.where(active, rolled, torch.zeros_like(rolled))


def aligned_token_entropy(
    data: Mapping[str, Any], loss_mask: torch.Tensor, fields: Collection[str]
) -> torch.Tensor | None:
    """[B, T] float32 entropies rolled left one position and masked by the aligned mask, or None."""
    return aligned_token_values(data, TOKEN_ENTROPY, loss_mask, fields)
