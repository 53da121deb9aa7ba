"""Fused numba CPU kernels for steps 4-5 of the default pipeline, with the batch's [B, T] checks.

Why: written as tensor operations, alignment (rolls), masking, the KL
estimate, reward placement, GAE and the batch checks make about twenty passes
over [B, T] data, each bound by memory speed. Here one compiled function per
row reads every raw input once, checks it, and writes the six [B, T] outputs
once: aligned loss mask, aligned masked log-probs, KL rewards, total rewards,
advantages and returns, plus each row's largest |values| (the output guard's
bound, `batch_checks.BatchStats`) and the per-row moments that advantage normalisation
needs (computed by `areal_adv.utils.norm_kernels.masked_row_moments`, the helper the
tensor path's normalisation uses, so both give the same bits). The arithmetic
is float32 in the order of the tensor path and the reference loops, and the
outputs are bit for bit those of the tensor path with every KL estimator (k3
is `areal_adv.utils.kl.k3_bounded`, the function the tensor path's `KLEstimator`
evaluates: the same float64 operations, on the log-ratio bounded as there).

Checks: a row never raises; it reports error bits (`ROW_*`), and the caller
re-runs the descriptive batch checks (`batch_checks.check_batch_values`), which
raise the error the tensor path raises, before any output is returned.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from areal_adv.utils.buffers import empty_cpu
from areal_adv.utils.kl import k3_bounded
from areal_adv.utils.norm_kernels import RowMoments, masked_row_moments

from .numba_cpu import NUMBA_AVAILABLE, _gae_row, use_parallel

if NUMBA_AVAILABLE:
    import numba

__all__ = ["FusedInputs", "FusedOptions", "FusedOutputs", "KL_KINDS", "ROW_ERRORS", "run_fused"]

#: Error bits a row reports (each stands for one check of `batch_checks.check_batch_values`).
ROW_ATTENTION_NOT_BINARY = 1
ROW_ATTENTION_NOT_RIGHT_PADDED = 2
ROW_EMPTY = 4
ROW_LOSS_MASK_NOT_BINARY = 8
ROW_LOSS_MASK_ON_PADDING = 16
ROW_NOT_FINITE = 32
ROW_TURN_IDS_INVALID = 64
ROW_ERRORS = {
    ROW_ATTENTION_NOT_BINARY: "attention_mask not binary",
    ROW_ATTENTION_NOT_RIGHT_PADDED: "attention_mask not right-padded",
    ROW_EMPTY: "attention_mask empty",
    ROW_LOSS_MASK_NOT_BINARY: "loss_mask not binary",
    ROW_LOSS_MASK_ON_PADDING: "loss_mask on padding",
    ROW_NOT_FINITE: "a float field not finite",
    ROW_TURN_IDS_INVALID: "turn_ids invalid",
}

KL_KINDS = {"k1": 1, "k2": 2, "k3": 3}


# ---------------------------------------------------------------------------
# The element-wise pass: everything but the estimator
# ---------------------------------------------------------------------------


def _prelude(m_raw, x, p, r, use_prox):
    """At one position: aligned mask (1 where the raw mask is set), masked old log-prob, log-ratio.

    The aligned mask equals float32(mask) for a valid 0/1 mask; a row with any
    other value fails the checks and is never returned.
    """
    m = np.float32(m_raw != 0)
    old = (p if use_prox else x) * m
    return m, old, old - r * m


def _not_finite(x, p, r, v):
    """1 if any of the four is NaN or +-inf: each x - x is 0 or NaN, so their sum is exact."""
    zero = np.float32(0.0)
    return np.int64(((x - x) + (p - p) + (r - r) + (v - v)) != zero)


def _elementwise_k12(
    attn, attn_prev, lmask, lp, ref, prox, val, use_prox, square, neg_kl_ctl, m_out, lp_out, kl_out, tot_out, adv_out
):
    """One run of positions with the k1 or k2 estimator; returns (sum of attention, error bits).

    Every array is a slice starting at the run's first position (raw fields at
    the raw token, aligned ones at the aligned position), so indices are
    provably in range; the loop has no branch and its checks are integer
    min / max / sum reductions, so it vectorises. Absent ref / prox / values are
    zero rows. `adv_out` gets the KL (turn GAE adds A_k to it; token GAE
    overwrites it), and the total reward is KL + 0 until `_place`.
    """
    zero = np.float32(0.0)
    seq = a_min = a_max = m_min = m_max = rising = on_padding = not_finite = 0
    for i in range(lmask.shape[0]):
        a_raw, m_raw = attn[i], lmask[i]
        x, p, r, v = lp[i], prox[i], ref[i], val[i]
        m, old, log_ratio = _prelude(m_raw, x, p, r, use_prox)
        kl = log_ratio * log_ratio / np.float32(2.0) if square else log_ratio
        kl = min(max(kl, np.float32(-10.0)), np.float32(10.0)) * neg_kl_ctl
        m_out[i], lp_out[i], kl_out[i], tot_out[i], adv_out[i] = m, old, kl, kl + zero, kl
        seq += a_raw
        a_min, a_max = min(a_min, a_raw), max(a_max, a_raw)
        m_min, m_max = min(m_min, m_raw), max(m_max, m_raw)
        rising += a_raw > attn_prev[i]
        on_padding += m_raw > a_raw
        not_finite += _not_finite(x, p, r, v)
    return seq, _bits(a_min < 0 or a_max > 1, rising, m_min < 0 or m_max > 1, on_padding, not_finite)


def _elementwise_k3(
    attn, attn_prev, lmask, lp, ref, prox, val, use_prox, square, neg_kl_ctl, m_out, lp_out, kl_out, tot_out, adv_out
):
    """`_elementwise_k12` with the k3 estimator exp(-r) - 1 + r (`square` is unused)."""
    zero = np.float32(0.0)
    seq = a_min = a_max = m_min = m_max = rising = on_padding = not_finite = 0
    for i in range(lmask.shape[0]):
        a_raw, m_raw = attn[i], lmask[i]
        x, p, r, v = lp[i], prox[i], ref[i], val[i]
        m, old, log_ratio = _prelude(m_raw, x, p, r, use_prox)
        kl = k3_bounded(log_ratio)
        kl = min(max(kl, np.float32(-10.0)), np.float32(10.0)) * neg_kl_ctl
        m_out[i], lp_out[i], kl_out[i], tot_out[i], adv_out[i] = m, old, kl, kl + zero, kl
        seq += a_raw
        a_min, a_max = min(a_min, a_raw), max(a_max, a_raw)
        m_min, m_max = min(m_min, m_raw), max(m_max, m_raw)
        rising += a_raw > attn_prev[i]
        on_padding += m_raw > a_raw
        not_finite += _not_finite(x, p, r, v)
    return seq, _bits(a_min < 0 or a_max > 1, rising, m_min < 0 or m_max > 1, on_padding, not_finite)


def _bits(attention_bad, rising, mask_bad, on_padding, not_finite):
    return (
        (ROW_ATTENTION_NOT_BINARY if attention_bad else 0)
        | (ROW_ATTENTION_NOT_RIGHT_PADDED if rising else 0)
        | (ROW_LOSS_MASK_NOT_BINARY if mask_bad else 0)
        | (ROW_LOSS_MASK_ON_PADDING if on_padding else 0)
        | (ROW_NOT_FINITE if not_finite else 0)
    )


def _elementwise(
    attn, attn_prev, lmask, lp, ref, prox, val, use_prox, kind, neg_kl_ctl, m_out, lp_out, kl_out, tot_out, adv_out
):
    """The loop for the configured KL estimator."""
    if kind == 3:
        return _elementwise_k3(
            attn,
            attn_prev,
            lmask,
            lp,
            ref,
            prox,
            val,
            use_prox,
            False,
            neg_kl_ctl,
            m_out,
            lp_out,
            kl_out,
            tot_out,
            adv_out,
        )
    return _elementwise_k12(
        attn,
        attn_prev,
        lmask,
        lp,
        ref,
        prox,
        val,
        use_prox,
        kind == 2,
        neg_kl_ctl,
        m_out,
        lp_out,
        kl_out,
        tot_out,
        adv_out,
    )


def _front(row, out, use_prox, kind, neg_kl_ctl):
    """`_elementwise` over a whole row, as two runs; returns (seqlen, error bits).

    Aligned t < T-1 holds raw token t+1; t = T-1 holds raw token 0 (the roll),
    which has no earlier token to check the right padding against.
    """
    attn, lmask, lp, ref, val, prox = row[0], row[1], row[2], row[3], row[4], row[5]
    m_out, lp_out, kl_out, tot_out, adv_out = out[0], out[1], out[2], out[3], out[4]
    n = lmask.shape[0]
    seq, errors = _elementwise(
        attn[1:],
        attn[: n - 1],
        lmask[1:],
        lp[1:],
        ref[: n - 1],
        prox[: n - 1],
        val[: n - 1],
        use_prox,
        kind,
        neg_kl_ctl,
        m_out[: n - 1],
        lp_out[: n - 1],
        kl_out[: n - 1],
        tot_out[: n - 1],
        adv_out[: n - 1],
    )
    seq0, errors0 = _elementwise(
        attn[:1],
        attn[:1],
        lmask[:1],
        lp[:1],
        ref[n - 1 :],
        prox[n - 1 :],
        val[n - 1 :],
        use_prox,
        kind,
        neg_kl_ctl,
        m_out[n - 1 :],
        lp_out[n - 1 :],
        kl_out[n - 1 :],
        tot_out[n - 1 :],
        adv_out[n - 1 :],
    )
    return seq + seq0, errors | errors0


def _place(seqlen, pos, score, turn, kl_out, tot_out, adv_out):
    """Put the outcome score at `pos` and zero the KL reward at seqlen-1 (the only positions that change)."""
    zero = np.float32(0.0)
    for t in (seqlen - 1, pos):
        kl_g = zero if t == seqlen - 1 else kl_out[t]
        outcome = score if t == pos else zero
        if turn:
            tot_out[t] = (outcome + zero) + kl_g
            adv_out[t] = kl_g
        else:
            tot_out[t] = (kl_g + outcome) + zero


def _max_abs_bits(val):
    """The largest |v| of a row, as the int32 bit pattern of a float32.

    For non-negative floats the bit patterns are ordered like the values, so
    clearing the sign bit turns max |v| into an integer max reduction, which
    vectorises (a float max does not: NaN ordering). The row is in cache after
    the element-wise pass. NaN and inf give patterns >= 0x7F800000, but such a
    row fails ROW_NOT_FINITE and its magnitude is never used.
    """
    bits = val.view(np.int32)
    sign_off = np.int32(0x7FFFFFFF)
    high = np.int32(0)
    for i in range(bits.shape[0]):
        x = np.int32(bits[i] & sign_off)  # int32 throughout: `&` alone widens to int64 and halves the speed
        high = x if x > high else high
    return high


def _row_setup(row, out, flags, kind, neg_kl_ctl, turn, score, trunc_given):
    """The element-wise pass and the row's lengths: (errors, truncated, bootstrap value, placed score, its position)."""
    n = row[1].shape[0]
    seqlen, errors = _front(row, out, flags[0], kind, neg_kl_ctl)
    truncated = trunc_given if flags[2] else seqlen == n
    if flags[3] and truncated:  # mask_no_eos_with_zero
        score = np.float32(0.0)
    pos = max(seqlen - 2, 0)
    boot = np.float32(0.0)
    if seqlen < 1 or seqlen > n:
        return errors | ROW_EMPTY, truncated, boot, score, pos  # failed the checks: nothing to place
    if truncated:
        boot = row[4][seqlen - 1]
    _place(seqlen, pos, score, turn, out[2], out[3], out[4])
    return errors, truncated, boot, score, pos


# ---------------------------------------------------------------------------
# Turn ids and the estimators
# ---------------------------------------------------------------------------


def _turn_scan(lmask, ids, pos, starts):
    """Check raw turn ids against the raw mask; record aligned turn starts.

    Returns (ids valid, n_turns, turn holding the score position or -1). Valid
    also means every id < T (`batch_checks` names the field for the message).
    Aligned position t holds raw token t+1, so raw token 0 starts no aligned turn.
    Ids off generated tokens are read as -1 (AReaL's padding holds 0 there).
    """
    n_pos = lmask.shape[0]
    bad = False
    earlier_max = -1  # over all raw tokens: ids never decrease
    aligned_max = -1  # over raw tokens 1.. : aligned turn starts
    n_turns = 0
    score_turn = -1
    for src in range(n_pos):
        generated = lmask[src] != 0
        tid = ids[src] if generated else -1
        bad |= (generated & (tid < 0)) | ((tid >= 0) & (tid < earlier_max))
        bad |= tid >= n_pos  # AReaL's rule: a row of T positions holds fewer than T turns
        earlier_max = max(earlier_max, tid)
        if src >= 1:
            if tid > aligned_max:
                starts[n_turns] = src - 1
                n_turns += 1
                aligned_max = tid
            if src - 1 == pos and tid >= 0:
                score_turn = n_turns - 1
    return not bad, n_turns, score_turn


def _gae_operands(row, out, coef, bootstrap):
    """One row's token-GAE operands: (total rewards, loss mask, values, coef, bootstrap, advantages, returns)."""
    return out[3], out[0], row[4], coef, bootstrap, out[4], out[5]


def _token_pair(gae0, gae1, discount):
    """Token GAE backwards over aligned T-2 .. 0 of two rows at once (T-1 is never a step).

    `gae0` and `gae1` are `_gae_operands` tuples. Row k's [T] total rewards, loss mask and
    values are read; its advantages and returns are written; `coef` is the row's
    discount * lambda and `bootstrap` the value after its last step.

    The recurrence of one row is a chain of dependent float operations; two
    independent chains keep the core busy. Same float32 operations as the
    reference loop; with discount and both coefficients 1 (the default) the
    multiplications by 1 are left out, which changes no bit.
    """
    rewards0, mask0, values0, coef0, bootstrap0, advantages0, returns0 = gae0
    rewards1, mask1, values1, coef1, bootstrap1, advantages1, returns1 = gae1
    n_pos = rewards0.shape[0]
    one = np.float32(1.0)
    if discount == one and coef0 == one and coef1 == one:
        _pair_steps_unit(
            rewards0, mask0, values0, bootstrap0, advantages0, returns0,
            rewards1, mask1, values1, bootstrap1, advantages1, returns1,
        )  # fmt: skip
    else:
        _pair_steps(
            rewards0, mask0, values0, coef0, bootstrap0, advantages0, returns0,
            rewards1, mask1, values1, coef1, bootstrap1, advantages1, returns1, discount,
        )  # fmt: skip
    zero = np.float32(0.0)
    advantages0[n_pos - 1] = zero
    advantages1[n_pos - 1] = zero
    returns0[n_pos - 1] = values0[n_pos - 1]
    returns1[n_pos - 1] = values1[n_pos - 1]


def _pair_steps(tot0, m0, v0, c0, boot0, adv0, ret0, tot1, m1, v1, c1, boot1, adv1, ret1, g):
    """The two-row recurrence; unsigned indices spare the negative-index handling."""
    n_pos = tot0.shape[0]
    zero = np.float32(0.0)
    next0, last0, next1, last1 = boot0, zero, boot1, zero
    for i in range(n_pos - 1):
        t = np.uint64(n_pos - 2 - i)
        va, vb = v0[t], v1[t]
        new0 = (tot0[t] + g * next0 - va) + c0 * last0
        new1 = (tot1[t] + g * next1 - vb) + c1 * last1
        ok0, ok1 = m0[t] != zero, m1[t] != zero
        next0 = va if ok0 else next0
        next1 = vb if ok1 else next1
        last0 = new0 if ok0 else last0
        last1 = new1 if ok1 else last1
        adv0[t] = last0
        adv1[t] = last1
        ret0[t] = last0 + va
        ret1[t] = last1 + vb


def _pair_steps_unit(tot0, m0, v0, boot0, adv0, ret0, tot1, m1, v1, boot1, adv1, ret1):
    """`_pair_steps` for discount = lambda = 1 (x * 1 is x, so the products are dropped)."""
    n_pos = tot0.shape[0]
    zero = np.float32(0.0)
    next0, last0, next1, last1 = boot0, zero, boot1, zero
    for i in range(n_pos - 1):
        t = np.uint64(n_pos - 2 - i)
        va, vb = v0[t], v1[t]
        new0 = (tot0[t] + next0 - va) + last0
        new1 = (tot1[t] + next1 - vb) + last1
        ok0, ok1 = m0[t] != zero, m1[t] != zero
        next0 = va if ok0 else next0
        next1 = vb if ok1 else next1
        last0 = new0 if ok0 else last0
        last1 = new1 if ok1 else last1
        adv0[t] = last0
        adv1[t] = last1
        ret0[t] = last0 + va
        ret1[t] = last1 + vb


def _turn_values(val, starts, n_turns, score_turn, score, boot, g, c):
    """(A_k, V_k) per turn: the token kernel's row recurrence over the turns, one step each."""
    width = n_turns + 1
    turn_r = np.zeros(width, dtype=np.float32)
    turn_v = np.zeros(width, dtype=np.float32)
    for k in range(n_turns):
        turn_v[k] = val[starts[k]]
    if score_turn >= 0:
        turn_r[score_turn] = score
    steps = np.ones(width, dtype=np.float32)
    turn_adv = np.empty(width, dtype=np.float32)
    turn_ret = np.empty(width, dtype=np.float32)
    _gae_row(turn_r, turn_v, steps, c, boot, g, turn_adv, turn_ret)
    return turn_adv, turn_v


def _broadcast_segment(a_k, ret_k, next_mask, val, adv_out, ret_out):
    """One turn's segment (slices; `next_mask` holds the raw loss mask one position on)."""
    zero = np.float32(0.0)
    for i in range(val.shape[0]):
        generated = next_mask[i] != 0
        adv_out[i] = (a_k if generated else zero) + adv_out[i]
        ret_out[i] = ret_k if generated else val[i]


def _broadcast_turns(lmask, val, starts, n_turns, turn_adv, turn_v, adv_out, ret_out):
    """A_k (plus the KL already in adv_out) and A_k + V_k on turn k's generated tokens; 0 + KL and V elsewhere.

    Segment k runs from turn k's start to the next start (the first also covers
    what precedes turn 0); the last aligned position is never generated. A token
    is generated where the raw mask is (`_turn_scan` checked it has a turn id).
    """
    n = lmask.shape[0]
    zero = np.float32(0.0)
    hi = min(starts[0], n - 1)
    _broadcast_segment(zero, zero, lmask[1 : hi + 1], val[:hi], adv_out[:hi], ret_out[:hi])
    for k in range(n_turns):
        lo, hi = starts[k], min(starts[k + 1], n - 1)
        a_k = turn_adv[k]
        _broadcast_segment(a_k, a_k + turn_v[k], lmask[lo + 1 : hi + 1], val[lo:hi], adv_out[lo:hi], ret_out[lo:hi])
    adv_out[n - 1] = zero + adv_out[n - 1]
    ret_out[n - 1] = val[n - 1]


# ---------------------------------------------------------------------------
# Row kernels
# ---------------------------------------------------------------------------


def _ids_bits(row, flags, pos):
    """ROW_TURN_IDS_INVALID when the batch has turn ids and this row's are invalid."""
    if not flags[1]:
        return 0
    starts = np.empty(row[1].shape[0] + 1, dtype=np.int64)
    ok, _, _ = _turn_scan(row[1], row[6], pos, starts)
    return 0 if ok else ROW_TURN_IDS_INVALID


def _values_bits(row, flags):
    """max |values| of the raw row for the output guard (0 without values)."""
    return _max_abs_bits(row[4]) if flags[5] else np.int32(0)


def _moments(out, want):
    """The advantage row's moments under the aligned mask, as `Normalization` forms them."""
    if want:
        return masked_row_moments(out[4], out[0])
    return 0.0, 0.0, 0.0, 0.0, 0.0


def _token_rows(row0, out0, row1, out1, flags, kind, neg_kl_ctl, g, c0, c1, score0, score1, trunc0, trunc1):
    """Token GAE for two rows (the same row twice for an odd batch's last row).

    Returns ((errors, truncated, moments, max |values| bits) per row).
    `flags` = (use_prox, has_ids, has_trunc, mask_no_eos, want_moments, has_values).
    """
    e0, tr0, boot0, _, pos0 = _row_setup(row0, out0, flags, kind, neg_kl_ctl, False, score0, trunc0)
    e1, tr1, boot1, _, pos1 = _row_setup(row1, out1, flags, kind, neg_kl_ctl, False, score1, trunc1)
    e0 |= _ids_bits(row0, flags, pos0)
    e1 |= _ids_bits(row1, flags, pos1)
    _token_pair(_gae_operands(row0, out0, c0, boot0), _gae_operands(row1, out1, c1, boot1), g)
    return (
        (e0, tr0, _moments(out0, flags[4]), _values_bits(row0, flags)),
        (e1, tr1, _moments(out1, flags[4]), _values_bits(row1, flags)),
    )


def _turn_row(row, out, flags, kind, neg_kl_ctl, g, c, score, trunc_given):
    """Turn GAE for one row; returns (errors, truncated, moments, max |values| bits).

    The turn reward is the outcome score of the turn holding position seqlen-2
    (folded process rewards take the tensor path). KL is added to the
    advantages after the recursion and never reaches the returns.
    """
    n_pos = row[1].shape[0]
    errors, truncated, boot, score, pos = _row_setup(row, out, flags, kind, neg_kl_ctl, True, score, trunc_given)
    starts = np.empty(n_pos + 1, dtype=np.int64)
    ok, n_turns, score_turn = _turn_scan(row[1], row[6], pos, starts)
    if not ok:
        errors |= ROW_TURN_IDS_INVALID
    starts[n_turns] = n_pos  # sentinel: no further turn start
    turn_adv, turn_v = _turn_values(row[4], starts, n_turns, score_turn, score, boot, g, c)
    _broadcast_turns(row[1], row[4], starts, n_turns, turn_adv, turn_v, out[4], out[5])
    return errors, truncated, _moments(out, flags[4]), _values_bits(row, flags)


# ---------------------------------------------------------------------------
# Batch kernels: rows in parallel (large batches) or on the calling thread
# ---------------------------------------------------------------------------


def _row(ins, has, flags, b):
    """Views of batch row b: (attention, loss mask, logprobs, ref, values, prox, turn ids); absent = zero rows."""
    attn, lmask, lp, ref, val, prox, ids = ins
    return (
        attn[b],
        lmask[b],
        lp[b],
        ref[b] if has[0] else ref[0],
        val[b] if has[1] else val[0],
        prox[b] if has[2] else prox[0],
        ids[b] if flags[1] else ids[0],
    )


def _out(outs, b):
    return outs[0][b], outs[1][b], outs[2][b], outs[3][b], outs[4][b], outs[5][b]


def _token_pair_task(p, ins, has, flags, score, trunc, kind, neg_kl_ctl, g, coef, outs, res):
    """Rows 2p and 2p+1 (or the last row twice)."""
    n_rows = score.shape[0]
    b0 = 2 * p
    b1 = min(b0 + 1, n_rows - 1)
    r0, r1 = _token_rows(
        _row(ins, has, flags, b0),
        _out(outs, b0),
        _row(ins, has, flags, b1),
        _out(outs, b1),
        flags,
        kind,
        neg_kl_ctl,
        g,
        coef[b0],
        coef[b1],
        score[b0],
        score[b1],
        trunc[b0] if flags[2] else False,
        trunc[b1] if flags[2] else False,
    )
    _store_row(res, b0, r0)
    _store_row(res, b1, r1)


def _turn_task(b, ins, has, flags, score, trunc, kind, neg_kl_ctl, g, coef, outs, res):
    _store_row(
        res,
        b,
        _turn_row(
            _row(ins, has, flags, b),
            _out(outs, b),
            flags,
            kind,
            neg_kl_ctl,
            g,
            coef[b],
            score[b],
            trunc[b] if flags[2] else False,
        ),
    )


def _store_row(res, b, row):
    """Row b's (errors, truncated, moments, max |values| bits) into the [B]-sized results."""
    errors, trunc_out, moments, values_bits = res
    errors[b], trunc_out[b], values_bits[b] = row[0], row[1], row[3]
    m = row[2]
    moments[0, b], moments[1, b], moments[2, b], moments[3, b], moments[4, b] = m[0], m[1], m[2], m[3], m[4]


def _token_parallel(ins, has, flags, score, trunc, kind, neg_kl_ctl, g, coef, outs, res):
    """Token GAE pipeline over [B, T], two rows per task."""
    for p in numba.prange((score.shape[0] + 1) // 2):
        _token_pair_task(p, ins, has, flags, score, trunc, kind, neg_kl_ctl, g, coef, outs, res)


def _token_serial(ins, has, flags, score, trunc, kind, neg_kl_ctl, g, coef, outs, res):
    """Token GAE pipeline over [B, T] on the calling thread (small batches)."""
    for p in range((score.shape[0] + 1) // 2):
        _token_pair_task(p, ins, has, flags, score, trunc, kind, neg_kl_ctl, g, coef, outs, res)


def _turn_parallel(ins, has, flags, score, trunc, kind, neg_kl_ctl, g, coef, outs, res):
    """Turn GAE pipeline over [B, T], one row per task."""
    for b in numba.prange(score.shape[0]):
        _turn_task(b, ins, has, flags, score, trunc, kind, neg_kl_ctl, g, coef, outs, res)


def _turn_serial(ins, has, flags, score, trunc, kind, neg_kl_ctl, g, coef, outs, res):
    """Turn GAE pipeline over [B, T] on the calling thread (small batches)."""
    for b in range(score.shape[0]):
        _turn_task(b, ins, has, flags, score, trunc, kind, neg_kl_ctl, g, coef, outs, res)


if NUMBA_AVAILABLE:
    _jit = numba.njit(cache=True, nogil=True)
    _inline = numba.njit(cache=True, nogil=True, inline="always")
    _prelude = _inline(_prelude)
    _not_finite = _inline(_not_finite)
    _bits = _inline(_bits)
    _elementwise_k12 = _jit(_elementwise_k12)
    _elementwise_k3 = _jit(_elementwise_k3)
    for _name in (
        "_elementwise",
        "_front",
        "_place",
        "_row_setup",
        "_turn_scan",
        "_gae_operands",
        "_token_pair",
        "_pair_steps",
        "_pair_steps_unit",
        "_turn_values",
        "_max_abs_bits",
        "_values_bits",
        "_broadcast_segment",
        "_broadcast_turns",
        "_ids_bits",
        "_moments",
        "_token_rows",
        "_turn_row",
        "_row",
        "_out",
        "_store_row",
        "_token_pair_task",
        "_turn_task",
    ):
        globals()[_name] = _jit(globals()[_name])
    # Separate Python functions, not one compiled twice: numba's on-disk cache
    # keys entries by function and signature, not by the `parallel` flag.
    _parallel = numba.njit(cache=True, nogil=True, parallel=True)
    _KERNELS = {
        ("token", True): _parallel(_token_parallel),
        ("token", False): _jit(_token_serial),
        ("turn", True): _parallel(_turn_parallel),
        ("turn", False): _jit(_turn_serial),
    }


# ---------------------------------------------------------------------------
# The call from Python
# ---------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class FusedInputs:
    """Raw (unshifted) batch tensors on CPU: int64 masks and turn ids, float32 floats."""

    attention_mask: torch.Tensor
    loss_mask: torch.Tensor
    logprobs: torch.Tensor
    ref_logp: torch.Tensor | None
    values: torch.Tensor | None
    prox_logp: torch.Tensor | None  # checked when present; used when `use_prox`
    turn_ids: torch.Tensor | None
    score: torch.Tensor  # [B] float32 outcome score (after step 3)
    is_truncated: torch.Tensor | None  # [B] bool; None = infer seqlen == T


@dataclass(frozen=True)
class FusedOptions:
    estimator: str  # "token" | "turn"
    use_prox: bool  # old log-probs from prox_logp (recompute_logprob without decoupled loss)
    mask_no_eos: bool
    kl_estimator: str
    kl_ctl: float
    discount: float
    coef: torch.Tensor  # [B] float32 discount * lambda
    row_moments: bool  # also return the advantages' per-row moments (for advantage normalisation)
    magnitudes: bool = True  # also return max |values| per row (the output guard's bound; off only to time it)


@dataclass(frozen=True, eq=False)
class FusedOutputs:
    loss_mask: torch.Tensor
    logprobs: torch.Tensor
    kl_rewards: torch.Tensor
    total_rewards: torch.Tensor
    advantages: torch.Tensor
    returns: torch.Tensor
    truncated: torch.Tensor  # [B] bool
    errors: torch.Tensor  # [B] int64 error bits, 0 for a valid row
    row_moments: RowMoments | None  # None unless options.row_moments
    values_max_abs: torch.Tensor  # [B] float32 largest |values| per row (0 without values or magnitudes), for the guard


def _np(t: torch.Tensor | None, absent: np.ndarray) -> np.ndarray:
    return absent if t is None else t.detach().contiguous().numpy()


def run_fused(inputs: FusedInputs, options: FusedOptions) -> FusedOutputs:
    """Steps 4-5 of the default pipeline on CPU tensors; see the module docstring."""
    if not NUMBA_AVAILABLE:
        raise RuntimeError("numba is not importable; the fused advantage pipeline needs it")
    if options.estimator == "turn" and inputs.turn_ids is None:
        raise ValueError("run_fused: turn GAE needs turn_ids")
    n_rows, n_pos = inputs.attention_mask.shape
    outs = tuple(empty_cpu((n_rows, n_pos)) for _ in range(6))
    errors = torch.zeros(n_rows, dtype=torch.int64)
    truncated = torch.empty(n_rows, dtype=torch.bool)
    moments = torch.zeros((5, n_rows), dtype=torch.float64)
    values_bits = torch.zeros(n_rows, dtype=torch.int32)
    zeros = np.zeros((1, n_pos), dtype=np.float32)  # stands in for an absent [B, T] float field
    ins = (
        _np(inputs.attention_mask, zeros),
        _np(inputs.loss_mask, zeros),
        _np(inputs.logprobs, zeros),
        _np(inputs.ref_logp, zeros),
        _np(inputs.values, zeros),
        _np(inputs.prox_logp, zeros),
        _np(inputs.turn_ids, np.full((1, n_pos), -1, dtype=np.int64)),
    )
    has = (inputs.ref_logp is not None, inputs.values is not None, inputs.prox_logp is not None)
    flags = (
        bool(options.use_prox),
        inputs.turn_ids is not None,
        inputs.is_truncated is not None,
        bool(options.mask_no_eos),
        bool(options.row_moments),
        inputs.values is not None and bool(options.magnitudes),
    )
    parallel = use_parallel(n_rows, n_rows * n_pos)
    _KERNELS[(options.estimator, parallel)](
        ins,
        has,
        flags,
        _np(inputs.score, zeros[0]),
        _np(inputs.is_truncated, np.zeros(1, dtype=np.bool_)),
        KL_KINDS[options.kl_estimator],
        np.float32(-options.kl_ctl),
        np.float32(options.discount),
        _np(options.coef, zeros[0]),
        tuple(o.numpy() for o in outs),
        (errors.numpy(), truncated.numpy(), moments.numpy(), values_bits.numpy()),
    )
    return FusedOutputs(
        *outs,
        truncated,
        errors,
        RowMoments(*moments.unbind(0)) if options.row_moments else None,
        values_bits.view(torch.float32),
    )
