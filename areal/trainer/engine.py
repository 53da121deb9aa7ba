"""Model + optimiser wrappers: aligned forward passes and one clipped AdamW step.

`PolicyEngine` is what `areal.trainer.ppo.update.ppo_update` drives and what
`PPOActor(config, engine)` holds; `ValueEngine` does the same for the critic.
All per-position outputs are next-token aligned: position t refers to the
prediction of token t+1 (the last column is 0).

Data parallelism: an engine built with a live `DistContext` sums gradients over
ranks after `backward()` (then clips and steps), so every replica takes the same
step. The losses passed in are therefore each rank's *share* of the global loss
(`areal.trainer.ppo.update` scales them by local / global active tokens), which
makes the summed gradient the gradient of the token mean over the whole global
minibatch, as in one process.
"""

from __future__ import annotations

import torch
from torch import nn

from areal.trainer.distributed import DistContext, all_reduce_gradients


def aligned_token_logprobs(logits: torch.Tensor, input_ids: torch.Tensor, temperature: float) -> torch.Tensor:
    """log p(token t+1 | ≤ t) at `temperature`, stored at t; last column 0."""
    logp = torch.log_softmax(logits[:, :-1].float() / temperature, dim=-1)
    picked = logp.gather(-1, input_ids[:, 1:, None]).squeeze(-1)
    return torch.nn.functional.pad(picked, (0, 1))


def aligned_entropy(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """Entropy of the next-token distribution at each position (last column 0)."""
    logp = torch.log_softmax(logits[:, :-1].float() / temperature, dim=-1)
    return torch.nn.functional.pad(-(logp.exp() * logp).sum(-1), (0, 1))


class _OptimEngine:
    """Shared AdamW + gradient clipping for a trainable module (one replica per rank)."""

    def __init__(self, model: nn.Module, *, lr: float, weight_decay: float = 0.0, grad_clip: float = 1.0,
                 ctx: DistContext | None = None) -> None:
        self.model = model
        self.grad_clip = grad_clip
        self.ctx = ctx if ctx is not None else DistContext()
        self.optimizer = torch.optim.AdamW(
            [p for p in model.parameters() if p.requires_grad], lr=lr, weight_decay=weight_decay
        )

    def optimizer_step(self, loss: torch.Tensor) -> float:
        """Backward, sum gradients over ranks, clip the global grad norm, step; returns the pre-clip norm.

        A non-finite loss on any rank makes every rank raise (agreed in the
        gradient all-reduce), so no rank is left waiting in a collective.
        """
        self.optimizer.zero_grad(set_to_none=True)
        if not self.ctx.is_distributed:
            if not torch.isfinite(loss):
                raise FloatingPointError(f"non-finite loss {loss.item()!r}; refusing to step the optimiser")
            loss.backward()
        else:
            finite = bool(torch.isfinite(loss))
            if finite:
                loss.backward()
            bad = all_reduce_gradients(list(self.model.parameters()), self.ctx, local_ok=finite)
            if bad:
                self.optimizer.zero_grad(set_to_none=True)
                raise FloatingPointError(f"non-finite loss on rank(s) {bad} (this is rank {self.ctx.rank}, loss "
                                         f"{loss.item()!r}); refusing to step the optimiser on every rank")
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.grad_clip)
        self.optimizer.step()
        return float(norm)


class PolicyEngine(_OptimEngine):
    """The causal LM policy with its optimiser."""

    def forward_logprobs(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, temperature: float, *, with_entropy: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Aligned log-probs of the given tokens (and entropies), with gradients."""
        logits = self.model(input_ids=input_ids, attention_mask=attention_mask).logits
        logp = aligned_token_logprobs(logits, input_ids, temperature)
        return logp, (aligned_entropy(logits, temperature) if with_entropy else None)

    @torch.no_grad()
    def compute_logprobs(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, temperature: float) -> torch.Tensor:
        """Aligned log-probs without gradients (proximal / reference log-probs)."""
        was_training = self.model.training
        self.model.eval()
        logp, _ = self.forward_logprobs(input_ids, attention_mask, temperature)
        self.model.train(was_training)
        return logp


@torch.no_grad()
def reference_logprobs(model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                       temperature: float) -> torch.Tensor:
    """Aligned log-probs under the frozen reference policy."""
    logits = model(input_ids=input_ids, attention_mask=attention_mask).logits
    return aligned_token_logprobs(logits, input_ids, temperature)


class ValueEngine(_OptimEngine):
    """The critic (`ValueModel`) with its optimiser."""

    def forward_values(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Aligned values [B, T]: position t = value of the state before predicting token t+1."""
        return self.model(input_ids, attention_mask).float()
