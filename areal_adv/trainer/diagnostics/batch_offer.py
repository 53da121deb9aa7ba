"""What a run's batches carry beyond rewards, masks and log-probs: what a shadow estimator may rely on.

A shadow whose algorithm needs a field the batches lack (a critic's values, greedy
baselines, process rewards, per-turn rows, seat ids) is skipped with the reason
(`shadow_estimators.build_shadows`). Every caller describes its batches by the fields they
carry (`BatchOffer.of_fields`): the engines by the batch in hand, the trainer and
`areal-adv diagnose` by the fields the run's config makes its batches carry
(`run_offer`), known before the first step so the opening lines can name what is skipped.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING

from areal_adv.trainer.rollout.stage_fields import stage_batch_fields

if TYPE_CHECKING:
    from areal_adv.api.train_args import ExperimentConfig
    from areal_adv.trainer.ppo.stage_resolution import ResolvedAdvantage

__all__ = ["BatchOffer", "run_batch_fields", "run_offer"]


@dataclass(frozen=True)
class BatchOffer:
    """What the run's batches carry beyond rewards, masks and log-probs (what a shadow may rely on)."""

    values: bool = False  # a critic's `values`
    greedy_baselines: bool = False  # `reward_baselines` (rollout.greedy_baseline)
    process_rewards: bool = False  # `token_rewards` (rollout.prm.enabled)
    export: str = "episode"  # rollout.export
    seats: bool = False  # `role_ids` / `game_ids`

    @classmethod
    def of_fields(cls, fields: Collection[str], *, export: str = "episode") -> BatchOffer:
        """The offer of batches that carry `fields` (batch keys, in the pipeline's names), exported per `export`."""
        return cls(
            values="values" in fields,
            greedy_baselines="reward_baselines" in fields,
            process_rewards="token_rewards" in fields,
            export=export,
            seats="role_ids" in fields,
        )


def run_batch_fields(cfg: ExperimentConfig, resolved: ResolvedAdvantage) -> frozenset[str]:
    """The optional fields the trainer's batches carry under `cfg`, whose actor resolved to `resolved`.

    A critic's `values`, `reward_baselines` (`rollout.greedy_baseline`), `token_rewards`
    (`rollout.prm.enabled`), and the fields the configured stages declare they read (seat ids among them).
    """
    by_config = {
        "values": cfg.critic.enabled,
        "reward_baselines": cfg.rollout.greedy_baseline,
        "token_rewards": cfg.rollout.prm.enabled,
    }
    return frozenset(name for name, on in by_config.items() if on) | stage_batch_fields(resolved)


def run_offer(cfg: ExperimentConfig, resolved: ResolvedAdvantage) -> BatchOffer:
    """The offer of the trainer's batches under `cfg`, the same in the run and in `areal-adv diagnose` of it."""
    return BatchOffer.of_fields(run_batch_fields(cfg, resolved), export=cfg.rollout.export)
