"""Per-token log-probs and Σπ² of TRL's completions under the policy that sampled them.

The optimal token baseline (`optimal_token_baseline`, `tir_optimal_token_baseline`)
weights each token by 1 - 2π_t + Σπ², which needs the sampled token's probability
π_t and the sum of squared probabilities of its next-token distribution.
GRPOTrainer computes neither for the current policy in general (its
`old_per_token_logps` exist only for several iterations per batch), so
`AReaLGRPOTrainer` runs one extra forward pass when, and only when, a configured
stage reads `sum_pi_squared`: logits of the completion positions only
(`logits_to_keep`, as TRL's own log-prob pass), divided by TRL's sampling
temperature, one log_softmax for both values.
"""

from __future__ import annotations

import torch

from areal_adv.trainer.lm.logprobs import sum_pi_squared_from_logp

__all__ = ["completion_token_stats"]


@torch.no_grad()
def completion_token_stats(
    model: torch.nn.Module,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor,
    temperature: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """([N, C] log-probs of the completion tokens, [N, C] Σπ² of the distributions that sampled them), 0 on padding."""
    ids = torch.cat([prompt_ids, completion_ids], dim=1)
    mask = torch.cat([prompt_mask, completion_mask], dim=1)
    width = completion_ids.shape[1]
    logits = model(input_ids=ids, attention_mask=mask, logits_to_keep=width + 1).logits[:, :-1]
    logp = torch.log_softmax(logits.float() / temperature, dim=-1)
    picked = logp.gather(-1, completion_ids[..., None]).squeeze(-1)
    keep = completion_mask.to(picked.dtype)
    return picked * keep, sum_pi_squared_from_logp(logp) * keep
