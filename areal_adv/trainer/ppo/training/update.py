"""The PPO policy update: minibatches over the advantage-computed batch.

`PPOActor.ppo_update(data)` delegates here. `data` is the output of
`PPOActor.compute_advantages`: every per-position tensor the loss needs
(`advantages`, `logprobs`, `loss_mask`, `prox_logp`) is next-token aligned.
Minibatch scheduling is AReaL's: `ppo_n_minibatches` contiguous row slices,
one optimiser step each, one pass per batch. `ppo_micro_batch_size` splits each
minibatch's forward and backward into chunks of that many rows whose gradients
accumulate before the one step (`areal_adv.trainer.parallel.micro_batches`).

Data parallelism (the engine has a live `DistContext`): every rank runs the same
number of minibatches (`ppo_n_minibatches` capped by the smallest rank's row
count; DDP and FSDP2 reduce gradients inside backward, so a rank with one step
fewer would leave the others waiting), and each minibatch loss is scaled by
local / global active tokens: the rank's share of the global token mean, the
shares summing to it. The engine turns shares into what DDP's / FSDP2's
gradient *average* needs (x world size, `engine.backward_scale`), so the
reduced gradient is that of the token mean over the union of the ranks' k-th
minibatches, exactly what one process computes when that union is its k-th
minibatch (see `areal_adv.trainer.parallel.distributed.assign_prompts_to_ranks` for when it
is). Returned statistics are global on every rank.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import torch
import torch.distributed as dist

from areal_adv.api.cli_args import PPOActorConfig
from areal_adv.trainer.parallel.distributed import DistContext, all_reduce_tensor
from areal_adv.trainer.parallel.micro_batches import micro_slices, near_equal_slices
from areal_adv.trainer.ppo.training.loss import masked_mean, policy_loss_settings, ppo_policy_loss

_REQUIRED = ("input_ids", "attention_mask", "loss_mask", "logprobs", "advantages")

#: Called once per micro-batch with its behaviour log-probs, the training forward's log-probs (detached) and its
#: loss mask, all [rows, positions] and next-token aligned; positions outside the mask may hold anything.
ObserveForward = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], None]


class PolicyEngineLike(Protocol):
    """What the update needs from an engine (see `areal_adv.trainer.parallel.engine.PolicyEngine`).

    An engine whose `forward_logprobs` takes `wanted` gets the aligned loss
    mask there and may compute only those positions (the loss reads no other);
    one without it is called as before.
    """

    def forward_logprobs(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        temperature: float,
        *,
        with_entropy: bool = False,
        wanted: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]: ...

    def optimizer_step(self, loss: torch.Tensor) -> float: ...


def minibatch_slices(n_rows: int, n_minibatches: int) -> list[slice]:
    """Contiguous, near-equal row slices; never more slices than rows, none empty."""
    return near_equal_slices(n_rows, n_minibatches)


@dataclass
class MinibatchPlan:
    """Row slices of this rank's batch, and per slice its share of the global active tokens."""

    slices: list[slice]
    shares: list[float] | None  # None: single process (no scaling at all)
    ctx: DistContext | None

    def reduce_stats(self, totals: dict[str, float], global_keys: tuple[str, ...] = ()) -> dict[str, float]:
        """Sum the token-weighted contributions over ranks; `global_keys` are identical everywhere already."""
        if self.shares is None:
            return totals
        keys = [k for k in totals if k not in global_keys]
        summed = all_reduce_tensor(torch.tensor([totals[k] for k in keys], dtype=torch.float64), self.ctx)
        return {k: (float(summed[keys.index(k)]) if k in keys else v) for k, v in totals.items()}


def _live_ctx(engine: Any) -> DistContext | None:
    ctx = getattr(engine, "ctx", None)
    return ctx if isinstance(ctx, DistContext) and ctx.is_distributed else None


def plan_minibatches(data: Mapping[str, Any], n_minibatches: int, engine: Any) -> MinibatchPlan:
    """The minibatch slices every rank agrees on, with each slice's token share.

    Single process: `minibatch_slices` as always. Data parallel: the count is
    capped by the smallest rank's row count (every rank must take the same
    number of optimiser steps or the gradient reduction inside backward would
    hang), and the active tokens (`loss_mask`) of each slice are summed over ranks.
    """
    rows = data["input_ids"].shape[0]
    ctx = _live_ctx(engine)
    if ctx is None:
        return MinibatchPlan(minibatch_slices(rows, n_minibatches), None, None)
    fewest = int(all_reduce_tensor(torch.tensor([rows], dtype=torch.float64), ctx, dist.ReduceOp.MIN))
    slices = minibatch_slices(rows, max(1, min(n_minibatches, fewest)))
    mask = data["loss_mask"]
    local = torch.tensor([float(mask[sl].sum()) for sl in slices], dtype=torch.float64)
    total = all_reduce_tensor(local, ctx)
    shares = [float(n / t) if t > 0 else 0.0 for n, t in zip(local.tolist(), total.tolist())]
    return MinibatchPlan(slices, shares, ctx)


def proximal_logprobs(
    config: PPOActorConfig, data: Mapping[str, Any], from_forward: bool = False
) -> torch.Tensor | None:
    """The log-probs the ratio is taken against; None: the training forward's own, detached.

    The update and the diagnostics' gradient probe take the same (the probe never passes `from_forward`).
    """
    if from_forward:
        if not config.use_decoupled_loss:
            raise ValueError(
                "ppo_update: proximal_from_forward=True needs actor.use_decoupled_loss=true (without it the ratio "
                "is taken against the behaviour log-probs, not the proximal policy's)"
            )
        return None
    prox = data.get("prox_logp")
    if config.use_decoupled_loss:
        if not isinstance(prox, torch.Tensor):
            raise ValueError(
                "ppo_update: actor.use_decoupled_loss=true needs 'prox_logp' in the batch "
                "(recompute the proximal log-probs before computing advantages)"
            )
        return prox
    if config.recompute_logprob and isinstance(prox, torch.Tensor):
        return prox
    return data["logprobs"]


def _takes_wanted(engine: Any) -> bool:
    """Whether the engine can compute only the loss-mask positions (`PolicyEngine` can; older engines may not)."""
    try:
        return "wanted" in inspect.signature(engine.forward_logprobs).parameters
    except (TypeError, ValueError):
        return False


def _check_batch(data: Mapping[str, Any]) -> None:
    missing = [k for k in _REQUIRED if k not in data]
    if missing:
        raise KeyError(f"ppo_update: batch lacks {missing}; pass the output of PPOActor.compute_advantages")
    shape = data["input_ids"].shape
    for key in ("attention_mask", "loss_mask", "logprobs", "advantages"):
        if data[key].shape != shape:
            raise ValueError(f"ppo_update: '{key}' has shape {tuple(data[key].shape)}, expected {tuple(shape)}")


@dataclass(frozen=True)
class _Pass:
    """What every micro-batch of one update reads besides its rows."""

    config: PPOActorConfig
    engine: Any
    data: Mapping[str, Any]
    proximal: torch.Tensor | None  # None: each forward's own log-probs, detached
    sparse: bool  # the engine computes only the loss-mask positions
    observe: ObserveForward | None


def _micro_loss(run: _Pass, rows: slice) -> tuple[torch.Tensor, dict[str, float]]:
    """The token-mean policy loss of `rows` (training forward) and its detached statistics."""
    config, data = run.config, run.data
    width = int(data["attention_mask"][rows].sum(-1).max().item())
    cut = (rows, slice(0, max(width, 1)))
    mask = data["loss_mask"][cut]
    logp, entropy = run.engine.forward_logprobs(
        data["input_ids"][cut],
        data["attention_mask"][cut],
        config.temperature,
        with_entropy=True,
        **({"wanted": mask} if run.sparse else {}),
    )
    if run.observe is not None:
        run.observe(data["logprobs"][cut].detach(), logp.detach(), mask)
    loss, stats = ppo_policy_loss(
        logp,
        logp.detach() if run.proximal is None else run.proximal[cut].detach(),
        data["logprobs"][cut].detach(),
        data["advantages"][cut].detach(),
        mask,
        **policy_loss_settings(config),
    )
    return loss, {
        "policy_loss": float(loss.detach()),
        "entropy": float(masked_mean(entropy.detach(), mask)),
        **vars(stats),
    }


def _minibatch_update(run: _Pass, rows: slice, share: float, ctx: DistContext | None) -> dict[str, float]:
    """One optimiser step on `rows`, accumulated over micro-batches of `actor.ppo_micro_batch_size` rows.

    Micro-batch j's token-mean loss is weighted by its share of the minibatch's
    active tokens (n_j / n), so the weighted losses sum to the minibatch's
    token mean and the accumulated gradient is the one-pass gradient; the
    token-mean statistics combine with the same weights.
    """
    config, engine, data = run.config, run.engine, run.data
    micro = [
        slice(rows.start + m.start, rows.start + m.stop)
        for m in micro_slices(rows.stop - rows.start, config.ppo_micro_batch_size, ctx)
    ]
    if len(micro) == 1:  # one pass: any engine with `optimizer_step`
        loss, stats = _micro_loss(run, rows)
        grad_norm = engine.optimizer_step(loss * share if ctx is not None else loss)
        return {**{k: v * share for k, v in stats.items()}, "grad_norm": grad_norm}
    if not callable(getattr(engine, "micro_batch", None)):
        raise TypeError(
            f"ppo_update: actor.ppo_micro_batch_size={config.ppo_micro_batch_size} needs an engine "
            f"with micro_batch/backward/apply_gradients (PolicyEngine); got {type(engine).__name__}"
        )
    tokens = [float(data["loss_mask"][sl].sum()) for sl in micro]
    total = sum(tokens)
    totals: dict[str, float] = {}
    for j, sl in enumerate(micro):
        weight = share * (tokens[j] / total if total > 0 else 1.0 / len(micro))
        with engine.micro_batch(j, len(micro)):
            loss, stats = _micro_loss(run, sl)
            engine.backward(loss * weight)
        for key, value in stats.items():
            totals[key] = totals.get(key, 0.0) + value * weight
    return {**totals, "grad_norm": engine.apply_gradients()}


def ppo_update(
    config: PPOActorConfig,
    engine: PolicyEngineLike,
    data: Mapping[str, Any],
    *,
    proximal_from_forward: bool = False,
    observe: ObserveForward | None = None,
) -> dict[str, float]:
    """One PPO pass over `data`; returns minibatch-averaged statistics (global under data parallelism).

    `proximal_from_forward` (with `actor.use_decoupled_loss`): the proximal
    log-probs are each training forward's own, detached, instead of the
    batch's `prox_logp`. That is exact only while the weights are the ones
    the proximal policy means, the weights before any optimiser step of this
    pass, so it needs a pass of one minibatch (micro-batches accumulate into
    one step and are fine); verl's actor does the same for its old
    log-probs when one minibatch and one epoch make the update on-policy
    (`DataParallelPPOActor.update_policy`). `observe` sees every
    micro-batch's training log-probs as they are computed.
    """
    _check_batch(data)
    proximal = proximal_logprobs(config, data, proximal_from_forward)
    totals: dict[str, float] = {}
    plan = plan_minibatches(data, config.ppo_n_minibatches, engine)
    if proximal is None and len(plan.slices) != 1:
        raise ValueError(
            f"ppo_update: proximal_from_forward=True needs one minibatch (actor.ppo_n_minibatches=1), got "
            f"{len(plan.slices)}: after the first optimiser step the weights are no longer the proximal policy"
        )
    run = _Pass(config, engine, data, proximal, _takes_wanted(engine), observe)
    for i, sl in enumerate(plan.slices):
        share = 1.0 if plan.shares is None else plan.shares[i]
        # grad_norm: of the synchronised gradient, the same on every rank
        step = _minibatch_update(run, sl, share, plan.ctx)
        for key, value in step.items():
            totals[key] = totals.get(key, 0.0) + value / len(plan.slices)
    return plan.reduce_stats(totals, global_keys=("grad_norm",))
