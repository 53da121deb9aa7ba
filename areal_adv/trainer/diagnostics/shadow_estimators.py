"""Shadow estimators: other estimators' advantages computed on the batch a run trains on.

A shadow is a second `PPOActor` (no engine: it never trains) whose config is the
run's actor config with the algorithm replaced: the algorithm keys
(`ALGORITHM_KEYS`, each replacing the run's value whole) that a preset or a
config file (`*.yaml`, named by its path; its metrics by its file stem) sets in
its own `actor:` section, or, for a built-in estimator name,
`actor.advantage.estimator`. It computes
its advantages on the step's exact batch (the same rewards, masks, log-probs and
values) and never touches the run's actor, batch or stage state, so training is
unchanged.

A shadow whose algorithm needs a batch field the run does not produce (a
critic's values, greedy baselines, process rewards, per-turn rows, seat ids) is
skipped with the reason (`batch_offer` says what the batches carry); the behaviour
policy's entropy and Σπ² are computed for it (`step_diagnostics`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from areal_adv.api.cli_args import ConfigError, PPOActorConfig, actor_config_from_dict, config_to_dict
from areal_adv.api.estimator_algorithm import ALGORITHM_KEYS, algorithm_of, resolved_config, source_file
from areal_adv.api.train_args import shadow_label
from areal_adv.trainer.diagnostics.batch_offer import BatchOffer
from areal_adv.utils.batch_meta import TrajBatchMeta

__all__ = [
    "ALGORITHM_KEYS",
    "COMPUTED_FIELDS",
    "Shadow",
    "build_shadows",
    "drop_on_error",
    "shadow_actor_config",
    "shadow_advantages",
]

#: Batch fields a shadow may read that are computed for it from the policy (one extra no-grad forward).
COMPUTED_FIELDS = ("token_entropy", "sum_pi_squared")
#: Estimators that bootstrap from a critic's values.
_VALUE_ESTIMATORS = ("token_gae", "turn_gae")


@dataclass
class Shadow:
    """One shadow estimator (`name`: its metrics' label): its actor, or why it is skipped; `fields`: computed fields."""

    name: str
    actor: Any = None  # PPOActor
    skipped: str | None = None
    fields: frozenset[str] = field(default_factory=frozenset)


def shadow_actor_config(active: PPOActorConfig, name: str) -> PPOActorConfig:
    """The run's actor config with `name`'s algorithm (`areal_adv.api.estimator_algorithm`'s rule).

    A shadow never trains, so of a preset's actor keys it takes the advantage
    side only (`ALGORITHM_KEYS`; the PPO update's keys would change nothing).
    """
    data = config_to_dict(active)
    part = algorithm_of(name)
    if part.estimator is not None:
        data["advantage"] = {**data["advantage"], "estimator": {"implementation": name, "kwargs": {}}}
    else:
        data.update({key: value for key, value in part.actor.items() if key in ALGORITHM_KEYS})
    return actor_config_from_dict(data)


def _missing(name: str, offer: BatchOffer) -> str | None:
    """Why the run's batches cannot feed `name`'s algorithm, or None."""
    source = source_file(name)
    if source is not None:
        cfg = resolved_config(source)  # what its runs need from a batch
        needs = [
            (cfg.critic.enabled and not offer.values, "values from a critic (critic.enabled)"),
            (cfg.rollout.greedy_baseline and not offer.greedy_baselines, "greedy baselines (rollout.greedy_baseline)"),
            (cfg.rollout.prm.enabled and not offer.process_rewards, "process rewards (rollout.prm.enabled)"),
            (cfg.rollout.export != offer.export, f"rollout.export={cfg.rollout.export} rows"),
        ]
    else:
        needs = [(name in _VALUE_ESTIMATORS and not offer.values, "values from a critic (critic.enabled)")]
    wanted = [what for lacking, what in needs if lacking]
    return f"needs {' and '.join(wanted)}, which this run's batches lack" if wanted else None


def build_shadows(names: Sequence[str], active: PPOActorConfig, offer: BatchOffer) -> list[Shadow]:
    """A `Shadow` per name, in order: built (its plugins resolved now) or skipped with the reason."""
    from areal_adv.trainer.ppo.actor import PPOActor
    from areal_adv.trainer.ppo.checks.aux_fields import declared_fields

    out = []
    for name in names:
        label = shadow_label(name)
        reason = _missing(name, offer)
        if reason is not None:
            out.append(Shadow(label, skipped=reason))
            continue
        try:
            actor = PPOActor(shadow_actor_config(active, name))
        except (ConfigError, ValueError, TypeError, ImportError) as exc:
            out.append(Shadow(label, skipped=f"its config does not combine with this run's: {exc}"))
            continue
        r = actor.resolved
        read = frozenset().union(
            *(declared_fields(s.fn) for s in (r.compute, r.outcome, r.estimator, r.process) if s is not None)
        )
        if "role_ids" in read and not offer.seats:
            out.append(Shadow(label, skipped="needs seat ids (role_ids), which this run's batches lack"))
            continue
        out.append(Shadow(label, actor=actor, fields=read & frozenset(COMPUTED_FIELDS)))
    return out


def shadow_advantages(
    shadows: Sequence[Shadow],
    batch: Mapping[str, Any],
    meta: TrajBatchMeta | None,
    computed: Mapping[str, Any],
    *,
    shaping: Any = None,
    on_error: Callable[[Shadow, Exception], None] | None = None,
) -> dict[str, dict[str, Any]]:
    """{name: the pipeline's output} for every built shadow, on `batch` plus the `computed` fields it reads.

    The batch is not modified (the pipeline returns new dicts); a shadow's
    stage state (KRPO, SPO) advances only on the steps it is measured. With
    `on_error`, a shadow whose computation fails is reported there and left
    out of this call's result instead of raising (a measurement must not stop
    the training it watches).
    """
    out = {}
    for shadow in shadows:
        if shadow.actor is None:
            continue
        extra = {k: computed[k] for k in shadow.fields if k in computed and k not in batch}
        try:
            out[shadow.name] = shadow.actor.compute_advantages({**batch, **extra}, meta, shaping=shaping)
        except Exception as exc:
            if on_error is None:
                raise
            on_error(shadow, exc)
    return out


def drop_on_error(log: logging.Logger) -> Callable[[Shadow, Exception], None]:
    """An `on_error` for `shadow_advantages` that drops the failing shadow from then on and logs the cause once.

    A shadow is a measurement: one that fails on a batch (a field it cannot use, a
    plugin's bug) must not stop the training it watches, nor fail again every step.
    """

    def drop(shadow: Shadow, exc: Exception) -> None:
        """Leave `shadow` out from now on, saying why once."""
        shadow.actor, shadow.skipped = None, f"failed on a batch ({type(exc).__name__}: {exc})"
        log.warning("diagnostics: %s dropped: %s", shadow.name, shadow.skipped)

    return drop
