"""PPOCritic: aligned value estimates for GAE, and a clipped value-regression update.

Values are next-token aligned (position t = value of the state before
predicting token t+1), which is what `PPOActor.compute_advantages` expects in
`values`; the update regresses them onto the pipeline's `returns` on the
aligned loss mask.

Under data parallelism the update follows the policy update's rules
(`areal_adv.trainer.ppo.training.update.plan_minibatches`): the same number of minibatches
on every rank, losses scaled by local / global active tokens, gradients
reduced by the engine's DDP / FSDP2 module, statistics global on every rank.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from areal_adv.api.train_args import CriticConfig
from areal_adv.trainer.parallel.engine import ValueEngine
from areal_adv.trainer.parallel.failures import staged
from areal_adv.trainer.ppo.training.loss import clipped_value_loss
from areal_adv.trainer.ppo.training.update import plan_minibatches


class PPOCritic:
    """Owns the value engine; one instance per data-parallel rank."""

    def __init__(self, config: CriticConfig, engine: ValueEngine) -> None:
        self.config = config
        self.engine = engine

    @torch.no_grad()
    def compute_values(self, batch: Mapping[str, Any]) -> torch.Tensor:
        """Aligned values [B, T], zero past each row's sequence."""
        values = self.engine.compute_values(batch["input_ids"], batch["attention_mask"])
        return values * batch["attention_mask"].to(values.dtype)

    @staged("critic update")
    def ppo_update(self, data: Mapping[str, Any]) -> dict[str, float]:
        """One pass of clipped value regression onto `returns`; minibatch-averaged stats."""
        for key in ("values", "returns", "loss_mask"):
            if not isinstance(data.get(key), torch.Tensor):
                raise KeyError(f"PPOCritic.ppo_update: batch lacks tensor '{key}'")
        n_mb = self.config.ppo_n_minibatches or 1
        plan = plan_minibatches(data, n_mb, self.engine)
        slices = plan.slices
        totals = {"value_loss": 0.0, "value_clip_frac": 0.0, "critic_grad_norm": 0.0}
        for i, sl in enumerate(slices):
            width = int(data["attention_mask"][sl].sum(-1).max().item())
            cut = (sl, slice(0, max(width, 1)))
            values = self.engine.forward_values(data["input_ids"][cut], data["attention_mask"][cut])
            loss, clip_frac = clipped_value_loss(
                values,
                data["values"][cut].float(),
                data["returns"][cut].float().detach(),
                data["loss_mask"][cut],
                value_eps_clip=self.config.value_eps_clip,
            )
            share = 1.0 if plan.shares is None else plan.shares[i]
            norm = self.engine.optimizer_step(loss if plan.shares is None else loss * share)
            for key, value in (
                ("value_loss", float(loss.detach()) * share),
                ("value_clip_frac", clip_frac * share),
                ("critic_grad_norm", norm),
            ):
                totals[key] += value / len(slices)
        return plan.reduce_stats(totals, global_keys=("critic_grad_norm",))
