"""The trainer's former private sampling loop: one model call per token with a KV cache.

`areal_adv.trainer.lm.sampling` now samples through `transformers` `generate`; this
loop is kept here only as the reference that bench/peers/bench_sampling.py times it
against (docs/performance.md). Same contract as `sample_continuations`.

Contexts of different lengths are left-padded with explicit position ids so that
every row sees exactly the positions it would see unpadded; the recorded
log-prob of each sampled token is `log_softmax(logits / temperature)` at that
token, i.e. what a training forward pass at the same temperature recomputes.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence

import torch
from transformers import DynamicCache, PreTrainedModel

from areal_adv.trainer.lm.sampling import Continuation, check_request, left_pad


def _cache_keyword(model: PreTrainedModel) -> str:
    """transformers 5 renamed `past_key_values` to `cache`; support both."""
    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


@torch.no_grad()
def loop_sample_continuations(
    model: PreTrainedModel,
    contexts: Sequence[Sequence[int]],
    max_new_tokens: Sequence[int],
    stop_ids: frozenset[int],
    *,
    temperature: float,
    pad_id: int,
    generator: torch.Generator | None = None,
    greedy: bool = False,
) -> list[Continuation]:
    """Sample up to `max_new_tokens[i]` tokens after each context, stopping at `stop_ids`.

    `greedy` takes the arg-max token instead (e.g. ReMax's greedy baseline); the
    recorded log-probs are still those at `temperature`.
    """
    check_request(contexts, max_new_tokens, temperature)
    if not contexts:
        return []
    was_training = model.training
    model.eval()
    ids, mask, positions = left_pad(contexts, pad_id)
    device = next(model.parameters()).device
    ids, mask, positions = ids.to(device), mask.to(device), positions.to(device)
    cache_kw = _cache_keyword(model)
    cache = DynamicCache(config=model.config)
    logits = model(
        input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, **{cache_kw: cache}
    ).logits[:, -1]
    limits = torch.tensor(list(max_new_tokens), device=device)
    counts = torch.zeros_like(limits)
    alive = limits > 0
    stop = torch.tensor(sorted(stop_ids), dtype=torch.long, device=device)
    next_pos = positions[:, -1] + 1
    tokens: list[torch.Tensor] = []
    logps: list[torch.Tensor] = []
    alive_hist: list[torch.Tensor] = []
    for _ in range(int(limits.max().item())):
        logp_all = torch.log_softmax(logits.float() / temperature, dim=-1)
        if greedy:
            tok = logp_all.argmax(dim=-1)
        else:
            tok = torch.multinomial(logp_all.exp(), 1, generator=generator).squeeze(-1)
        tokens.append(tok)
        logps.append(logp_all.gather(-1, tok[:, None]).squeeze(-1))
        alive_hist.append(alive.clone())
        counts = counts + alive.long()
        alive = alive & ~torch.isin(tok, stop) & (counts < limits)
        if not bool(alive.any()):
            break
        feed = torch.where(alive, tok, torch.full_like(tok, pad_id))
        mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
        logits = model(
            input_ids=feed[:, None],
            attention_mask=mask,
            position_ids=next_pos[:, None],
            use_cache=True,
            **{cache_kw: cache},
        ).logits[:, -1]
        next_pos = next_pos + 1
    model.train(was_training)
    return _collect(tokens, logps, alive_hist, stop_ids)


def _collect(
    tokens: list[torch.Tensor], logps: list[torch.Tensor], alive: list[torch.Tensor], stop_ids: frozenset[int]
) -> list[Continuation]:
    """Per-row lists from the per-step tensors, keeping only steps where the row was alive."""
    tok = torch.stack(tokens, dim=1).cpu()
    lp = torch.stack(logps, dim=1).cpu()
    live = torch.stack(alive, dim=1).cpu()
    out = []
    for row in range(tok.shape[0]):
        keep = live[row]
        ids = tok[row][keep].tolist()
        out.append(Continuation(ids, lp[row][keep].tolist(), bool(ids) and ids[-1] in stop_ids))
    return out
