"""Reference implementations the benchmarks compare against.

These are the classic loops, kept deliberately plain: they are what AReaL
1.0.4 / verl do for token GAE (a Python loop over every position, vectorised
over rows) and the obvious per-row, per-turn loop for turn GAE and per-group
normalisation. They define the speed-ups reported in docs/performance.md.
"""

from __future__ import annotations

import torch


def reference_token_gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    loss_mask: torch.Tensor,
    discount: float,
    lam: torch.Tensor,
    bootstrap: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-position loop over T, vectorised over B (the AReaL 1.0.4 recurrence)."""
    n_rows, n_pos = rewards.shape
    rewards, values, mask = rewards.float(), values.float(), loss_mask.float()
    adv = torch.zeros((n_rows, n_pos), dtype=torch.float32, device=rewards.device)
    nextv = bootstrap.float().clone()
    last = torch.zeros(n_rows, dtype=torch.float32, device=rewards.device)
    for t in range(n_pos - 2, -1, -1):
        delta = rewards[:, t] + discount * nextv - values[:, t]
        new = delta + discount * lam * last
        m = mask[:, t]
        nextv = nextv * (1 - m) + values[:, t] * m
        last = last * (1 - m) + new * m
        adv[:, t] = last
    return adv, adv + values


def reference_turn_gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    loss_mask: torch.Tensor,
    turn_ids: torch.Tensor,
    discount: float,
    lam: torch.Tensor,
    bootstrap: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row, per-turn loop: find the turns, sum their rewards, GAE over turns, broadcast."""
    del loss_mask  # the turn layout is carried by turn_ids
    rewards, values = rewards.float(), values.float()
    n_rows, n_pos = rewards.shape
    adv = torch.zeros_like(rewards)
    ret = values.clone()
    for b in range(n_rows):
        ids = turn_ids[b]
        gen_pos = torch.nonzero(ids >= 0).squeeze(1)
        if gen_pos.numel() == 0:
            continue
        turn_vals, counts = torch.unique_consecutive(ids[gen_pos], return_counts=True)
        first_idx = torch.cumsum(counts, 0) - counts
        starts = gen_pos[first_idx].tolist()
        n_turns = len(starts)
        # Turn k owns [start_k, start_{k+1}); positions before the first turn go to turn 0.
        bounds = [0] + starts[1:] + [n_pos]
        turn_values = [values[b, s] for s in starts]
        turn_adv = [None] * n_turns
        last = torch.zeros((), device=rewards.device)
        nextv = bootstrap[b].float()
        for k in range(n_turns - 1, -1, -1):
            reward = rewards[b, bounds[k] : bounds[k + 1]].sum()
            delta = reward + discount * nextv - turn_values[k]
            last = delta + discount * lam[b] * last
            turn_adv[k] = last
            nextv = turn_values[k]
        for k in range(n_turns):
            in_turn = ids[bounds[k] : bounds[k + 1]] == turn_vals[k]
            adv[b, bounds[k] : bounds[k + 1]][in_turn] = turn_adv[k]
            ret[b, bounds[k] : bounds[k + 1]][in_turn] = turn_adv[k] + turn_values[k]
    return adv, ret


def reference_group_norm(
    x: torch.Tensor,
    loss_mask: torch.Tensor,
    group_sizes: list[int],
    eps: float = 1e-5,
    unbiased: bool = True,
) -> torch.Tensor:
    """Per-group Python loop: token-weighted mean and std over each group of rows."""
    out = torch.zeros_like(x, dtype=torch.float32)
    mask = loss_mask.float()
    start = 0
    for size in group_sizes:
        xs, ms = x[start : start + size].float(), mask[start : start + size]
        count = ms.sum()
        mean = (xs * ms).sum() / count.clamp(min=1)
        var = (((xs - mean) ** 2) * ms).sum() / (count - 1 if unbiased else count).clamp(min=1)
        out[start : start + size] = (xs - mean) / (var.sqrt() + eps) * ms
        start += size
    return out
