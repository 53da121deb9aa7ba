"""The PPO policy update: minibatches over the advantage-computed batch.

`PPOActor.ppo_update(data)` delegates here. `data` is the output of
`PPOActor.compute_advantages`: every per-position tensor the loss needs
(`advantages`, `logprobs`, `loss_mask`, `prox_logp`) is next-token aligned.
Minibatch scheduling is AReaL's: `ppo_n_minibatches` contiguous row slices,
one optimiser step each, one pass per batch.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import torch

from areal.api.cli_args import PPOActorConfig
from areal.trainer.ppo.loss import masked_mean, ppo_policy_loss

_REQUIRED = ("input_ids", "attention_mask", "loss_mask", "logprobs", "advantages")


class PolicyEngineLike(Protocol):
    """What the update needs from an engine (see `areal.trainer.engine.PolicyEngine`)."""

    def forward_logprobs(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, temperature: float, *,
                         with_entropy: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]: ...

    def optimizer_step(self, loss: torch.Tensor) -> float: ...


def minibatch_slices(n_rows: int, n_minibatches: int) -> list[slice]:
    """Contiguous, near-equal row slices; never more slices than rows, none empty."""
    n = max(1, min(n_minibatches, n_rows))
    bounds = [round(i * n_rows / n) for i in range(n + 1)]
    return [slice(bounds[i], bounds[i + 1]) for i in range(n)]


def _proximal(config: PPOActorConfig, data: Mapping[str, Any]) -> torch.Tensor:
    prox = data.get("prox_logp")
    if config.use_decoupled_loss:
        if not isinstance(prox, torch.Tensor):
            raise ValueError("ppo_update: actor.use_decoupled_loss=true needs 'prox_logp' in the batch "
                             "(recompute the proximal log-probs before computing advantages)")
        return prox
    if config.recompute_logprob and isinstance(prox, torch.Tensor):
        return prox
    return data["logprobs"]


def _check_batch(data: Mapping[str, Any]) -> None:
    missing = [k for k in _REQUIRED if k not in data]
    if missing:
        raise KeyError(f"ppo_update: batch lacks {missing}; pass the output of PPOActor.compute_advantages")
    shape = data["input_ids"].shape
    for key in ("attention_mask", "loss_mask", "logprobs", "advantages"):
        if data[key].shape != shape:
            raise ValueError(f"ppo_update: '{key}' has shape {tuple(data[key].shape)}, expected {tuple(shape)}")


def ppo_update(config: PPOActorConfig, engine: PolicyEngineLike, data: Mapping[str, Any]) -> dict[str, float]:
    """One PPO pass over `data`; returns minibatch-averaged statistics."""
    _check_batch(data)
    proximal = _proximal(config, data)
    totals: dict[str, float] = {}
    slices = minibatch_slices(data["input_ids"].shape[0], config.ppo_n_minibatches)
    for sl in slices:
        width = int(data["attention_mask"][sl].sum(-1).max().item())
        cut = (sl, slice(0, max(width, 1)))
        mask = data["loss_mask"][cut]
        logp, entropy = engine.forward_logprobs(
            data["input_ids"][cut], data["attention_mask"][cut], config.temperature, with_entropy=True
        )
        loss, stats = ppo_policy_loss(
            logp, proximal[cut].detach(), data["logprobs"][cut].detach(), data["advantages"][cut].detach(), mask,
            eps_clip=config.eps_clip, eps_clip_higher=config.eps_clip_higher, c_clip=config.c_clip,
            behav_imp_weight_cap=config.behav_imp_weight_cap, decoupled=config.use_decoupled_loss,
        )
        grad_norm = engine.optimizer_step(loss)
        step = {
            "policy_loss": float(loss.detach()),
            "entropy": float(masked_mean(entropy.detach(), mask)),
            "grad_norm": grad_norm,
            **vars(stats),
        }
        for key, value in step.items():
            totals[key] = totals.get(key, 0.0) + value / len(slices)
    return totals
