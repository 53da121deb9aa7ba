"""The output guard: no field of the pipeline's result is ever silently NaN or inf.

Every input the pipeline reads is checked finite (`batch_checks`), and custom
stages' outputs are checked by their contracts (`contracts`). What is left is
the built-in arithmetic: a huge `reward_scaling` without a clip, a `kl_ctl`
whose product with the clamped KL overflows float32, critic values near the
float32 limit, an `eps` of 0 over a zero-variance group. The guard runs once,
on the finished fields, in two steps:

1. It *bounds* every [B, T] output from scalars it already has: the largest
   |value| of `values` and `token_rewards` (found by the batch checks in the
   same pass as their finiteness), the [B] output rewards, the config and T.
   Each built-in stage's bound follows from its formula (GAE sums at most T
   TD errors, normalisation divides by at least `eps`, the KL is clamped to
   ±10, ...). A field whose bound is below `SAFE_MAGNITUDE` cannot hold a
   non-finite value, so it is not read again.
   Under `torch.distributed`, batch-level statistics mix every rank's values,
   so the input magnitudes are then all-reduced (MAX) first.
2. Only a field without such a bound (huge magnitudes, `eps` 0, a custom
   stage of unknown magnitude upstream, a built-in the proofs do not cover)
   is scanned. A non-finite value raises `NonFiniteOutputError` naming the
   field and the probable cause.

Reading every output again is a memory-bound pass over four [B, T] tensors (a
few percent of the pipeline at 256 x 8192); the bounds make the guard's cost a
few scalar operations in the common case (measured in docs/performance.md).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from areal_adv.api.cli_args import AdvantageShaping, NormConfig, PPOActorConfig
from areal_adv.trainer.ppo.checks.batch_checks import BatchStats, all_finite
from areal_adv.trainer.ppo.stage_resolution import ResolvedAdvantage, select_process
from areal_adv.utils.call_agreement import before_collective
from areal_adv.utils.collectives import collectives_active
from areal_adv.utils.data import TrajBatchMeta

__all__ = ["GuardContext", "NonFiniteOutputError", "SAFE_MAGNITUDE", "guard_outputs", "magnitudes", "output_bounds"]

INF = math.inf
#: Below this magnitude every float32 output and float64 statistic of the pipeline stays finite:
#: squares (1e30) and their sums over up to 1e12 elements (1e42) fit in float64, and it is far
#: below float32's 3.4e38, so the float32 rounding of a bounded computation cannot reach inf.
SAFE_MAGNITUDE = 1e15
#: KLEstimator clamps every per-token estimate to [-10, 10] (and never returns NaN for finite inputs), and so
#: do the fused kernels, which compute its bits: the guard trusts this bound and never reads kl_rewards
#: (before 0.1.0 the kernels' k3 could give exp(inf) - inf = NaN, unseen; tests/trainer/ppo/test_fused_pipeline.py
#: checks both paths on extreme finite log-probs).
KL_CLAMP = 10.0
#: [B, T] outputs computed by the pipeline's arithmetic (the others are masked copies of finite inputs).
GUARDED_FIELDS = ("kl_rewards", "tot_rewards", "returns", "advantages")
#: Built-in estimators whose outputs obey |A| <= T * (|r| + 2|V|) + |KL| (sums of at most T steps).
BOUNDED_ESTIMATORS = frozenset({"token_gae", "turn_gae", "reinforce_return", "turn_reinforce_return"})


class NonFiniteOutputError(ValueError):
    """An output field would hold NaN or inf although every input is finite."""

    def __init__(self, field: str, found: float, where: str, cause: str):
        self.field = field
        self.cause = cause
        super().__init__(
            f"{field}: the advantage pipeline produced {found!r} at {where} from finite inputs; probable cause: {cause}"
        )


@dataclass(frozen=True, kw_only=True)
class GuardContext:
    """Everything the guard may look at besides the output fields (built by keyword: six of them)."""

    config: PPOActorConfig
    resolved: ResolvedAdvantage
    options: AdvantageShaping
    stats: BatchStats
    meta: TrajBatchMeta  # `meta.complete`: False when synthesised for a bare batch
    has_token_rewards: bool


@dataclass(frozen=True)
class Bound:
    """|x| <= value; `known` is False when the magnitude of an upstream custom stage is unknown.

    `checked` marks a field a stage contract has already scanned (finite, magnitude unknown).
    """

    value: float
    known: bool = True
    checked: bool = False

    @property
    def safe(self) -> bool:
        return self.checked or (self.known and self.value <= SAFE_MAGNITUDE)


UNKNOWN = Bound(INF, known=False)


def _add(*bounds: Bound) -> Bound:
    if not all(b.known for b in bounds):
        return UNKNOWN
    return Bound(sum(b.value for b in bounds))


def _scale(bound: Bound, factor: float) -> Bound:
    return bound if not bound.known else Bound(bound.value * factor)


# ---------------------------------------------------------------------------
# Bounds, stage by stage
# ---------------------------------------------------------------------------


def _max_abs(t: torch.Tensor) -> float:
    if t.numel() == 0:
        return 0.0
    low, high = torch.aminmax(t.detach())
    return max(-float(low), float(high))


def _scaled(magnitude: float, config: PPOActorConfig) -> Bound:
    """clip((r + bias) * scaling, ±clip): bounded by the clip only if r + bias itself fits."""
    shifted = magnitude + abs(config.reward_bias)
    if shifted > SAFE_MAGNITUDE:
        return Bound(INF)
    return Bound(min(config.reward_clip, shifted * abs(config.reward_scaling)))


def normalised(bound: Bound, norm: NormConfig) -> Bound:
    """(x - mean) / (std + eps): |x - mean| <= 4 max|x| (leave-one-out means included), std + eps >= eps."""
    if not bound.known:
        return UNKNOWN
    if bound.value > SAFE_MAGNITUDE:
        return Bound(INF)
    if norm.mean_level is None and norm.std_level is None:
        return bound
    if "running" in (norm.mean_level, norm.std_level):
        return UNKNOWN  # the statistics span earlier steps, which the bound does not see
    numerator = 4.0 * bound.value if norm.mean_level is not None else bound.value
    if norm.std_level is None:
        return Bound(numerator)
    floor = min(norm.eps, 1.0)
    return Bound(numerator / floor) if floor > 0 else Bound(INF)  # eps 0: a zero std gives 0 / 0


def _reference_magnitude(meta: TrajBatchMeta) -> float:
    groups = meta.rollout_groups or ()
    return max((_max_abs(g.rewards) for g in groups if g is not None and g.rewards is not None), default=0.0)


def _crosses_ranks(cfg: PPOActorConfig) -> bool:
    """Batch-level statistics are all-reduced: another rank's magnitudes reach this rank's outputs."""
    norms = [n for n in (cfg.reward_norm, cfg.adv_norm) if n is not None]
    if not any("batch" in (n.mean_level, n.std_level) for n in norms):
        return False
    return collectives_active() and dist.get_world_size() > 1


def magnitudes(rewards: torch.Tensor, ctx: GuardContext) -> dict[str, float]:
    """The largest |value| of every input the bounds start from, over all ranks when statistics cross them.

    The all-reduce (MAX of five numbers) runs only when a batch-level normalisation
    already all-reduces in the same call, on every rank alike (they share the config).
    """
    local = {
        "rewards": _max_abs(rewards),
        "references": _reference_magnitude(ctx.meta),
        "values": ctx.stats.magnitude("values"),
        "token_rewards": ctx.stats.magnitude("token_rewards"),
        "n_pos": float(ctx.stats.n_pos),  # ranks pad to their own width: the widest bounds them all
    }
    if not _crosses_ranks(ctx.config):
        return local
    both = torch.tensor(list(local.values()), dtype=torch.float64, device=rewards.device)
    before_collective()  # the ranks agree on any failure first (areal_adv.utils.call_agreement)
    dist.all_reduce(both, op=dist.ReduceOp.MAX)
    return dict(zip(local, both.tolist()))


def score_bound(mags: Mapping[str, float], ctx: GuardContext) -> Bound:
    """The placed outcome score: scaled rewards, then reward normalisation."""
    cfg = ctx.config
    raw = _scaled(mags["rewards"], cfg)
    if cfg.reward_norm is None:
        return raw
    if ctx.meta.complete:
        if ctx.resolved.outcome.implementation != "identity":
            return UNKNOWN  # it may have returned shaped references, which the guard does not see
        refs = _scaled(mags["references"], cfg)
        raw = Bound(max(raw.value, refs.value))
    return normalised(raw, cfg.reward_norm)


def _estimator_name(ctx: GuardContext) -> tuple[str, bool]:
    stage = ctx.resolved.estimator
    if stage is None:
        return f"{ctx.config.gae_timestep_unit}_gae", False
    return stage.implementation, stage.custom


def temporal_bounds(parts: Mapping[str, Bound], ctx: GuardContext) -> dict[str, Bound]:
    """tot_rewards, returns and (pre-normalisation) advantages of the estimator."""
    name, custom = _estimator_name(ctx)
    if custom:
        checked = Bound(INF, known=False, checked=True)  # its contract scanned these
        return {"tot_rewards": checked, "returns": checked, "temporal": checked}
    if name not in BOUNDED_ESTIMATORS:
        return {"tot_rewards": UNKNOWN, "returns": UNKNOWN, "temporal": UNKNOWN}
    rewards = _add(parts["kl"], parts["score"], parts["folded"])
    steps = _scale(_add(rewards, _scale(parts["values"], 2.0)), parts["n_pos"].value)
    return {"tot_rewards": rewards, "returns": _add(steps, parts["values"]), "temporal": _add(steps, parts["kl"])}


def process_bound(advantages: Bound, parts: Mapping[str, Bound], ctx: GuardContext) -> Bound:
    """The final advantages after process shaping."""
    stage, kwargs = select_process(ctx.resolved, ctx.config, ctx.options)
    if stage.custom:
        return Bound(INF, known=False, checked=True)  # its contract scanned the result
    if not ctx.has_token_rewards or not ctx.config.token_rewards_as_adv:
        return advantages  # built-ins are the identity without direct token rewards
    if stage.implementation == "additive":
        return _add(advantages, parts["direct"])
    if stage.implementation == "gvpo" and advantages.known:
        return Bound(max(advantages.value * (1.0 + kwargs["negative_scale"]), kwargs["zero_penalty"]))
    if stage.implementation == "process_weighted" and advantages.known:
        return Bound(max(advantages.value, 1.0))  # process rewards lie in [0, 1] there
    return UNKNOWN


def output_bounds(fields: Mapping[str, Any], ctx: GuardContext) -> dict[str, Bound]:
    """Bounds of every guarded field plus the parts they are made of (for the diagnosis)."""
    cfg = ctx.config
    mags = magnitudes(fields["rewards"], ctx)
    process = Bound(mags["token_rewards"])
    none = Bound(0.0)
    parts = {
        "score": score_bound(mags, ctx),
        "kl": Bound(KL_CLAMP * abs(cfg.kl_ctl)),
        "folded": process if ctx.has_token_rewards and not cfg.token_rewards_as_adv else none,
        "direct": process if ctx.has_token_rewards and cfg.token_rewards_as_adv else none,
        "values": Bound(mags["values"]),
        "n_pos": Bound(mags["n_pos"]),
    }
    temporal = temporal_bounds(parts, ctx)
    adv = temporal["temporal"] if cfg.adv_norm is None else normalised(temporal["temporal"], cfg.adv_norm)
    return {
        **parts,
        **temporal,
        "adv_norm": adv,
        "kl_rewards": parts["kl"],
        "advantages": process_bound(adv, parts, ctx),
    }


# ---------------------------------------------------------------------------
# The guard and its diagnosis
# ---------------------------------------------------------------------------


def guard_outputs(fields: Mapping[str, Any], ctx: GuardContext) -> None:
    """Raise `NonFiniteOutputError` if an output field holds NaN or inf; read only unbounded fields."""
    if ctx.resolved.compute is not None:
        return  # a full replacement's outputs have all been scanned by its contract
    rewards = fields["rewards"]
    if rewards.is_floating_point() and not all_finite(rewards):
        _raise(fields, "rewards", ctx, None)
    bounds = output_bounds(fields, ctx)
    for name in GUARDED_FIELDS:
        if bounds[name].safe or all_finite(fields[name]):
            continue
        _raise(fields, name, ctx, bounds)


def _raise(fields: Mapping[str, Any], name: str, ctx: GuardContext, bounds: Mapping[str, Bound] | None) -> None:
    t = fields[name]
    bad = ~torch.isfinite(t)
    index = bad.nonzero()[0].tolist()
    where = f"row {index[0]}" + (f", position {index[1]}" if len(index) > 1 else "")
    cause = _rewards_cause(ctx) if bounds is None else diagnose(name, bounds, ctx)
    raise NonFiniteOutputError(name, t[bad][0].item(), where, cause)


#: What feeds each field, in pipeline order: the first part beyond the safe range is the probable cause.
_FEEDS = {
    "kl_rewards": ("kl",),
    "tot_rewards": ("score", "kl", "folded"),
    "returns": ("score", "kl", "folded", "values", "returns"),
    "advantages": ("score", "kl", "folded", "values", "temporal", "adv_norm", "direct", "advantages"),
}


def diagnose(name: str, bounds: Mapping[str, Bound], ctx: GuardContext) -> str:
    """The earliest part feeding `name` whose magnitude is beyond the safe range, in words."""
    for part in _FEEDS[name]:
        bound = bounds[part]
        if bound.known and bound.value > SAFE_MAGNITUDE:
            return _CAUSES[part](ctx, bound.value)
    cfg = ctx.config
    return (
        "a stage produced values beyond the float32 range (the magnitudes of custom stages are not known "
        f"in advance): actor.kl_ctl={cfg.kl_ctl!r}, reward_scaling={cfg.reward_scaling!r}, "
        f"reward_clip={cfg.reward_clip!r}, max |values|={ctx.stats.magnitude('values'):.3g}, "
        f"max |token_rewards|={ctx.stats.magnitude('token_rewards'):.3g}"
    )


def _score_cause(ctx: GuardContext, value: float) -> str:
    cfg = ctx.config
    norm = cfg.reward_norm
    if norm is not None and norm.std_level is not None and norm.eps < 1e-12:
        return (
            f"actor.reward_norm.eps={norm.eps!r}: reward normalisation divides by std + eps, and a group "
            "of equal scores has std 0; use eps > 0 (the default is 1e-5)"
        )
    return (
        f"the outcome score (reward + actor.reward_bias) * actor.reward_scaling reaches {value:.3g} "
        f"(reward_bias={cfg.reward_bias!r}, reward_scaling={cfg.reward_scaling!r}, "
        f"reward_clip={cfg.reward_clip!r}), beyond the float32 range; bound it with a finite "
        "actor.reward_clip or a smaller reward_scaling"
    )


def _kl_cause(ctx: GuardContext, value: float) -> str:
    return (
        f"actor.kl_ctl={ctx.config.kl_ctl!r} times the KL estimate (clamped to ±{KL_CLAMP:g}) reaches "
        f"{value:.3g}, beyond the float32 range (±3.4e38); use a much smaller kl_ctl"
    )


def _process_cause(ctx: GuardContext, value: float) -> str:
    return (
        f"token_rewards reach {value:.3g} in magnitude; added to the other rewards and summed over a "
        "trajectory they leave the float32 range"
    )


def _values_cause(ctx: GuardContext, value: float) -> str:
    where = " (on some data-parallel rank; batch statistics mix all ranks)" if _crosses_ranks(ctx.config) else ""
    return (
        f"values reach {value:.3g} in magnitude{where}: the estimator's TD errors r + discount * V(t+1) - "
        "V(t) and returns A + V leave the float32 range (critic values must stay far inside it)"
    )


def _temporal_cause(ctx: GuardContext, value: float) -> str:
    name, _ = _estimator_name(ctx)
    return (
        f"estimator {name!r}: summed over up to T={ctx.stats.n_pos} steps, the rewards and values reach "
        f"{value:.3g}, beyond the float32 range"
    )


def _adv_norm_cause(ctx: GuardContext, value: float) -> str:
    norm = ctx.config.adv_norm
    if norm is not None and norm.std_level is not None and norm.eps < 1e-12:
        return (
            f"actor.adv_norm.eps={norm.eps!r}: advantage normalisation divides by std + eps, and a "
            "group or batch whose advantages are all equal has std 0; use eps > 0 (the default is 1e-5)"
        )
    return f"advantage normalisation by std + eps (eps={norm.eps!r}) scales the advantages up to {value:.3g}"


def _shaping_cause(ctx: GuardContext, value: float) -> str:
    stage, _ = select_process(ctx.resolved, ctx.config, ctx.options)
    return f"process advantage shaping {stage.implementation!r} takes the advantages to {value:.3g}"


_CAUSES: dict[str, Callable[[GuardContext, float], str]] = {
    "score": _score_cause,
    "kl": _kl_cause,
    "folded": _process_cause,
    "direct": _process_cause,
    "values": _values_cause,
    "returns": _temporal_cause,
    "temporal": _temporal_cause,
    "adv_norm": _adv_norm_cause,
    "advantages": _shaping_cause,
}


def _rewards_cause(ctx: GuardContext) -> str:
    cfg = ctx.config
    if cfg.overlong_reward_penalty:
        return (
            f"the length penalty (actor.overlong_penalty_factor={cfg.overlong_penalty_factor!r}, "
            f"overlong_tokens={cfg.overlong_tokens!r}) added to the task rewards leaves the float32 range"
        )
    return f"outcome stage {ctx.resolved.outcome.implementation!r} returned it"
