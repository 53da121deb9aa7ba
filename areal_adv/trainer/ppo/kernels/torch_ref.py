"""Vectorised pure-torch token GAE (any device).

Why: it is the portable fallback (no numba, CUDA without Triton, other
devices). Instead of a Python loop over the T positions it uses

* a reverse cumulative-max to find, for every position, the next valid
  (unmasked) position, which gives the bootstrap value V_{next} directly;
* a log-depth (Hillis-Steele) scan for the linear recurrence
  ``A_t = a_t * A_{t+1} + b_t`` with ``a_t = discount * lambda`` on valid
  positions (identity elsewhere): ceil(log2 T) vectorised steps, each over
  the whole [B, T] tensor, accumulated in float64 where the device has it.

Masked positions then take the advantage of the next valid position by a
gather, so they carry it exactly, as the reference loop does.
"""

from __future__ import annotations

import torch


def accumulation_dtype(device: torch.device) -> torch.dtype:
    """float64 where the device supports it (the scan reassociates sums)."""
    return torch.float64 if device.type in ("cpu", "cuda") else torch.float32


def next_valid_index(valid: torch.Tensor) -> torch.Tensor:
    """For each position t, the smallest s >= t with valid[s]; T when none."""
    n_pos = valid.shape[1]
    rev = torch.flip(valid, dims=[1])
    # In flipped coordinates j = T-1-s, "smallest s >= t" is "largest j <= T-1-t".
    j = torch.arange(n_pos, device=valid.device).expand_as(rev)
    last_j = torch.cummax(torch.where(rev, j, torch.full_like(j, -1)), dim=1).values
    nxt = torch.where(last_j >= 0, n_pos - 1 - last_j, torch.full_like(last_j, n_pos))
    return torch.flip(nxt, dims=[1])


def reverse_linear_scan(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Solve y_t = a_t * y_{t+1} + b_t along dim 1 with y_T = 0 (log depth).

    Each step composes every element with the one `shift` positions later;
    elements past the end act as the identity (1, 0).
    """
    n_pos = a.shape[1]
    shift = 1
    while shift < n_pos:
        head_a, head_b = a[:, :-shift], b[:, :-shift]
        b = torch.cat([head_b + head_a * b[:, shift:], b[:, -shift:]], dim=1)
        a = torch.cat([head_a * a[:, shift:], a[:, -shift:]], dim=1)
        shift *= 2
    return b


def token_gae_torch(
    rewards: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor,
    coef: torch.Tensor,
    bootstrap: torch.Tensor,
    discount: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Token GAE on float32 [B, T] tensors; coef = discount * lambda per row.

    Returns fresh (advantages, returns) on the inputs' device.
    """
    n_rows, n_pos = rewards.shape
    device = rewards.device
    if n_rows == 0 or n_pos == 0:
        empty = torch.zeros((n_rows, n_pos), dtype=torch.float32, device=device)
        return empty, empty.clone()
    valid = mask != 0
    valid[:, n_pos - 1] = False  # never a GAE step (no next token); `valid` is ours
    nxt = next_valid_index(valid)
    # Value used at t: the value at the next valid position after t, else bootstrap.
    after = torch.cat([nxt[:, 1:], torch.full_like(nxt[:, :1], n_pos)], dim=1)
    values_ext = torch.cat([values, bootstrap[:, None]], dim=1)
    next_values = torch.gather(values_ext, 1, after)
    # Same float32 operation order as the reference loop.
    delta = rewards + discount * next_values - values
    acc = accumulation_dtype(device)
    a = torch.where(valid, coef[:, None].to(acc), torch.ones((), dtype=acc, device=device))
    b = torch.where(valid, delta.to(acc), torch.zeros((), dtype=acc, device=device))
    scanned = reverse_linear_scan(a, b).to(torch.float32)
    scanned_ext = torch.cat([scanned, scanned.new_zeros((n_rows, 1))], dim=1)
    adv = torch.gather(scanned_ext, 1, nxt)
    return adv, adv + values
