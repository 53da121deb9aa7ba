"""Per-fold gradients of the PPO surrogate, for several estimators' advantages at once, without touching `.grad`.

`grad_snr` and `cos_to_active` (`areal_adv.trainer.diagnostics.diagnostic_metrics`) need
K gradient samples of the policy loss per estimator at the current weights. The
step's prompt groups are dealt round-robin into K folds (group j into fold
j mod K: no random draw); each fold gets one forward pass, and each estimator one
`torch.autograd.grad` of the token-mean clipped surrogate over that fold with
its own advantages and loss mask. `autograd.grad` returns the gradients instead
of accumulating them into `.grad`, so the run's update sees exactly the
gradients it would have seen; the forward runs in eval mode (no dropout draws)
and under the engine's autocast. Each gradient goes into its estimator's
running `FoldMoments` and is dropped: memory is one parameter-sized sum per
estimator, not one gradient per fold and estimator.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from areal_adv.api.cli_args import PPOActorConfig
from areal_adv.trainer.lm.logprobs import token_logprobs
from areal_adv.trainer.ppo.training.loss import policy_loss_settings, ppo_policy_loss
from areal_adv.trainer.ppo.training.update import proximal_logprobs

__all__ = ["FoldMoments", "GradientProbe", "fold_gradients", "fold_rows", "probe_parameters"]


@dataclass
class FoldMoments:
    """The running moments of K fold gradients that `grad_snr` and `cos_to_active` need, not the K gradients.

    Keeping K gradients of every estimator costs K x E x P floats (8.6 GB for
    four estimators' four folds of a 135 M-parameter model); the SNR needs
    only their sum Σ_k g_k and Σ_k ‖g_k‖², and the cosine the sum: E x P floats.
    With ḡ = Σ_k g_k / K, S² = (Σ_k ‖g_k‖² − K ‖ḡ‖²) / (K − 1), the same
    unbiased estimate `diagnostic_metrics.gradient_snr` takes from the stacked gradients. The sum
    is kept in float32 per parameter tensor; the squared norms and every
    reduction are float64, so the result differs from `gradient_snr` of the
    stack by float32 rounding of a K-term sum only. A spread Σ_k ‖g_k − ḡ‖²
    below that rounding (4 K ε₃₂ Σ_k ‖g_k‖²: folds equal to float32 precision)
    is no noise measured, and the SNR 0, as for equal stacked gradients.
    """

    total: list[torch.Tensor] = field(default_factory=list)
    sq_norms: float = 0.0
    count: int = 0

    def add(self, grads: Sequence[torch.Tensor]) -> None:
        """Adds one fold's gradient, given per parameter tensor (dense, any float dtype)."""
        if not self.total:
            self.total = [g.detach().float().clone() for g in grads]
        else:
            for t, g in zip(self.total, grads):
                t.add_(g.detach().float())
        self.sq_norms += sum(float(g.detach().double().square().sum()) for g in grads)
        self.count += 1

    def mean(self) -> torch.Tensor:
        """ḡ as one flat float64 vector."""
        flat = torch.cat([t.reshape(-1).double() for t in self.total]) if self.total else torch.zeros(0)
        return flat / max(self.count, 1)

    def snr(self) -> float:
        """`gradient_snr` of the added folds: (‖ḡ‖² − S²/K) / (S²/K), 0 without noise or with K < 2."""
        k = self.count
        if k < 2:
            return 0.0
        mean_sq = sum(float(t.double().square().sum()) for t in self.total) / (k * k)
        spread = self.sq_norms - k * mean_sq  # Σ_k ‖g_k − ḡ‖²
        if spread <= 4 * k * torch.finfo(torch.float32).eps * self.sq_norms:
            return 0.0
        noise = spread / (k - 1) / k
        return (mean_sq - noise) / noise


def fold_rows(group_sizes: Sequence[int], folds: int) -> list[torch.Tensor]:
    """Row indices of each fold: prompt group j goes to fold j mod K, K = min(folds, groups); no empty fold."""
    k = max(1, min(folds, len(group_sizes)))
    starts = [0]
    for size in group_sizes:
        starts.append(starts[-1] + size)
    parts: list[list[int]] = [[] for _ in range(k)]
    for j, size in enumerate(group_sizes):
        parts[j % k].extend(range(starts[j], starts[j] + size))
    return [torch.tensor(rows, dtype=torch.long) for rows in parts]


def _last_block(model: nn.Module) -> nn.Module | None:
    """The last transformer block: the last module whose class `transformers` lists in `_no_split_modules`."""
    names: set[str] = set()
    for module in model.modules():
        names.update(getattr(module, "_no_split_modules", None) or ())
    blocks = [m for m in model.modules() if type(m).__name__ in names]
    return blocks[-1] if blocks else None


def probe_parameters(model: nn.Module, which: str) -> list[tuple[str, nn.Parameter]]:
    """The trainable parameters `diagnostics.params` names: `all`, `lm_head` or `last_layer` (adapters under LoRA)."""
    if which == "all":
        chosen: Any = model
    elif which == "lm_head":
        get_output = getattr(model, "get_output_embeddings", None)
        chosen = get_output() if callable(get_output) else None
    elif which == "last_layer":
        chosen = _last_block(model)
    else:
        raise ValueError(f"diagnostics.params: got {which!r}, expected all, lm_head or last_layer")
    found = [] if chosen is None else [(n, p) for n, p in chosen.named_parameters() if p.requires_grad]
    if not found:
        raise ValueError(f"diagnostics.params: {which!r} names no trainable parameter of this model")
    return found


@contextlib.contextmanager
def _eval_mode(model: nn.Module) -> Iterator[None]:
    """The model in eval mode (no dropout draws), then back in the mode it was in."""
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)


def _proximal_of(config: PPOActorConfig, data: Mapping[str, Any]) -> torch.Tensor:
    """The log-probs the ratio is taken against, as in the update (a tensor: the probe has no forward of its own)."""
    proximal = proximal_logprobs(config, data)
    if proximal is None:  # only `from_forward=True` gives None
        raise RuntimeError("gradient probe: the update named no proximal log-probs")
    return proximal


def _dense(grads: Sequence[torch.Tensor | None], params: Sequence[nn.Parameter]) -> list[torch.Tensor]:
    """Dense gradients per parameter, zeros where a parameter got none."""
    return [
        torch.zeros_like(p, dtype=torch.float32) if g is None else (g.to_dense() if g.is_sparse else g)
        for g, p in zip(grads, params)
    ]


def fold_gradients(
    model: nn.Module,
    config: PPOActorConfig,
    outputs: Mapping[str, Mapping[str, Any]],
    rows: Sequence[torch.Tensor],
    params: Sequence[nn.Parameter],
    *,
    autocast: Any = contextlib.nullcontext,
) -> dict[str, FoldMoments]:
    """{estimator: the moments of its K fold gradients}: fold k's gradient of the surrogate with its advantages.

    `outputs` are the pipeline outputs of the estimators (one batch: the same
    tokens); the loss is the update's (`ppo_policy_loss` with the run's clip
    settings), a token mean over the fold's active tokens under each
    estimator's own loss mask. A fold without active tokens has gradient 0.
    """
    first = next(iter(outputs.values()))
    ids, attn = first["input_ids"], first["attention_mask"]
    union = torch.stack([o["loss_mask"].bool() for o in outputs.values()]).any(0)
    out = {name: FoldMoments() for name in outputs}
    with _eval_mode(model), torch.enable_grad():
        for fold in rows:
            fold = fold.to(ids.device)
            width = max(int(attn[fold].sum(-1).max()), 1)
            wanted = union[fold, :width]
            with autocast():
                logp, _ = token_logprobs(
                    model, ids[fold, :width], attn[fold, :width], config.temperature, wanted=wanted
                )
            for name, data in outputs.items():
                mask = data["loss_mask"][fold, :width]
                loss, _ = ppo_policy_loss(
                    logp,
                    _proximal_of(config, data)[fold, :width].detach(),
                    data["logprobs"][fold, :width].detach(),
                    data["advantages"][fold, :width].detach().to(logp.dtype),
                    mask,
                    **policy_loss_settings(config),
                )
                grads = torch.autograd.grad(loss, list(params), retain_graph=True, allow_unused=True)
                out[name].add(_dense(grads, params))
                del grads
            del logp
    return out


@dataclass(frozen=True)
class GradientProbe:
    """What `grad_snr` and `cos_to_active` are measured with: a policy, its PPO loss settings, K and the parameters.

    The trainer probes its trained module at the weights that sampled the step (under the
    engine's autocast); `areal-adv diagnose` the checkpoint that holds those weights. Both
    deal the batch's prompt groups into folds the same way (`fold_rows`).
    """

    model: nn.Module
    config: PPOActorConfig
    folds: int
    params: Sequence[nn.Parameter]
    autocast: Callable[[], contextlib.AbstractContextManager[Any]] = contextlib.nullcontext

    def __call__(self, outputs: Mapping[str, Mapping[str, Any]], group_sizes: Sequence[int]) -> dict[str, FoldMoments]:
        """{estimator: the moments of its fold gradients} for the estimators' pipeline outputs on one batch."""
        rows = fold_rows(group_sizes, self.folds)
        return fold_gradients(self.model, self.config, outputs, rows, self.params, autocast=self.autocast)
