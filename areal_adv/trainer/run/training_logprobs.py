"""Where the trained weights' log-probs of the sampled tokens come from: a pass of their own, or the update's forward.

Two things read log π_train(y_t) of the sampled tokens under the weights as
they are before the update: AReaL's decoupled objective
(`actor.use_decoupled_loss`, its proximal log-probs) and, with
`rollout.weights_dtype`, the mismatch between the sampling copy and the
trained weights (`rollout_mismatch/*`). The plain way is a no-grad forward
over the batch before the update. But when the update is one optimiser step
(`actor.ppo_n_minibatches: 1`; micro-batches accumulate into that one step),
its training forward runs on exactly those weights: its log-probs, detached,
are the proximal ones, and the extra forward computes nothing new. verl's
actor makes the same observation for its old log-probs when one minibatch
and one epoch make the update on-policy (`DataParallelPPOActor.update_policy`).

The separate pass stays wherever something reads those log-probs before the
update or outside it:

* `actor.recompute_logprob` without the decoupled loss: they replace the
  behaviour log-probs inside the advantages, which are computed first;
* a step observer that declares it reads them (`prox_logp`) at its phase, or
  that changes what the update trains on (`step_observers`): `diagnostics`
  (shadow estimators' gradients take the ratio against them),
  `output.save_rollouts` (the saved batch carries them for later replays),
  `rollout.filter_zero_advantage` (the update sees only the kept groups, the
  mismatch must describe every sampled token), and any observer added later;
* a model whose training forward is random (dropout): the pass before the
  update runs in eval mode, the update's forward would add dropout's noise.
"""

from __future__ import annotations

import torch
from torch import nn

from areal_adv.api.train_args import ExperimentConfig
from areal_adv.trainer.ppo.training.rollout_mismatch import MismatchSums, mismatch_sums
from areal_adv.trainer.run.step_observers import enabled_observers, logprobs_read_before_update


def needs_training_logprobs(cfg: ExperimentConfig) -> bool:
    """Whether anything reads the trained weights' log-probs of the sampled tokens before the update."""
    actor = cfg.actor
    return actor.use_decoupled_loss or actor.recompute_logprob or cfg.rollout.weights_dtype is not None


def logprobs_in_update(cfg: ExperimentConfig) -> bool:
    """Whether the update's own forward supplies them, instead of a pass before it (see the module docstring)."""
    actor = cfg.actor
    only_loss_or_metrics = actor.use_decoupled_loss or not actor.recompute_logprob
    return (
        needs_training_logprobs(cfg)
        and only_loss_or_metrics
        and actor.ppo_n_minibatches == 1
        and not logprobs_read_before_update(enabled_observers(cfg))
    )


def stochastic_forward(model: nn.Module) -> bool:
    """Whether `model`'s training-mode forward draws dropout: a `Dropout` module or a `*dropout*` config rate above 0."""
    if any(isinstance(m, nn.modules.dropout._DropoutNd) and m.p > 0 for m in model.modules()):
        return True
    config = getattr(model, "config", None)
    rates = vars(config).items() if config is not None and hasattr(config, "__dict__") else ()
    return any("dropout" in name and isinstance(v, (int, float)) and v > 0 for name, v in rates)


class MismatchObserver:
    """Adds up `rollout_mismatch/*` sums over the update's micro-batches (an `ObserveForward` of `ppo_update`)."""

    def __init__(self, cap: float | None) -> None:
        self.cap = cap
        self.sums = MismatchSums(0.0, 0.0, 0.0, 0.0, 0.0)

    def __call__(self, behaviour: torch.Tensor, training: torch.Tensor, mask: torch.Tensor) -> None:
        self.sums = self.sums + mismatch_sums(behaviour, training, mask, self.cap)
