"""`combine`: an estimator that sums weighted advantages of other estimators and per-token terms.

    A = Σ_i w_i · A_i,    A_distill = −KL(log π_old, log π_teacher) per generated token

Each term is either another estimator (a built-in name or an import path, with its
own kwargs), whose advantages enter with weight w, or the on-policy distillation
term, the estimated reverse KL from the behaviour policy to a teacher on each
generated token. "GRPO + distillation" is ROLL's mixed on-policy distillation
(`use_opd`): `roll/utils/functionals.py:compute_advantage` returns
`advantages = rl_advantages − Σ_teachers opd_kl_coef · compute_approx_kl(logp, teacher_logp)`
(alibaba/ROLL, commit 8eb27cc); NeMo-RL's on-policy distillation uses the same
per-token reverse-KL signal. The teacher is the batch's `ref_logp` or its
`teacher_logp` ([B, T], aligned like `ref_logp`).

```yaml
actor:
  reward_norm: {mean_level: group, std_level: group, eps: 1.0e-6}   # GRPO's outcome normalisation
  advantage:
    estimator:
      implementation: combine
      kwargs:
        terms:
          - {estimator: reinforce_return, weight: 1.0}
          - {term: distillation, teacher: ref_logp, weight: 0.5, kl_estimator: k1}
```

Returns and monitoring rewards come from the first estimator term (the critic's
targets stay that estimator's). The sub-estimators are resolved when the actor
is built, like any stage (`stage_resolution`), so a bad name fails at start-up.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from areal_adv.api.config_checks import is_number
from areal_adv.api.stage_registry import register_stage
from areal_adv.trainer.ppo.stage_types import TemporalInputs, TemporalResult

__all__ = [
    "DISTILLATION",
    "KL_ESTIMATORS",
    "LOGP_FIELDS",
    "TEACHERS",
    "CombineTerm",
    "combine",
    "parse_terms",
    "reads_reference",
    "reverse_kl",
]

DISTILLATION = "distillation"
TEACHERS = ("ref_logp", "teacher_logp")
KL_ESTIMATORS = ("k1", "k2", "k3")
LOGP_FIELDS = ("logprobs", "ref_logp", "teacher_logp")
_WHERE = "estimator 'combine'"


@dataclass(frozen=True)
class CombineTerm:
    """One resolved term: an estimator to run (`run`), or the distillation term (`teacher` set)."""

    label: str
    weight: float
    run: Callable[[TemporalInputs], TemporalResult] | None = None
    teacher: str | None = None
    kl_estimator: str = "k1"


def _number(where: str, value: Any) -> float:
    if not is_number(value):
        raise ValueError(f"{where}: weight must be a finite number, got {value!r}")
    return float(value)


def parse_terms(terms: Any) -> list[dict[str, Any]]:
    """Check the `terms` kwarg; one dict per term: {estimator, kwargs, weight} or {term, teacher, weight, kl_estimator}."""
    if not isinstance(terms, Sequence) or isinstance(terms, (str, bytes)) or not terms:
        raise ValueError(f"{_WHERE}: kwargs.terms must be a non-empty list of terms, got {terms!r:.80}")
    out = []
    for i, term in enumerate(terms):
        where = f"{_WHERE}: terms[{i}]"
        if not isinstance(term, Mapping):
            raise ValueError(f"{where}: got {term!r:.60}, expected a mapping")
        if ("estimator" in term) == ("term" in term):
            raise ValueError(
                f"{where}: give exactly one of 'estimator' (a name or import path) or "
                f"'term: {DISTILLATION}', got keys {sorted(term)}"
            )
        weight = _number(where, term.get("weight", 1.0))
        if "estimator" in term:
            extra = set(term) - {"estimator", "kwargs", "weight"}
            kwargs = term.get("kwargs", {}) or {}
            if extra or not isinstance(term["estimator"], str) or not isinstance(kwargs, Mapping):
                raise ValueError(
                    f"{where}: an estimator term has 'estimator' (a string), optional 'kwargs' (a "
                    f"mapping) and 'weight', got {dict(term)!r:.120}"
                )
            if term["estimator"] == "combine":
                raise ValueError(f"{where}: a combine term cannot itself be 'combine'; list its terms here instead")
            out.append({"estimator": term["estimator"], "kwargs": dict(kwargs), "weight": weight})
            continue
        extra = set(term) - {"term", "teacher", "weight", "kl_estimator"}
        teacher, kl = term.get("teacher", "ref_logp"), term.get("kl_estimator", "k1")
        if term["term"] != DISTILLATION or extra or teacher not in TEACHERS or kl not in KL_ESTIMATORS:
            raise ValueError(
                f"{where}: a per-token term is {{term: {DISTILLATION}, teacher: one of {list(TEACHERS)}, "
                f"kl_estimator: one of {list(KL_ESTIMATORS)}, weight}}, got {dict(term)!r:.120}"
            )
        out.append({"term": DISTILLATION, "teacher": teacher, "kl_estimator": kl, "weight": weight})
    if not any("estimator" in t for t in out):
        raise ValueError(f"{_WHERE}: terms need at least one estimator term (its returns are the critic's targets)")
    return out


def reads_reference(implementation: str | None, kwargs: Mapping[str, Any] | None) -> bool:
    """True when a configured `combine` estimator has a distillation term against `ref_logp`.

    The trainer then keeps its reference model (the initial policy) even with
    `kl_ctl: 0`, so that the batch carries `ref_logp`.
    """
    if implementation != "combine" or not isinstance(kwargs, Mapping):
        return False
    terms = kwargs.get("terms")
    if not isinstance(terms, Sequence) or isinstance(terms, (str, bytes)):
        return False
    return any(
        isinstance(t, Mapping) and t.get("term") == DISTILLATION and t.get("teacher", "ref_logp") == "ref_logp"
        for t in terms
    )


def reverse_kl(logp: torch.Tensor, teacher: torch.Tensor, kind: str) -> torch.Tensor:
    """ROLL's `compute_approx_kl`: k1 = log π − log π_t; k2 = ½(log π − log π_t)²; k3 = clamp(e^−r + r − 1, ±10)."""
    r = logp - teacher
    if kind == "k1":
        return r
    if kind == "k2":
        return 0.5 * r * r
    return torch.clamp(torch.exp(-r) + r - 1.0, min=-10.0, max=10.0)


def _distillation(inputs: TemporalInputs, term: CombineTerm) -> torch.Tensor:
    teacher = getattr(inputs, term.teacher)
    mask = inputs.loss_mask
    if (
        teacher is None
        or not torch.is_tensor(teacher)
        or tuple(teacher.shape) != tuple(mask.shape)
        or not teacher.is_floating_point()
    ):
        got = (
            "nothing"
            if teacher is None
            else (f"{teacher.dtype} {tuple(teacher.shape)}" if torch.is_tensor(teacher) else type(teacher).__name__)
        )
        raise ValueError(
            f"{_WHERE}: {term.label} reads the batch's {term.teacher!r} (a float [B, T] tensor of the "
            f"teacher's log-probs, aligned like ref_logp), got {got}"
        )
    active = mask.bool()
    teacher = teacher.to(torch.float64)
    if not bool(torch.isfinite(teacher[active]).all()):
        row, col = (int(i) for i in (active & ~torch.isfinite(teacher)).nonzero()[0])
        raise ValueError(
            f"{_WHERE}: {term.teacher!r} is {float(teacher[row, col])!r} at row {row}, position {col}, "
            "a generated token; expected finite log-probs"
        )
    logp = inputs.old_logp.to(torch.float64)
    kl = reverse_kl(logp, torch.where(active, teacher, logp), term.kl_estimator)
    return -(kl * mask.to(torch.float64))


@register_stage("estimator", "combine")
def combine(inputs: TemporalInputs, *, terms: Sequence[CombineTerm]) -> TemporalResult:
    """Σ_i w_i A_i over the terms (see the module docstring); returns from the first estimator term.

    The distillation term follows ROLL's `compute_advantage` with `use_opd` (docs: *Peer
    algorithms as presets*, *Advantage combination: your own mix in YAML*).
    """
    advantages = torch.zeros(inputs.loss_mask.shape, dtype=torch.float64, device=inputs.loss_mask.device)
    first: TemporalResult | None = None
    for term in terms:
        if term.run is not None:
            result = term.run(inputs)
            first = result if first is None else first
            advantages = advantages + term.weight * result.advantages.to(torch.float64)
        else:
            advantages = advantages + term.weight * _distillation(inputs, term)
    return TemporalResult(
        advantages=advantages.to(torch.float32), returns=first.returns, total_rewards=first.total_rewards
    )


combine.batch_fields = LOGP_FIELDS
