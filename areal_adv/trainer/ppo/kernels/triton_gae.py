"""Triton CUDA kernel for token GAE (import-guarded; CUDA tensors only).

Why this shape: a per-position loop over T with one load per step would be
latency bound (T dependent global loads per row). Instead every program owns
BLOCK_B rows and walks them from the end in tiles of BLOCK_T positions. Each
tile is loaded with coalesced reads and solved with in-register associative
scans of affine maps (x -> a*x + b); only a [BLOCK_B] carry crosses tiles.
Three scans per tile:

1. next value: V_next(t) = V(t+1) if t+1 is valid, else V_next(t+1)
   (the carry starts at the bootstrap value);
2. advantage: A(t) = delta(t) + coef * A(t+1) on valid t, identity elsewhere;
3. carry-through: masked positions take A of the next valid position. This
   scan only selects values, so it is exact, as in the reference loop.

Tiles are read in reverse order (offsets t_hi - j), so a forward scan works
on every Triton version that has tuple `associative_scan`.
"""

from __future__ import annotations

import os

import torch

try:
    import triton
    import triton.language as tl

    TRITON_AVAILABLE = True
except Exception:  # triton missing or broken: the torch path is used instead
    triton = None
    tl = None
    TRITON_AVAILABLE = False


if TRITON_AVAILABLE:

    @triton.jit
    def _then(a1, b1, a2, b2):
        """Compose affine maps: apply (a1, b1) first, then (a2, b2)."""
        return a1 * a2, a2 * b1 + b2

    @triton.jit
    def _last_column(x, j, BLOCK_T: tl.constexpr):
        """x[:, BLOCK_T-1] as a [BLOCK_B] vector (exact: adds zeros only)."""
        return tl.sum(tl.where(j[None, :] == BLOCK_T - 1, x, 0.0), axis=1)

    @triton.jit
    def _token_gae_kernel(
        r_ptr,
        v_ptr,
        m_ptr,
        coef_ptr,
        boot_ptr,
        adv_ptr,
        ret_ptr,
        n_rows,
        n_pos,
        stride_r,
        stride_v,
        stride_m,
        stride_o,
        discount,
        BLOCK_B: tl.constexpr,
        BLOCK_T: tl.constexpr,
    ):
        pid = tl.program_id(0)
        rows = pid * BLOCK_B + tl.arange(0, BLOCK_B)
        row_ok = rows < n_rows
        rows64 = rows.to(tl.int64)
        coef = tl.load(coef_ptr + rows, mask=row_ok, other=0.0)
        coef2 = tl.zeros([BLOCK_B, BLOCK_T], dtype=tl.float32) + coef[:, None]
        next_carry = tl.load(boot_ptr + rows, mask=row_ok, other=0.0)
        adv_carry = tl.zeros([BLOCK_B], dtype=tl.float32)
        j = tl.arange(0, BLOCK_T)
        for start in range(0, n_pos, BLOCK_T):
            t = n_pos - 1 - start - j  # decreasing positions in this tile
            in_range = (t >= 0)[None, :] & row_ok[:, None]
            step = in_range & (t < n_pos - 1)[None, :]  # T-1 is never a GAE step
            step_next = in_range & (t + 1 < n_pos - 1)[None, :]
            t2 = t[None, :]
            r = tl.load(r_ptr + rows64[:, None] * stride_r + t2, mask=step, other=0.0)
            v = tl.load(v_ptr + rows64[:, None] * stride_v + t2, mask=in_range, other=0.0)
            m = tl.load(m_ptr + rows64[:, None] * stride_m + t2, mask=step, other=0.0)
            v1 = tl.load(v_ptr + rows64[:, None] * stride_v + t2 + 1, mask=step_next, other=0.0)
            m1 = tl.load(m_ptr + rows64[:, None] * stride_m + t2 + 1, mask=step_next, other=0.0)
            valid = m != 0.0
            valid1 = m1 != 0.0
            # 1. value of the next valid position after t (or the bootstrap)
            a_n, b_n = tl.associative_scan(
                (tl.where(valid1, 0.0, 1.0), tl.where(valid1, v1, 0.0)), axis=1, combine_fn=_then
            )
            next_v = a_n * next_carry[:, None] + b_n
            next_carry = _last_column(next_v, j, BLOCK_T)
            # 2. GAE recurrence on valid positions
            delta = r + discount * next_v - v
            a_g, b_g = tl.associative_scan(
                (tl.where(valid, coef2, 1.0), tl.where(valid, delta, 0.0)), axis=1, combine_fn=_then
            )
            gae = a_g * adv_carry[:, None] + b_g
            # 3. exact carry-through of the last valid advantage to masked positions
            a_f, b_f = tl.associative_scan(
                (tl.where(valid, 0.0, 1.0), tl.where(valid, gae, 0.0)), axis=1, combine_fn=_then
            )
            adv = a_f * adv_carry[:, None] + b_f
            adv_carry = _last_column(adv, j, BLOCK_T)
            out = rows64[:, None] * stride_o + t2
            tl.store(adv_ptr + out, adv, mask=in_range)
            tl.store(ret_ptr + out, adv + v, mask=in_range)


def interpreter_active() -> bool:
    """Triton's CPU interpreter (TRITON_INTERPRET=1) runs the kernel on CPU tensors, for checks only."""
    return os.environ.get("TRITON_INTERPRET", "") == "1"


def default_config(n_rows: int, n_pos: int) -> dict[str, int]:
    """Launch shape: enough programs to fill the GPU, 1-2 rows each."""
    block_t = 512 if n_pos >= 512 else max(16, 1 << max(n_pos - 1, 1).bit_length())
    block_b = 2 if n_rows >= 1024 else 1
    return {"block_b": block_b, "block_t": block_t, "num_warps": 4}


def token_gae_triton(
    rewards: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor,
    coef: torch.Tensor,
    bootstrap: torch.Tensor,
    discount: float,
    *,
    block_b: int | None = None,
    block_t: int | None = None,
    num_warps: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Token GAE on CUDA float32 tensors [B, T]; coef = discount * lambda per row.

    The block sizes may be overridden (benchmark sweeps); defaults come from
    `default_config`. Returns fresh (advantages, returns).
    """
    if not TRITON_AVAILABLE:
        raise RuntimeError("triton is not importable; use the torch backend")
    if rewards.device.type != "cuda" and not interpreter_active():
        raise RuntimeError(f"the triton backend needs CUDA tensors, got device {rewards.device}")
    n_rows, n_pos = rewards.shape
    adv = torch.empty((n_rows, n_pos), dtype=torch.float32, device=rewards.device)
    ret = torch.empty_like(adv)
    if n_rows == 0 or n_pos == 0:
        return adv, ret
    cfg = default_config(n_rows, n_pos)
    block_b = block_b or cfg["block_b"]
    block_t = block_t or cfg["block_t"]
    num_warps = num_warps or cfg["num_warps"]
    r, v, m = (x.to(torch.float32).contiguous() for x in (rewards, values, mask))
    c, boot = (x.to(torch.float32).contiguous() for x in (coef, bootstrap))
    grid = (triton.cdiv(n_rows, block_b),)
    _token_gae_kernel[grid](
        r,
        v,
        m,
        c,
        boot,
        adv,
        ret,
        n_rows,
        n_pos,
        r.stride(0),
        v.stride(0),
        m.stride(0),
        adv.stride(0),
        float(discount),
        BLOCK_B=block_b,
        BLOCK_T=block_t,
        num_warps=num_warps,
    )
    return adv, ret
