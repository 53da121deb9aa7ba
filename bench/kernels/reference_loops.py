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
        # Turn k spans [start_k, start_{k+1}); only its generated tokens carry its reward.
        bounds = [0] + starts[1:] + [n_pos]
        turn_values = [values[b, s] for s in starts]
        turn_adv = [None] * n_turns
        last = torch.zeros((), device=rewards.device)
        nextv = bootstrap[b].float()
        for k in range(n_turns - 1, -1, -1):
            reward = (rewards[b, bounds[k] : bounds[k + 1]] * (ids[bounds[k] : bounds[k + 1]] >= 0)).sum()
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


def reference_pipeline(
    data: dict[str, torch.Tensor], *, kl_ctl: float = 0.1, eps: float = 1e-5, adv_norm: bool = True
) -> dict[str, torch.Tensor]:
    """The AReaL 1.0.4 default `compute_advantages` (token GAE loop, batch adv norm unless `adv_norm=False`).

    Same steps as our default pipeline with `kl_ctl`, k1 KL, discount = lambda = 1
    and `adv_norm` at batch level; written the 1.0.4 way (vectorised except the
    per-position GAE loop).
    """
    n_rows, n_pos = data["input_ids"].shape
    rows = torch.arange(n_rows)
    score = torch.clip(data["rewards"].float(), -20.0, 20.0)
    loss_mask = torch.roll(data["loss_mask"].float(), shifts=-1, dims=-1)
    old_logp = torch.roll(data["logprobs"], shifts=-1, dims=-1) * loss_mask
    ref_logp = data["ref_logp"] * loss_mask
    seqlens = data["attention_mask"].sum(-1).long()
    no_eos = seqlens == n_pos
    kl = -kl_ctl * (old_logp - ref_logp).clamp(-10, 10)
    rewards = kl.clone()
    rewards[rows, seqlens - 1] = 0
    rewards[rows, torch.clip(seqlens - 2, min=0)] += score
    values = data["values"]
    adv, ret = reference_token_gae(rewards, values, loss_mask, 1.0, torch.ones(n_rows), values[:, -1] * no_eos)
    if not adv_norm:
        return {"advantages": adv, "returns": ret, "kl_rewards": kl, "tot_rewards": rewards, "loss_mask": loss_mask}
    m = loss_mask.double()
    count = m.sum()
    mean = (adv.double() * m).sum() / count
    std = ((((adv.double() - mean) * m) ** 2).sum() / (count - 1)).sqrt()
    adv = ((adv.double() - mean) * m / (std + eps)).float()
    return {"advantages": adv, "returns": ret, "kl_rewards": kl, "tot_rewards": rewards, "loss_mask": loss_mask}
