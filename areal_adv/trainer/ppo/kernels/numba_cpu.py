"""Numba CPU kernels for token GAE and turn GAE.

Why numba: the classic implementation runs a Python loop over every token
position; a compiled reverse pass per row (rows in parallel) runs near
memory speed instead. The arithmetic is float32 in the same order as the
reference loop, so token GAE matches it bit for bit on ordinary inputs.

Speed notes (measured on a 2-vCPU EPYC VM, see docs/performance.md):
* the token step uses selects instead of branches, so random masks cost no
  branch mispredictions (a branchy loop was 2.7x slower on a random mask);
* turn GAE works row by row on slices (`ids[b, lo:hi]`): loops over a slice
  have provably non-negative indices and vectorise, while the same loop
  over `range(lo, hi)` on the full row ran 4-7x slower;
* both kernels are then bounded by memory bandwidth, not arithmetic.

`cache=True` stores the compiled code in `__pycache__` next to this file (or
numba's user cache when that is read-only), so only the first call on a
machine pays the compile cost; later processes just load it
(see docs/performance.md).
"""

from __future__ import annotations

import numpy as np
import torch

from areal_adv.utils.buffers import empty_cpu

try:  # numba is optional at run time: without it the torch path is used.
    import numba

    NUMBA_AVAILABLE = True
except Exception:  # pragma: no cover - exercised only without numba
    numba = None
    NUMBA_AVAILABLE = False

# Below this many elements a batch runs on the calling thread: a parallel
# region costs tens of microseconds when idle and a scheduler time slice
# (milliseconds) when the cores are busy with other work.
PARALLEL_MIN_ELEMENTS = 1 << 18


def use_parallel(n_rows: int, n_elements: int) -> bool:
    """Whether a pass runs its rows in parallel: a large batch and more than one numba thread.

    With `numba.set_num_threads(1)` a parallel region still waits at its barrier for
    the idle threads of the pool, which costs a scheduler time slice on busy cores
    (measured under load: a normalisation pass at 256 x 8192 took 17 ms in the
    parallel driver and 1.2 ms in the serial one). Both drivers give the same bits.
    """
    return n_rows > 1 and n_elements >= PARALLEL_MIN_ELEMENTS and NUMBA_AVAILABLE and numba.get_num_threads() > 1


# Turn-layout error codes reported per row by the turn kernel.
TURN_OK = 0
TURN_MASK_MISMATCH = 1
TURN_DECREASING = 2


def _step(r, v, m, nextv, last, g, c):
    """One reverse GAE step; a masked position carries (nextv, last) through."""
    delta = r + g * nextv - v
    new = delta + c * last
    valid = m != 0
    return (v if valid else nextv), (new if valid else last)


def _gae_row(r, v, m, c, boot, g, adv, ret):
    """Reverse GAE pass over one row (1-D arrays); position n-1 is never a step."""
    n_pos = r.shape[0]
    nextv = boot
    last = np.float32(0.0)
    adv[n_pos - 1] = np.float32(0.0)
    ret[n_pos - 1] = v[n_pos - 1]
    for t in range(n_pos - 2, -1, -1):
        nextv, last = _step(r[t], v[t], m[t], nextv, last, g, c)
        adv[t] = last
        ret[t] = last + v[t]


def _token_rows_parallel(r, v, m, coef, boot, g, adv, ret):
    """Token GAE over [B, T]: one reverse pass per row, rows in parallel."""
    for b in numba.prange(r.shape[0]):
        _gae_row(r[b], v[b], m[b], coef[b], boot[b], g, adv[b], ret[b])


def _token_rows_serial(r, v, m, coef, boot, g, adv, ret):
    """Token GAE over [B, T] on the calling thread (small batches)."""
    for b in range(r.shape[0]):
        _gae_row(r[b], v[b], m[b], coef[b], boot[b], g, adv[b], ret[b])


def _turn_starts_row(ids, m, r, starts, sums):
    """Record where each turn of one row starts and sum its rewards; return (n_turns, error code).

    Generated tokens (id >= 0) must agree with the mask (except at the last
    position, never a step) and ids must not decrease along them. The mask
    check is a separate branch-free loop so it vectorises; the caller
    locates the first offence for the message. `sums[k]` is the float64 sum of
    the rewards on turn k's generated tokens (prompt / environment positions
    belong to no turn), accumulated in position order in the same pass.
    """
    n_pos = ids.shape[0]
    mismatches = 0
    for t in range(n_pos - 1):
        mismatches += np.int64(ids[t] >= 0) ^ np.int64(m[t] != 0)
    if mismatches:
        return 0, TURN_MASK_MISMATCH
    prev = -1  # running maximum of the ids seen so far
    n_turns = 0
    for t in range(n_pos):
        tid = ids[t]
        if tid > prev:  # first token of a new turn
            starts[n_turns] = t
            sums[n_turns] = 0.0
            n_turns += 1
            prev = tid
        elif tid >= 0 and tid < prev:
            return n_turns, TURN_DECREASING
        if tid >= 0:
            sums[n_turns - 1] += r[t]
    return n_turns, TURN_OK


def _turn_segment(starts, n_turns, n_pos, k):
    """Positions [lo, hi) from turn k's start to the next turn's start.

    The first segment also covers the positions before turn 0 and the last one
    the positions after the last turn; only generated positions count.
    """
    lo = starts[k] if k > 0 else 0
    hi = starts[k + 1] if k + 1 < n_turns else n_pos
    return lo, hi


def _fill_turn(ids, v, a_k, ret_k, adv, ret):
    """One turn's segment: A_k and A_k + V_k on its tokens, 0 and V on the others.

    Works on slices so the loop index is provably in range (it vectorises).
    """
    for i in range(ids.shape[0]):
        gen = ids[i] >= 0
        adv[i] = a_k if gen else np.float32(0.0)
        ret[i] = ret_k if gen else v[i]


def _turn_row(r, v, ids, m, c, boot, g, adv, ret):
    """Turn GAE on one row: sum rewards per turn, GAE over the turns, broadcast back.

    The per-turn recurrence is the token kernel's row pass (`_gae_row`) run on
    the row's [n_turns + 1] turn arrays; the extra column is the bootstrap
    slot, never a step. Returns a non-zero error code for a bad layout.
    """
    n_pos = r.shape[0]
    starts = np.empty(n_pos + 1, dtype=np.int64)
    sums = np.empty(n_pos + 1, dtype=np.float64)
    n_turns, code = _turn_starts_row(ids, m, r, starts, sums)
    if code != TURN_OK or n_turns == 0:
        for t in range(n_pos):
            adv[t] = np.float32(0.0)
            ret[t] = v[t]
        return code
    width = n_turns + 1
    turn_r = np.zeros(width, dtype=np.float32)
    turn_v = np.zeros(width, dtype=np.float32)
    for k in range(n_turns):
        turn_r[k] = np.float32(sums[k])
        turn_v[k] = v[starts[k]]
    steps = np.ones(width, dtype=np.float32)
    turn_adv = np.empty(width, dtype=np.float32)
    turn_ret = np.empty(width, dtype=np.float32)
    _gae_row(turn_r, turn_v, steps, c, boot, g, turn_adv, turn_ret)
    for k in range(n_turns):
        lo, hi = _turn_segment(starts, n_turns, n_pos, k)
        a_k = turn_adv[k]
        _fill_turn(ids[lo:hi], v[lo:hi], a_k, a_k + turn_v[k], adv[lo:hi], ret[lo:hi])
    return TURN_OK


def _turn_rows_parallel(r, v, ids, m, coef, boot, g, adv, ret, errors):
    """Turn GAE over [B, T], rows in parallel; errors[b] gets each row's code."""
    for b in numba.prange(r.shape[0]):
        errors[b] = _turn_row(r[b], v[b], ids[b], m[b], coef[b], boot[b], g, adv[b], ret[b])


def _turn_rows_serial(r, v, ids, m, coef, boot, g, adv, ret, errors):
    """Turn GAE over [B, T] on the calling thread (small batches)."""
    for b in range(r.shape[0]):
        errors[b] = _turn_row(r[b], v[b], ids[b], m[b], coef[b], boot[b], g, adv[b], ret[b])


if NUMBA_AVAILABLE:
    _jit = numba.njit(cache=True, nogil=True)
    _step = numba.njit(cache=True, nogil=True, inline="always")(_step)
    _gae_row = _jit(_gae_row)
    _turn_starts_row = _jit(_turn_starts_row)
    _turn_segment = _jit(_turn_segment)
    _fill_turn = _jit(_fill_turn)
    _turn_row = _jit(_turn_row)
    # Separate Python functions, not one compiled twice: numba's on-disk cache
    # keys entries by function and signature, not by the `parallel` flag.
    _parallel = numba.njit(cache=True, nogil=True, parallel=True)
    _KERNELS = {
        ("token", True): _parallel(_token_rows_parallel),
        ("token", False): _jit(_token_rows_serial),
        ("turn", True): _parallel(_turn_rows_parallel),
        ("turn", False): _jit(_turn_rows_serial),
    }


def _kernel(name: str, n_rows: int, n_pos: int):
    """The parallel kernel for large batches with threads to spare, else the serial one."""
    return _KERNELS[(name, use_parallel(n_rows, n_rows * n_pos))]


def token_gae_numba(
    rewards: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor,
    coef: torch.Tensor,
    bootstrap: torch.Tensor,
    discount: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Token GAE on CPU tensors [B, T] (coef = discount * lambda, bootstrap: [B]).

    Returns fresh float32 (advantages, returns); the inputs are only read.
    """
    _require_numba()
    n_rows, n_pos = rewards.shape
    adv = empty_cpu((n_rows, n_pos))
    ret = empty_cpu((n_rows, n_pos))
    if n_rows and n_pos:
        _kernel("token", n_rows, n_pos)(
            *(_f32(x) for x in (rewards, values, mask, coef, bootstrap)),
            np.float32(discount),
            adv.numpy(),
            ret.numpy(),
        )
    return adv, ret


def turn_gae_numba(
    rewards: torch.Tensor,
    values: torch.Tensor,
    turn_ids: torch.Tensor,
    mask: torch.Tensor,
    coef: torch.Tensor,
    bootstrap: torch.Tensor,
    discount: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Turn GAE on CPU tensors, one row at a time in a single compiled kernel.

    Returns (advantages, returns, errors[B]) where errors holds a layout
    error code per row; the caller turns a non-zero code into a message.
    """
    _require_numba()
    n_rows, n_pos = rewards.shape
    adv = empty_cpu((n_rows, n_pos))
    ret = empty_cpu((n_rows, n_pos))
    errors = torch.zeros(n_rows, dtype=torch.int64)
    if n_rows and n_pos:
        keep = turn_ids.dtype in (torch.int32, torch.int64)  # compiled for both; no conversion pass
        ids = turn_ids.detach().to(dtype=turn_ids.dtype if keep else torch.int64).contiguous().numpy()
        r, v, m, c, boot = (_f32(x) for x in (rewards, values, mask, coef, bootstrap))
        kernel = _kernel("turn", n_rows, n_pos)
        kernel(r, v, ids, m, c, boot, np.float32(discount), adv.numpy(), ret.numpy(), errors.numpy())
    return adv, ret, errors


def _require_numba() -> None:
    if not NUMBA_AVAILABLE:
        raise RuntimeError("numba is not importable; use the torch backend")


def _f32(x: torch.Tensor) -> np.ndarray:
    """Zero-copy numpy view of a CPU float32 tensor (one compiled signature)."""
    return x.detach().to(device="cpu", dtype=torch.float32).contiguous().numpy()
