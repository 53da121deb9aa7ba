"""The diagnostics' two step observers: the shadow estimators on each due step, and the saved rollouts.

The measuring and the files are `areal_adv.trainer.diagnostics`'s; these classes only say
when the trainer calls them (`Phase.ADVANTAGES`) and what they read there, so that the step
computes the trained weights' log-probs before the update for them
(`step_observers.logprobs_read_before_update`). Listed in `step_observers.BUILTIN_OBSERVERS`;
registered in this order (shadow diagnostics, then saved rollouts).
"""

from __future__ import annotations

from areal_adv.api.train_args import ExperimentConfig
from areal_adv.trainer.diagnostics.rollout_store import rollout_path, save_rollout
from areal_adv.trainer.diagnostics.step_diagnostics import StepDiagnostics
from areal_adv.trainer.rollout.stage_fields import sampled_token_stats
from areal_adv.trainer.run.step_observers import Observation, Phase, StepObserver, StepServices, StepView, step_observer
from areal_adv.utils.random_states import preserved_random_states

__all__ = ["SavedRollouts", "ShadowDiagnostics"]


@step_observer(enabled=lambda cfg: cfg.diagnostics.enabled)
class ShadowDiagnostics(StepObserver):
    """`diagnostics.estimators`: the shadows measured on each due step's batch, after the advantages.

    Reads the trained weights' log-probs before the update (the gradient probe takes the PPO
    ratio against them), so with diagnostics on they come from a pass of their own.
    """

    name = "diagnostics"
    phase = Phase.ADVANTAGES
    reads = frozenset({"prox_logp", "logprobs", "loss_mask", "rewards", "advantages", "sum_pi_squared"})
    timed_as = "diagnostics"

    def __init__(self, cfg: ExperimentConfig, services: StepServices) -> None:
        self.config = cfg.diagnostics
        # the shadows' actors are resolved without drawing from the run's RNG
        with preserved_random_states(services.device):
            self.diagnostics = StepDiagnostics(
                cfg, services.actor, services.engine, world_size=services.ctx.world_size, device=services.device
            )

    def due(self, step: int) -> bool:
        return self.config.due(step)

    def observe(self, view: StepView) -> Observation:
        return Observation(self.diagnostics.measure(view.batch, view.meta, view.data))

    def opening_lines(self) -> str:
        return self.diagnostics.opening_lines()


@step_observer(enabled=lambda cfg: cfg.output.save_rollouts)
class SavedRollouts(StepObserver):
    """`output.save_rollouts`: every step's batch, with the run's advantages and Σπ², after the advantages.

    The saved batch carries the trained weights' log-probs (`prox_logp`) for later replays, so
    with saved rollouts on they come from a pass of their own before the update. Σπ² is of the
    distribution sampled from (the `rollout.weights_dtype` copy, when set), as the trainer's own.
    """

    name = "saved rollouts"
    phase = Phase.ADVANTAGES
    reads = frozenset({"prox_logp", "advantages", "sum_pi_squared"})
    timed_as = "diagnostics"

    def __init__(self, cfg: ExperimentConfig, services: StepServices) -> None:
        self.cfg, self.services = cfg, services

    def observe(self, view: StepView) -> Observation:
        services = self.services
        with preserved_random_states(services.device):
            spp = view.batch.get("sum_pi_squared")
            if spp is None:
                fields = ("sum_pi_squared",)
                spp = sampled_token_stats(services.engine, view.batch, self.cfg.sampling_temperature, fields)[fields[0]]
            path = rollout_path(services.run_dir, view.step, services.ctx.rank)
            save_rollout(path, view.batch, view.meta, advantages=view.data["advantages"], sum_pi_squared=spp)
        return Observation()
