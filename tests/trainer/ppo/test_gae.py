"""Token GAE, turn GAE, turn-id helpers and GAE-lambda resolution.

Every backend available here (numba, torch; triton on CUDA) is checked
against plain reference loops written below, by hand-computed cases and by
hypothesis over random masks, ragged lengths and turn layouts.
"""

from __future__ import annotations

import contextlib
import copy
import math
import os
import pickle

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from areal_adv.trainer.ppo import gae
from areal_adv.trainer.ppo.gae import (
    GAELambdaContext,
    GAELambdaInputs,
    canonical_turn_ids,
    compute_gae_lambda,
    count_turns,
    token_gae_tensors,
    turn_gae_tensors,
    validate_turn_ids,
)
from areal_adv.trainer.ppo.kernels import BACKEND_ENV, available_backends

CPU_BACKENDS = available_backends("cpu")
HYP = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@contextlib.contextmanager
def use_backend(name: str):
    """Force a GAE backend through the environment, restoring it afterwards."""
    old = os.environ.get(BACKEND_ENV)
    os.environ[BACKEND_ENV] = name
    try:
        yield
    finally:
        if old is None:
            del os.environ[BACKEND_ENV]
        else:
            os.environ[BACKEND_ENV] = old


# ---------------------------------------------------------------------------
# Reference loops (the contract)
# ---------------------------------------------------------------------------


def ref_token_gae(rewards, values, mask, discount, lam, bootstrap):
    """The AReaL 1.0.4 recurrence, verbatim."""
    n_rows, n_pos = rewards.shape
    adv = torch.zeros(n_rows, n_pos)
    nextv = bootstrap.clone()
    last = torch.zeros(n_rows)
    for t in range(n_pos - 2, -1, -1):
        delta = rewards[:, t] + discount * nextv - values[:, t]
        new = delta + discount * lam * last
        m = mask[:, t]
        nextv = nextv * (1 - m) + values[:, t] * m
        last = last * (1 - m) + new * m
        adv[:, t] = last
    return adv, adv + values


def ref_turn_gae(rewards, values, turn_ids, discount, lam, bootstrap):
    """Per row, per turn, in plain Python floats."""
    n_rows, n_pos = rewards.shape
    adv = torch.zeros(n_rows, n_pos)
    ret = values.clone()
    for b in range(n_rows):
        ids = turn_ids[b].tolist()
        starts = [t for t in range(n_pos) if ids[t] >= 0 and ids[t] > max(ids[:t], default=-1)]
        if not starts:
            continue
        owner = []  # turn index each position's reward goes to
        for t in range(n_pos):
            owner.append(max(sum(1 for s in starts if s <= t) - 1, 0))
        n_turns = len(starts)
        r_k = [0.0] * n_turns
        for t in range(n_pos):
            if ids[t] >= 0:  # only generated tokens carry a turn's reward
                r_k[owner[t]] += float(rewards[b, t])
        v_k = [float(values[b, s]) for s in starts] + [float(bootstrap[b])]
        a_k = [0.0] * (n_turns + 1)
        for k in range(n_turns - 1, -1, -1):
            delta = r_k[k] + discount * v_k[k + 1] - v_k[k]
            a_k[k] = delta + discount * float(lam[b]) * a_k[k + 1]
        for t in range(n_pos):
            if ids[t] >= 0:
                adv[b, t] = a_k[owner[t]]
                ret[b, t] = a_k[owner[t]] + v_k[owner[t]]
    return adv, ret


def _trailing_masked(mask: torch.Tensor) -> torch.Tensor:
    """Masked positions after a row's last valid step (and the last column)."""
    valid = mask.clone() != 0
    valid[:, -1] = False
    after = torch.flip(torch.cumsum(torch.flip(valid.long(), [1]), 1), [1]) == 0
    return after


def _next_valid_value(adv: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """For every position, adv at the next valid step at or after it (0 if none)."""
    out = torch.zeros_like(adv)
    n_rows, n_pos = adv.shape
    for b in range(n_rows):
        carry = 0.0
        for t in range(n_pos - 1, -1, -1):
            if t < n_pos - 1 and mask[b, t] != 0:
                carry = adv[b, t]
            out[b, t] = carry
    return out


# ---------------------------------------------------------------------------
# Hand-computed cases
# ---------------------------------------------------------------------------

# Row 0: a masked gap at t=2; row 1: truncated, bootstrap 4, lambda 1;
# row 2: ragged (2 tokens), lambda 0. discount 0.5. Worked out in the
# test docstrings below.
TOKEN_CASE = dict(
    rewards=[[1.0, 0.0, 0.0, 2.0, 0.0], [0.0, 0.0, 0.0, 1.0, 0.0], [0.0, 1.0, 0.0, 0.0, 0.0]],
    values=[[1.0, 2.0, 3.0, 4.0, 5.0], [2.0, 2.0, 2.0, 2.0, 0.0], [1.0, 1.0, 0.0, 0.0, 0.0]],
    mask=[[1, 1, 0, 1, 0], [1, 1, 1, 1, 0], [1, 1, 0, 0, 0]],
    lam=[0.5, 1.0, 0.0],
    bootstrap=[0.0, 4.0, 0.0],
    advantages=[[0.875, -0.5, -2.0, -2.0, 0.0], [-1.625, -1.25, -0.5, 1.0, 0.0], [-0.5, 0.0, 0.0, 0.0, 0.0]],
    returns=[[1.875, 1.5, 1.0, 2.0, 5.0], [0.375, 0.75, 1.5, 3.0, 0.0], [0.5, 1.0, 0.0, 0.0, 0.0]],
)


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_token_gae_hand_computed(backend):
    """Row 0 (gamma 0.5, lambda 0.5): t=3: delta 2-4 = -2; t=2 masked carries -2;
    t=1: delta 0+0.5*4-2 = 0, A = 0+0.25*(-2) = -0.5; t=0: delta 1+1-1 = 1, A = 0.875.
    Row 1 (bootstrap 4, lambda 1): A3 = 1+2-2 = 1, A2 = -1+0.5 = -0.5, A1 = -1.25, A0 = -1.625.
    Row 2 (lambda 0): A1 = 1+0-1 = 0, A0 = 0+0.5-1 = -0.5; padding stays 0."""
    c = {k: torch.tensor(v, dtype=torch.float32) for k, v in TOKEN_CASE.items()}
    with use_backend(backend):
        adv, ret = token_gae_tensors(
            c["rewards"], c["values"], c["mask"], discount=0.5, lam=c["lam"], bootstrap=c["bootstrap"]
        )
    assert adv.dtype == torch.float32 and ret.dtype == torch.float32
    torch.testing.assert_close(adv, c["advantages"], rtol=0, atol=0)
    torch.testing.assert_close(ret, c["returns"], rtol=0, atol=0)
    ref_adv, _ = ref_token_gae(c["rewards"], c["values"], c["mask"], 0.5, c["lam"], c["bootstrap"])
    torch.testing.assert_close(ref_adv, c["advantages"], rtol=0, atol=0)


# Row 0: turn ids 0 and 2 (id 1 skipped), env gap at 3-4, a reward of 2 on an
# env position (7) after the last turn, 0.5 before the first turn, 0.25 in the
# gap: rewards off generated tokens belong to no turn (AReaL's turn GAE).
# Row 1: adjacent turns 0,1, truncated with bootstrap 4, lambda 1.
# Row 2: no turns. discount 0.5, lambda 0.5 / 1 / 0.5.
TURN_CASE = dict(
    turn_ids=[
        [-1, 0, 0, -1, -1, 2, 2, -1, -1, -1],
        [-1, -1, 0, 0, 1, 1, 1, 1, 1, -1],
        [-1] * 10,
    ],
    rewards=[
        [0.5, 0.0, 1.0, 0.25, 0.0, 0.0, 0.0, 2.0, 0.0, 0.0],
        [0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 2.0, 0.0],
        [1.0] * 10,
    ],
    values=[
        [9.0, 1.0, 7.0, 9.0, 9.0, 3.0, 7.0, 9.0, 9.0, 9.0],
        [0.0, 0.0, 2.0, 5.0, 6.0, 0.0, 0.0, 0.0, 0.0, 0.0],
        [float(i) for i in range(10)],
    ],
    lam=[0.5, 1.0, 0.5],
    bootstrap=[0.0, 4.0, 0.0],
    advantages=[
        [0.0, 0.75, 0.75, 0.0, 0.0, -3.0, -3.0, 0.0, 0.0, 0.0],
        [0.0, 0.0, 1.0, 1.0, -2.0, -2.0, -2.0, -2.0, -2.0, 0.0],
        [0.0] * 10,
    ],
    returns=[
        [9.0, 1.75, 1.75, 9.0, 9.0, 0.0, 0.0, 9.0, 9.0, 9.0],
        [0.0, 0.0, 3.0, 3.0, 4.0, 4.0, 4.0, 4.0, 4.0, 0.0],
        [float(i) for i in range(10)],
    ],
)


@pytest.mark.parametrize("id_dtype", [torch.long, torch.int32])
@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_turn_gae_hand_computed(backend, id_dtype):
    """Row 0: R0 = 0+1 = 1 (0.5, 0.25 and 2 sit on non-generated positions), V0 = 1; R1 = 0, V1 = 3.
    A1 = 0 + 0 - 3 = -3; A0 = 1 + 0.5*3 - 1 + 0.25*(-3) = 0.75. Returns A+V: 1.75 and 0.
    Row 1: R0 = 1, V0 = 2; R1 = 2, V1 = 6, bootstrap 4: A1 = 2+2-6 = -2, A0 = 1+3-2+0.5*(-2) = 1."""
    c = {k: torch.tensor(v) for k, v in TURN_CASE.items()}
    ids = c["turn_ids"].to(id_dtype)
    mask = (ids >= 0).float()
    with use_backend(backend):
        adv, ret = turn_gae_tensors(
            c["rewards"].float(),
            c["values"].float(),
            mask,
            ids,
            discount=0.5,
            lam=c["lam"].float(),
            bootstrap=c["bootstrap"].float(),
        )
    torch.testing.assert_close(adv, c["advantages"].float(), rtol=0, atol=0)
    torch.testing.assert_close(ret, c["returns"].float(), rtol=0, atol=0)
    ref_adv, ref_ret = ref_turn_gae(
        c["rewards"].float(), c["values"].float(), ids, 0.5, c["lam"].float(), c["bootstrap"].float()
    )
    torch.testing.assert_close(ref_adv, c["advantages"].float(), rtol=0, atol=0)
    torch.testing.assert_close(ref_ret, c["returns"].float(), rtol=0, atol=0)


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_edge_shapes(backend):
    with use_backend(backend):
        # T = 1: no step at all.
        adv, ret = token_gae_tensors(
            torch.ones(2, 1),
            torch.full((2, 1), 3.0),
            torch.ones(2, 1),
            discount=1.0,
            lam=torch.ones(2),
            bootstrap=torch.ones(2),
        )
        assert adv.tolist() == [[0.0], [0.0]] and ret.tolist() == [[3.0], [3.0]]
        # B = 0.
        adv, ret = token_gae_tensors(
            torch.zeros(0, 4),
            torch.zeros(0, 4),
            torch.zeros(0, 4),
            discount=1.0,
            lam=torch.zeros(0),
            bootstrap=torch.zeros(0),
        )
        assert adv.shape == (0, 4) and ret.shape == (0, 4)
        adv, ret = turn_gae_tensors(
            torch.zeros(0, 4),
            torch.zeros(0, 4),
            torch.zeros(0, 4),
            torch.zeros(0, 4, dtype=torch.long),
            discount=1.0,
            lam=torch.zeros(0),
            bootstrap=torch.zeros(0),
        )
        assert adv.shape == (0, 4)
        # No turns anywhere.
        v = torch.randn(3, 6)
        adv, ret = turn_gae_tensors(
            torch.randn(3, 6),
            v,
            torch.zeros(3, 6),
            torch.full((3, 6), -1),
            discount=0.9,
            lam=torch.ones(3),
            bootstrap=torch.ones(3),
        )
        assert torch.equal(adv, torch.zeros(3, 6)) and torch.equal(ret, v)


def test_non_float_inputs_are_accepted():
    """Integer rewards and bool masks are converted; results are float32."""
    c = {k: torch.tensor(v, dtype=torch.float32) for k, v in TOKEN_CASE.items()}
    for backend in CPU_BACKENDS:
        with use_backend(backend):
            adv, _ = token_gae_tensors(
                c["rewards"].long(),
                c["values"].double(),
                c["mask"].bool(),
                discount=0.5,
                lam=c["lam"],
                bootstrap=c["bootstrap"],
            )
        assert adv.dtype == torch.float32
        torch.testing.assert_close(adv, c["advantages"], rtol=0, atol=0)


# ---------------------------------------------------------------------------
# Property tests against the reference loops
# ---------------------------------------------------------------------------


@st.composite
def token_batches(draw):
    """Random masks (gaps and right padding), ragged lengths, discounts, lambdas, bootstraps."""
    n_rows = draw(st.integers(1, 6))
    n_pos = draw(st.integers(1, 40))
    seed = draw(st.integers(0, 2**31 - 1))
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, n_pos + 1, (n_rows,), generator=gen)
    keep = draw(st.sampled_from([1.0, 0.8, 0.4]))
    mask = (torch.rand(n_rows, n_pos, generator=gen) < keep) & (torch.arange(n_pos)[None] < lengths[:, None])
    discount = draw(st.sampled_from([0.0, 0.5, 0.9, 0.99, 1.0]))
    lam = torch.rand(n_rows, generator=gen)
    lam[torch.rand(n_rows, generator=gen) < 0.3] = draw(st.sampled_from([0.0, 1.0]))
    bootstrap = torch.randn(n_rows, generator=gen) * (torch.rand(n_rows, generator=gen) < 0.5)
    return dict(
        rewards=torch.randn(n_rows, n_pos, generator=gen),
        values=torch.randn(n_rows, n_pos, generator=gen),
        mask=mask.float(),
        discount=discount,
        lam=lam,
        bootstrap=bootstrap,
    )


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@HYP
@given(batch=token_batches())
def test_token_gae_matches_reference(backend, batch):
    inputs = {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
    with use_backend(backend):
        adv, ret = token_gae_tensors(
            inputs["rewards"],
            inputs["values"],
            inputs["mask"],
            discount=inputs["discount"],
            lam=inputs["lam"],
            bootstrap=inputs["bootstrap"],
        )
    ref_adv, ref_ret = ref_token_gae(
        batch["rewards"], batch["values"], batch["mask"], batch["discount"], batch["lam"], batch["bootstrap"]
    )
    torch.testing.assert_close(adv, ref_adv, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ret, ref_ret, rtol=1e-5, atol=1e-5)
    mask = batch["mask"]
    trailing = _trailing_masked(mask)
    assert torch.equal(adv[trailing], ref_adv[trailing])  # exactly 0 after the last step
    gaps = (mask == 0) & ~trailing
    # A masked gap carries the next step's advantage exactly.
    assert torch.equal(adv[gaps], _next_valid_value(adv, mask)[gaps])
    if backend == "numba":  # same float32 operations in the same order
        assert torch.equal(adv, ref_adv)
    for key, value in batch.items():  # inputs untouched
        if isinstance(value, torch.Tensor):
            assert torch.equal(inputs[key], value)


@st.composite
def turn_batches(draw):
    """Prompt, then turns with (possibly skipped) increasing ids and tool/env gaps, then padding."""
    n_rows = draw(st.integers(1, 5))
    n_pos = draw(st.integers(1, 48))
    seed = draw(st.integers(0, 2**31 - 1))
    gen = torch.Generator().manual_seed(seed)
    ids = torch.full((n_rows, n_pos), -1, dtype=torch.long)
    for b in range(n_rows):
        t = int(torch.randint(0, 6, (1,), generator=gen))  # prompt
        turn = int(torch.randint(0, 3, (1,), generator=gen))
        end = int(torch.randint(0, n_pos, (1,), generator=gen)) if n_pos > 1 else 0  # right padding
        while t < end:
            length = int(torch.randint(1, 7, (1,), generator=gen))
            ids[b, t : min(t + length, end)] = turn
            t += length + int(torch.randint(0, 4, (1,), generator=gen))  # tool/env gap (may be 0)
            turn += int(torch.randint(0, 3, (1,), generator=gen))  # same id again, next, or skip one
    ids[:, -1] = -1  # aligned: the last column never holds a generated token
    discount = draw(st.sampled_from([0.0, 0.7, 0.95, 1.0]))
    lam = torch.rand(n_rows, generator=gen)
    lam[torch.rand(n_rows, generator=gen) < 0.3] = draw(st.sampled_from([0.0, 1.0]))
    return dict(
        rewards=torch.randn(n_rows, n_pos, generator=gen),
        values=torch.randn(n_rows, n_pos, generator=gen),
        turn_ids=ids,
        discount=discount,
        lam=lam,
        bootstrap=torch.randn(n_rows, generator=gen) * (torch.rand(n_rows, generator=gen) < 0.5),
    )


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@HYP
@given(batch=turn_batches())
def test_turn_gae_matches_reference(backend, batch):
    inputs = {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
    mask = (batch["turn_ids"] >= 0).float()
    mask_in = mask.clone()
    with use_backend(backend):
        adv, ret = turn_gae_tensors(
            inputs["rewards"],
            inputs["values"],
            mask_in,
            inputs["turn_ids"],
            discount=inputs["discount"],
            lam=inputs["lam"],
            bootstrap=inputs["bootstrap"],
        )
    ref_adv, ref_ret = ref_turn_gae(
        batch["rewards"], batch["values"], batch["turn_ids"], batch["discount"], batch["lam"], batch["bootstrap"]
    )
    torch.testing.assert_close(adv, ref_adv, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ret, ref_ret, rtol=1e-5, atol=1e-5)
    off_turn = batch["turn_ids"] < 0
    assert torch.equal(adv[off_turn], torch.zeros_like(adv[off_turn]))  # exactly 0
    assert torch.equal(ret[off_turn], batch["values"][off_turn])  # exactly the values
    assert torch.equal(mask_in, mask)
    for key, value in batch.items():
        if isinstance(value, torch.Tensor):
            assert torch.equal(inputs[key], value)


@pytest.mark.skipif(len(CPU_BACKENDS) < 2, reason="needs two CPU backends")
@HYP
@given(batch=turn_batches())
def test_turn_backends_agree(batch):
    """The fused numba turn kernel and the scatter/gather torch path agree."""
    mask = (batch["turn_ids"] >= 0).float()
    outs = []
    for backend in CPU_BACKENDS:
        with use_backend(backend):
            outs.append(
                turn_gae_tensors(
                    batch["rewards"],
                    batch["values"],
                    mask,
                    batch["turn_ids"],
                    discount=batch["discount"],
                    lam=batch["lam"],
                    bootstrap=batch["bootstrap"],
                )
            )
    for adv, ret in outs[1:]:
        torch.testing.assert_close(adv, outs[0][0], rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(ret, outs[0][1], rtol=1e-6, atol=1e-6)


@pytest.mark.skipif("numba" not in CPU_BACKENDS, reason="needs numba")
def test_numba_parallel_kernels_on_a_large_batch():
    """Batches above PARALLEL_MIN_ELEMENTS use the parallel compilations; same answers."""
    from areal_adv.trainer.ppo.kernels.numba_cpu import PARALLEL_MIN_ELEMENTS

    n_rows, n_pos = 67, 4096
    assert n_rows * n_pos >= PARALLEL_MIN_ELEMENTS
    gen = torch.Generator().manual_seed(3)
    lengths = torch.randint(0, n_pos + 1, (n_rows,), generator=gen)
    inside = torch.arange(n_pos)[None] < lengths[:, None]
    mask = ((torch.rand(n_rows, n_pos, generator=gen) < 0.8) & inside).float()
    r, v = torch.randn(n_rows, n_pos, generator=gen), torch.randn(n_rows, n_pos, generator=gen)
    lam, boot = torch.rand(n_rows, generator=gen), torch.randn(n_rows, generator=gen)
    with use_backend("numba"):
        adv, ret = token_gae_tensors(r, v, mask, discount=0.99, lam=lam, bootstrap=boot)
    ref_adv, ref_ret = ref_token_gae(r, v, mask, 0.99, lam, boot)
    assert torch.equal(adv, ref_adv) and torch.equal(ret, ref_ret)
    new_turn = torch.rand(n_rows, n_pos, generator=gen) < 0.01
    ids = torch.where(mask.bool(), torch.cumsum(new_turn.long(), 1), -1)
    ids[:, -1] = -1
    tmask = (ids >= 0).float()
    outs = {}
    for backend in CPU_BACKENDS:
        with use_backend(backend):
            outs[backend] = turn_gae_tensors(r, v, tmask, ids, discount=0.99, lam=lam, bootstrap=boot)
    for adv_b, ret_b in outs.values():
        torch.testing.assert_close(adv_b, outs["numba"][0], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(ret_b, outs["numba"][1], rtol=1e-5, atol=1e-5)


@pytest.mark.skipif("numba" not in CPU_BACKENDS, reason="needs numba")
def test_numba_kernel_variants_do_not_share_a_cache_entry():
    """numba's disk cache keys by Python function and signature, not by `parallel`:
    the serial and parallel kernels must be distinct functions or one would load the other."""
    from areal_adv.trainer.ppo.kernels.numba_cpu import _KERNELS

    names = {kernel.py_func.__qualname__ for kernel in _KERNELS.values()}
    assert len(names) == len(_KERNELS) == 4


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("backend", ["triton", "torch"])
def test_cuda_backends_match_reference(backend):
    if backend not in available_backends("cuda"):
        pytest.skip(f"{backend} not available on CUDA")
    gen = torch.Generator().manual_seed(0)
    for n_rows, n_pos in [(3, 1), (5, 7), (17, 513), (64, 2100)]:
        r, v = torch.randn(n_rows, n_pos, generator=gen), torch.randn(n_rows, n_pos, generator=gen)
        lengths = torch.randint(0, n_pos + 1, (n_rows,), generator=gen)
        inside = torch.arange(n_pos)[None] < lengths[:, None]
        mask = ((torch.rand(n_rows, n_pos, generator=gen) < 0.7) & inside).float()
        lam, boot = torch.rand(n_rows, generator=gen), torch.randn(n_rows, generator=gen)
        ref_adv, ref_ret = ref_token_gae(r, v, mask, 0.97, lam, boot)
        with use_backend(backend):
            adv, ret = token_gae_tensors(
                r.cuda(), v.cuda(), mask.cuda(), discount=0.97, lam=lam.cuda(), bootstrap=boot.cuda()
            )
        assert adv.device.type == "cuda"
        torch.testing.assert_close(adv.cpu(), ref_adv, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(ret.cpu(), ref_ret, rtol=1e-4, atol=1e-4)
        trailing = _trailing_masked(mask)
        assert torch.equal(adv.cpu()[trailing], ref_adv[trailing])
        new_turn = (torch.rand(n_rows, n_pos, generator=gen) < 0.05).long()
        ids = torch.where(mask.bool(), torch.cumsum(new_turn, 1), -1)
        ids[:, -1] = -1
        t_ref = ref_turn_gae(r, v, ids, 0.97, lam, boot) if n_pos <= 513 else None
        with use_backend(backend):
            t_adv, t_ret = turn_gae_tensors(
                r.cuda(),
                v.cuda(),
                (ids >= 0).float().cuda(),
                ids.cuda(),
                discount=0.97,
                lam=lam.cuda(),
                bootstrap=boot.cuda(),
            )
        if t_ref is not None:
            torch.testing.assert_close(t_adv.cpu(), t_ref[0], rtol=1e-4, atol=1e-4)
            torch.testing.assert_close(t_ret.cpu(), t_ref[1], rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------------------
# Backend selection and argument errors
# ---------------------------------------------------------------------------


def test_backend_env_is_validated():
    x = torch.zeros(1, 3)
    with use_backend("fortran"), pytest.raises(ValueError, match=r"AREAL_GAE_BACKEND='fortran'"):
        token_gae_tensors(x, x, x, discount=1.0, lam=torch.ones(1), bootstrap=torch.zeros(1))
    with use_backend("triton"), pytest.raises(RuntimeError, match="cannot run on device cpu"):
        token_gae_tensors(x, x, x, discount=1.0, lam=torch.ones(1), bootstrap=torch.zeros(1))


def test_estimator_argument_errors():
    x = torch.zeros(2, 3)
    with pytest.raises(ValueError, match=r"values has shape \(2, 4\)"):
        token_gae_tensors(x, torch.zeros(2, 4), x, discount=1.0, lam=torch.ones(2), bootstrap=torch.zeros(2))
    with pytest.raises(ValueError, match=r"lam has shape \(3,\), expected \[2\]"):
        token_gae_tensors(x, x, x, discount=1.0, lam=torch.ones(3), bootstrap=torch.zeros(2))
    with pytest.raises(ValueError, match="discount is nan"):
        token_gae_tensors(x, x, x, discount=math.nan, lam=torch.ones(2), bootstrap=torch.zeros(2))
    with pytest.raises(TypeError, match="rewards is list"):
        token_gae_tensors([[0.0]], x, x, discount=1.0, lam=torch.ones(2), bootstrap=torch.zeros(2))


# ---------------------------------------------------------------------------
# Turn helpers
# ---------------------------------------------------------------------------

RAW_MASK = torch.tensor([[0, 0, 1, 1, 0, 1, 1, 0], [0, 1, 1, 1, 1, 0, 0, 0]])
RAW_IDS = torch.tensor([[-1, -1, 0, 0, -1, 3, 3, -1], [-1, 0, 0, 1, 1, -1, -1, -1]])


def test_validate_turn_ids_accepts_valid_layouts():
    validate_turn_ids(RAW_IDS, RAW_MASK)
    validate_turn_ids(RAW_IDS.int(), RAW_MASK.bool())


def test_count_turns():
    assert count_turns(RAW_IDS).tolist() == [2, 2]
    assert count_turns(torch.full((2, 4), -1)).tolist() == [0, 0]
    assert count_turns(torch.tensor([[0, 0, 0, 5]])).tolist() == [2]
    assert count_turns(RAW_IDS).dtype == torch.long


@pytest.mark.parametrize(
    "ids, mask, pattern",
    [
        (RAW_IDS.float(), RAW_MASK, r"turn_ids: got dtype torch.float32, expected an integer dtype"),
        (RAW_IDS.bool(), RAW_MASK, r"turn_ids: got dtype torch.bool"),
        (RAW_IDS[:, :5], RAW_MASK, r"turn_ids: got shape \(2, 5\), expected the loss_mask shape \(2, 8\)"),
        ([[0]], RAW_MASK, r"turn_ids: got list, expected an integer torch.Tensor"),
    ],
)
def test_validate_turn_ids_type_errors(ids, mask, pattern):
    with pytest.raises(ValueError, match=pattern):
        validate_turn_ids(ids, mask)


def _with(ids: torch.Tensor, row: int, pos: int, value: int) -> torch.Tensor:
    out = ids.clone()
    out[row, pos] = value
    return out


def test_validate_turn_ids_minus_one_on_generated_token():
    with pytest.raises(ValueError) as err:
        validate_turn_ids(_with(RAW_IDS, 1, 2, -1), RAW_MASK)
    msg = str(err.value)
    assert msg.startswith("turn_ids:") and "row 1, position 2" in msg
    assert "turn id -1" in msg and "expected a turn id >= 0" in msg


def test_validate_turn_ids_does_not_read_positions_off_generated_tokens():
    """AReaL's `concat_padded_tensors` pads turn ids with 0: off generated tokens any value is accepted,
    also one below an earlier turn (it is no turn at all)."""
    off = RAW_MASK == 0
    assert bool(off.any())
    for value in (0, 7, -5):
        validate_turn_ids(torch.where(off, torch.full_like(RAW_IDS, value), RAW_IDS), RAW_MASK)
    assert torch.equal(canonical_turn_ids(torch.where(off, 0, RAW_IDS), RAW_MASK), torch.where(off, -1, RAW_IDS))


def test_validate_turn_ids_decreasing():
    with pytest.raises(ValueError) as err:
        validate_turn_ids(_with(RAW_IDS, 0, 6, 1), RAW_MASK)
    msg = str(err.value)
    assert "turn_ids: row 0 decreases from turn id 3 (position 5) to 1 (position 6)" in msg
    assert "non-decreasing" in msg


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_turn_gae_rejects_inconsistent_aligned_turn_ids(backend):
    ids = torch.tensor([[0, 0, -1, 1, 1, -1]])
    mask = (ids >= 0).float()
    x = torch.zeros(1, 6)
    kw = dict(discount=1.0, lam=torch.ones(1), bootstrap=torch.zeros(1))
    with use_backend(backend):
        with pytest.raises(ValueError, match=r"turn_ids \(aligned\): row 0, position 3 is a generated token"):
            turn_gae_tensors(x, x, mask, _with(ids, 0, 3, -1), **kw)
        with pytest.raises(ValueError, match=r"turn_ids \(aligned\): row 0, position 2 is not a generated"):
            turn_gae_tensors(x, x, mask, _with(ids, 0, 2, 0), **kw)
        with pytest.raises(ValueError, match=r"turn_ids \(aligned\): row 0 decreases from turn id 1"):
            turn_gae_tensors(x, x, mask, _with(ids, 0, 4, 0), **kw)
        with pytest.raises(ValueError, match=r"turn_ids \(aligned\): got dtype torch.float32"):
            turn_gae_tensors(x, x, mask, ids.float(), **kw)
        # The last column is never a step: a wrapped-around mask bit there is fine.
        turn_gae_tensors(x, x, torch.cat([mask[:, :-1], torch.ones(1, 1)], 1), ids, **kw)
        # AReaL's zero padding, in the kernels' form: canonical_turn_ids gives what -1 gives.
        r, v = torch.randn(1, 6), torch.randn(1, 6)
        padded = canonical_turn_ids(torch.where(mask == 0, torch.zeros_like(ids), ids), mask)
        for got, want in zip(turn_gae_tensors(r, v, mask, padded, **kw), turn_gae_tensors(r, v, mask, ids, **kw)):
            assert torch.equal(got, want)


# ---------------------------------------------------------------------------
# GAE lambda
# ---------------------------------------------------------------------------

ALIGNED_MASK = torch.tensor([[1, 1, 0, 1, 1, 1, 0, 0], [1, 1, 1, 0, 0, 0, 0, 0], [0] * 8])
ALIGNED_IDS = torch.tensor([[0, 0, -1, 2, 2, 2, -1, -1], [0, 0, 0, -1, -1, -1, -1, -1], [-1] * 8])


def test_alias_is_the_same_type():
    assert GAELambdaInputs is GAELambdaContext


def test_the_context_is_areal_s_dict_and_reads_by_attribute_too():
    """AReaL 2's functions index the context (`ctx["timestep_lengths"]`), ours read attributes: both work."""
    seen = {}

    def areal_style(context, *, scale):
        seen["keys"] = list(context)
        seen["plain"] = dict(context)
        return torch.full_like(context["timestep_lengths"], scale, dtype=torch.float32)

    lam = compute_gae_lambda(
        areal_style,
        loss_mask=ALIGNED_MASK,
        turn_ids=ALIGNED_IDS,
        timestep_unit="turn",
        gae_lambda_kwargs={"scale": 0.5},
    )
    assert lam.tolist() == [0.5] * 3
    assert seen["keys"] == ["effective_token_lengths", "turn_counts", "timestep_lengths"]  # AReaL's keys, no more
    assert seen["plain"]["timestep_lengths"] is seen["plain"]["turn_counts"]  # the chosen unit's own tensor
    ctx = GAELambdaContext(
        effective_token_lengths=torch.tensor([3]), turn_counts=torch.tensor([1]), timestep_lengths=torch.tensor([3])
    )
    assert isinstance(ctx, dict) and ctx.timestep_lengths is ctx["timestep_lengths"] and ctx.timestep_unit is None
    assert ctx == ctx and ctx != GAELambdaContext(**ctx)  # identity: tensors have no single truth value
    for edit in (lambda c: c.__setitem__("turn_counts", 0), lambda c: c.update({}), lambda c: c.pop("turn_counts")):
        with pytest.raises(TypeError, match="read-only"):
            edit(ctx)
    with pytest.raises(TypeError, match="read-only"):
        ctx.timestep_unit = "turn"
    copied = copy.deepcopy(ctx)
    assert copied.timestep_unit is None and torch.equal(copied["timestep_lengths"], ctx["timestep_lengths"])
    assert pickle.loads(pickle.dumps(ctx))["turn_counts"].tolist() == [1]


def test_a_function_written_for_attributes_runs_on_areal_s_plain_dict_through_of():
    """Inside AReaL's own actor the context is a plain dict; `GAELambdaContext.of` makes it ours (unit included)."""

    def ours(ctx):
        ctx = GAELambdaContext.of(ctx)
        return torch.where(ctx.timestep_lengths > 2, 0.9, 0.5) if ctx.timestep_unit == "token" else ctx.turn_counts

    tokens = torch.tensor([1, 5])
    turns = torch.tensor([1, 2])
    areal_token_ctx = {"effective_token_lengths": tokens, "turn_counts": turns, "timestep_lengths": tokens}
    assert ours(areal_token_ctx).tolist() == pytest.approx([0.5, 0.9])
    assert GAELambdaContext.of({**areal_token_ctx, "timestep_lengths": turns}).timestep_unit == "turn"
    assert GAELambdaContext.of({**areal_token_ctx, "timestep_lengths": turns.clone()}).timestep_unit is None
    with pytest.raises(KeyError, match=r"lacks \['turn_counts'\]"):
        GAELambdaContext.of({"effective_token_lengths": tokens, "timestep_lengths": tokens})


def test_compute_gae_lambda_constant():
    lam = compute_gae_lambda(0.95, loss_mask=ALIGNED_MASK, timestep_unit="token")
    assert lam.dtype == torch.float32 and lam.tolist() == pytest.approx([0.95] * 3)
    assert compute_gae_lambda(1, loss_mask=ALIGNED_MASK, timestep_unit="token").tolist() == [1.0] * 3


@pytest.mark.parametrize("unit, expected", [("token", [5, 3, 0]), ("turn", [2, 1, 0])])
def test_compute_gae_lambda_builds_the_context(unit, expected):
    seen = {}

    def fn(ctx, scale=1.0):
        seen["ctx"] = ctx
        return torch.full(ctx.timestep_lengths.shape, 0.5 * scale, dtype=torch.float64)

    lam = compute_gae_lambda(
        fn, loss_mask=ALIGNED_MASK, turn_ids=ALIGNED_IDS, timestep_unit=unit, gae_lambda_kwargs={"scale": 0.5}
    )
    ctx = seen["ctx"]
    assert ctx.effective_token_lengths.tolist() == [5, 3, 0]
    assert ctx.turn_counts.tolist() == [2, 1, 0]
    assert ctx.timestep_lengths.tolist() == expected
    assert ctx.timestep_unit == unit
    assert lam.dtype == torch.float32 and lam.tolist() == [0.25] * 3


def test_compute_gae_lambda_without_turn_ids_counts_one_turn_per_nonempty_row():
    seen = {}

    def fn(ctx):
        seen["ctx"] = ctx
        return 1.0  # a number is broadcast

    lam = compute_gae_lambda(fn, loss_mask=ALIGNED_MASK, timestep_unit="token")
    assert seen["ctx"].turn_counts.tolist() == [1, 1, 0]
    assert lam.tolist() == [1.0, 1.0, 1.0]


def _lambda_error(gae_lambda, *, unit="token", turn_ids=None, kwargs=None) -> str:
    with pytest.raises(ValueError) as err:
        compute_gae_lambda(
            gae_lambda,
            loss_mask=ALIGNED_MASK,
            turn_ids=turn_ids,
            timestep_unit=unit,
            gae_lambda_kwargs=kwargs,
            source="my.pkg.lam_fn",
        )
    return str(err.value)


def test_compute_gae_lambda_errors():
    msg = _lambda_error(math.nan)
    assert "my.pkg.lam_fn" in msg and "nan" in msg and "[0, 1]" in msg
    msg = _lambda_error(1.5)
    assert "my.pkg.lam_fn" in msg and "1.5" in msg and "[0, 1]" in msg
    msg = _lambda_error(lambda ctx: torch.tensor([0.5, float("nan"), 0.5]))
    assert "my.pkg.lam_fn" in msg and "nan" in msg and "row 1" in msg and "[0, 1]" in msg
    msg = _lambda_error(lambda ctx: torch.tensor([0.5, -0.1, 0.5]))
    assert "my.pkg.lam_fn" in msg and "row 1" in msg
    msg = _lambda_error(lambda ctx: torch.ones(2))
    assert "my.pkg.lam_fn" in msg and "shape (2,)" in msg and "[3]" in msg
    msg = _lambda_error(lambda ctx: torch.ones(3, 1))
    assert "shape (3, 1)" in msg
    msg = _lambda_error(lambda ctx: [0.5, 0.5, 0.5])
    assert "my.pkg.lam_fn" in msg and "returned list" in msg and "torch.Tensor of shape [3]" in msg
    msg = _lambda_error(lambda ctx: torch.ones(3, dtype=torch.long))
    assert "my.pkg.lam_fn" in msg and "torch.int64" in msg and "floating-point" in msg
    msg = _lambda_error(lambda ctx: 2.0)
    assert "my.pkg.lam_fn" in msg and "2.0" in msg
    msg = _lambda_error(0.9, unit="turn")
    assert "my.pkg.lam_fn" in msg and "needs turn_ids" in msg
    msg = _lambda_error(0.9, unit="step")
    assert "my.pkg.lam_fn" in msg and "'step'" in msg
    msg = _lambda_error(0.9, kwargs={"alpha": 1})
    assert "my.pkg.lam_fn" in msg and "alpha" in msg
    msg = _lambda_error("vapo")
    assert "my.pkg.lam_fn" in msg and "'vapo'" in msg
    msg = _lambda_error([0.9, 0.9, 0.9])
    assert "my.pkg.lam_fn" in msg and "list" in msg
    # Wrong device cannot be produced on a CPU-only machine; covered by the same check.


def test_compute_gae_lambda_names_the_source_in_the_message_on_exceptions():
    from areal_adv.trainer.ppo.gae import LambdaFunctionError

    def broken(ctx):
        raise KeyError("boom")

    def exits(ctx):
        raise SystemExit(3)

    with pytest.raises(LambdaFunctionError) as err:
        compute_gae_lambda(broken, loss_mask=ALIGNED_MASK, timestep_unit="token", source="my.pkg.broken")
    assert str(err.value).startswith("my.pkg.broken: the GAE lambda function raised KeyError: 'boom'")
    assert isinstance(err.value.__cause__, KeyError)
    with pytest.raises(LambdaFunctionError, match=r"my\.pkg\.exits: the GAE lambda function called sys\.exit\(3\)"):
        compute_gae_lambda(exits, loss_mask=ALIGNED_MASK, timestep_unit="token", source="my.pkg.exits")


def test_compute_gae_lambda_does_not_modify_inputs():
    mask, ids = ALIGNED_MASK.clone(), ALIGNED_IDS.clone()

    def fn(ctx):
        return torch.full(ctx.timestep_lengths.shape, 0.5)

    compute_gae_lambda(fn, loss_mask=mask, turn_ids=ids, timestep_unit="turn")
    assert torch.equal(mask, ALIGNED_MASK) and torch.equal(ids, ALIGNED_IDS)


def test_public_api_lists_the_contract():
    for name in (
        "token_gae_tensors",
        "turn_gae_tensors",
        "validate_turn_ids",
        "count_turns",
        "compute_gae_lambda",
        "GAELambdaContext",
        "GAELambdaInputs",
    ):
        assert name in gae.__all__
