"""The fused CPU pipeline (areal_adv/trainer/ppo/fused.py, kernels/fused_cpu.py) equals the tensor path.

Every batch here is fused-eligible (no process rewards, int64 masks, float32
fields); `AREAL_FUSED_ADVANTAGE=on` makes a silent fallback to the tensor
path an error, and `off` forces the tensor path for the comparison. With
every KL estimator the outputs must be bit for bit equal, on extreme finite
inputs too (or both paths raise the same NonFiniteOutputError). Both are also
checked against the plain-loop reference of the spec (advantage_reference.py).
"""

from __future__ import annotations

import dataclasses
import os
from contextlib import contextmanager

import numpy as np
import pytest
import torch
from advantage_reference import ref_pipeline
from batch_factory import make_batch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from test_advantage_bad_inputs import LEGACY_CASES as CASES
from test_advantage_default import OUT_KEYS, assert_same, configs, split_counterexample_config

from areal_adv.api.cli_args import AdvantageConfig, NormConfig, PPOActorConfig, StageSpec
from areal_adv.trainer.ppo import fused
from areal_adv.trainer.ppo.actor import PPOActor
from areal_adv.trainer.ppo.kernels import fused_cpu
from areal_adv.trainer.ppo.kernels.numba_cpu import NUMBA_AVAILABLE, PARALLEL_MIN_ELEMENTS
from areal_adv.trainer.ppo.output_guard import NonFiniteOutputError
from areal_adv.utils import kl as kl_module
from areal_adv.utils.kl import KLEstimator


def numba_threads() -> int:
    """numba's thread pool size (0 without numba)."""
    if not NUMBA_AVAILABLE:
        return 0
    import numba

    return numba.config.NUMBA_NUM_THREADS


pytestmark = pytest.mark.skipif(not NUMBA_AVAILABLE, reason="the fused pipeline needs numba")

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@contextmanager
def fused_mode(mode: str):
    old = os.environ.get(fused.FUSED_ENV)
    os.environ[fused.FUSED_ENV] = mode
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(fused.FUSED_ENV, None)
        else:
            os.environ[fused.FUSED_ENV] = old


def both_paths(cfg: PPOActorConfig, batch, meta, **call):
    """(fused outputs, tensor-path outputs) of one actor on one batch."""
    actor = PPOActor(cfg)
    with fused_mode("on"):
        fast = actor.compute_advantages(batch, meta, **call)
    with fused_mode("off"):
        plain = actor.compute_advantages(batch, meta, **call)
    return fast, plain


def assert_identical(fast, plain, *, exact: bool):
    assert fast.keys() == plain.keys()
    for key in fast:
        a, b = fast[key], plain[key]
        if not torch.is_tensor(a):
            assert a is b or a == b, key
            continue
        assert a.dtype == b.dtype and a.shape == b.shape, key
        if exact or a.dtype == torch.bool:
            assert torch.equal(a, b), f"{key}: max |diff| {(a.double() - b.double()).abs().max()}"
        else:
            torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6, msg=lambda m, key=key: f"{key}: {m}")


def snapshot(batch):
    return {k: (v.clone() if torch.is_tensor(v) else v) for k, v in batch.items()}


# ---------------------------------------------------------------------------
# Equality
# ---------------------------------------------------------------------------


@SETTINGS
@given(
    cfg=configs(),
    seed=st.integers(0, 10_000),
    integer=st.booleans(),
    drop=st.sampled_from([(), ("values",), ("ref_logp", "is_truncated"), ("turn_ids",), ("values", "ref_logp")]),
)
def test_fused_equals_tensor_path_and_reference(cfg, seed, integer, drop):
    if "turn_ids" in drop:
        cfg.gae_timestep_unit = "token"
    batch, meta = make_batch(seed, integer_rewards=integer, drop=("token_rewards", *drop))
    before = snapshot(batch)
    fast, plain = both_paths(cfg, batch, meta)
    assert_identical(fast, plain, exact=True)
    assert_same(fast, ref_pipeline(batch, meta, cfg))
    for key, value in before.items():  # the caller's batch is untouched
        assert not torch.is_tensor(value) or torch.equal(batch[key], value), key


@SETTINGS
@given(cfg=configs(), seed=st.integers(0, 10_000), explicit=st.booleans())
@example(cfg=split_counterexample_config(), seed=376, explicit=False)
def test_fused_split_rollouts(cfg, seed, explicit):
    batch, meta = make_batch(seed, split=True, explicit_refs=explicit, drop=("token_rewards",))
    if cfg.overlong_reward_penalty and not explicit:
        cfg.overlong_reward_penalty = False
    fast, plain = both_paths(cfg, batch, meta)
    assert_identical(fast, plain, exact=True)
    assert_same(fast, ref_pipeline(batch, meta, cfg))


#: Finite float32 values at and near the ends of the range, where an unguarded exp or difference overflows.
EXTREMES = (3e38, -3e38, 1e30, -1e30, 88.7, -88.7, 25.0, -25.0, 1e-38, 0.0)


def outcome(actor: PPOActor, batch, meta, mode: str):
    """The outputs, or the NonFiniteOutputError raised instead."""
    with fused_mode(mode):
        try:
            return actor.compute_advantages(batch, meta)
        except NonFiniteOutputError as err:
            return err


def assert_same_outcome(fast, plain):
    """Both paths raise the same NonFiniteOutputError, or both return finite outputs, bit for bit equal."""
    if isinstance(fast, Exception) or isinstance(plain, Exception):
        assert isinstance(fast, NonFiniteOutputError) and isinstance(plain, NonFiniteOutputError), (fast, plain)
        assert str(fast) == str(plain)
        return
    assert_identical(fast, plain, exact=True)
    for key, value in fast.items():
        if torch.is_tensor(value) and value.is_floating_point():
            assert bool(torch.isfinite(value).all()), key


#: (every generated token's log-prob, every ref_logp): None keeps the batch's; opposite ends overflow the log-ratio.
WHOLE_FIELDS = [(None, None), (-3e38, 3e38), (3e38, -3e38), (-3e38, None), (None, 3e38), (3e38, 3e38)]


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    cfg=configs(),
    seed=st.integers(0, 10_000),
    kl_estimator=st.sampled_from(["k1", "k2", "k3"]),
    kl_ctl=st.sampled_from([0.0, 0.1, 3.0, 1e37]),
    whole=st.sampled_from(WHOLE_FIELDS),
    pokes=st.lists(
        st.tuples(
            st.sampled_from(["logprobs", "ref_logp", "values", "prox_logp"]),
            st.floats(0, 1),
            st.floats(0, 1),
            st.sampled_from(EXTREMES),
        ),
        max_size=6,
    ),
)
@example(cfg=PPOActorConfig(), seed=3, kl_estimator="k3", kl_ctl=0.1, whole=(-3e38, 3e38), pokes=[])  # issue 21
def test_fused_equals_tensor_on_extreme_finite_inputs(cfg, seed, kl_estimator, kl_ctl, whole, pokes):
    """Every finite input, every KL estimator: the same bits, or the same NonFiniteOutputError (issue 21)."""
    cfg.kl_estimator, cfg.kl_ctl = kl_estimator, kl_ctl
    batch, meta = make_batch(seed, drop=("token_rewards",))
    batch["prox_logp"] = -torch.rand_like(batch["logprobs"])
    generated, ref = whole
    if generated is not None:
        mask = batch["loss_mask"].bool()
        batch["logprobs"] = torch.where(mask, torch.full_like(batch["logprobs"], generated), batch["logprobs"])
    if ref is not None:
        batch["ref_logp"] = torch.full_like(batch["ref_logp"], ref)
    for field, row, col, value in pokes:
        n_rows, n_pos = batch[field].shape
        _poke(batch, field, min(int(row * n_rows), n_rows - 1), min(int(col * n_pos), n_pos - 1), value)
    actor = PPOActor(cfg)
    assert_same_outcome(outcome(actor, batch, meta, "on"), outcome(actor, batch, meta, "off"))


@pytest.mark.parametrize("unit", ["token", "turn"])
@pytest.mark.parametrize("kl_estimator", ["k1", "k2", "k3"])
def test_extreme_log_probs_give_finite_clamped_kl_on_both_paths(unit, kl_estimator):
    """Issue 21: logprobs -3e38 on generated tokens, ref_logp 3e38, kl_ctl 0.1: k3 gave NaN advantages on the
    fused path, silently. The log-ratio overflows to -inf; every estimator clamps it to +-10 first."""
    batch, meta = make_batch(3, drop=("token_rewards",))
    generated = batch["loss_mask"].bool()
    batch["logprobs"] = torch.where(generated, torch.full_like(batch["logprobs"], -3e38), batch["logprobs"])
    batch["ref_logp"] = torch.full_like(batch["ref_logp"], 3e38)
    cfg = PPOActorConfig(kl_estimator=kl_estimator, kl_ctl=0.1, gae_timestep_unit=unit)
    fast, plain = both_paths(cfg, batch, meta)
    assert_identical(fast, plain, exact=True)
    assert bool(torch.isfinite(fast["advantages"]).all())
    kl = fast["kl_rewards"][fast["loss_mask"].bool()]
    assert bool((kl.abs() <= 1.0).all()) and bool((kl != 0).any())


def test_kernel_k3_is_the_tensor_paths_bits_on_a_dense_float32_grid():
    """Every 997th float32 bit pattern of |log-ratio| <= 25 (both signs): the kernels' KL rewards = KLEstimator's,
    in its torch operations (other devices) and its compiled loop (CPU tensors)."""
    top = int(np.array([25.0], dtype=np.float32).view(np.int32)[0])
    bits = np.arange(0, top + 1, 997, dtype=np.int32)
    ratios = torch.from_numpy(np.concatenate([bits.view(np.float32), -bits.view(np.float32)])).view(2, -1)
    n_rows, n_pos = ratios.shape
    ones = torch.ones(n_rows, n_pos, dtype=torch.long)
    ones[:, 0] = 0  # no generated token at position 0
    logprobs = torch.roll(ratios, 1, dims=1)  # raw token t+1 lands on aligned position t
    inputs = fused_cpu.FusedInputs(
        torch.ones_like(ones),
        ones,
        logprobs,
        None,
        None,
        None,
        None,
        torch.zeros(n_rows),
        torch.ones(n_rows, dtype=torch.bool),
    )
    options = fused_cpu.FusedOptions("token", False, False, "k3", 1.0, 1.0, torch.ones(n_rows), False)
    kernel = -fused_cpu.run_fused(inputs, options).kl_rewards[:, :-1]
    for k3 in (KLEstimator("k3"), lambda r, _: kl_module.k3_bounded_torch(r).clamp_(-10, 10)):
        want = k3(ratios[:, :-1], torch.zeros_like(ratios[:, :-1]))
        assert torch.equal(kernel.view(torch.int32), want.view(torch.int32))


@pytest.mark.parametrize("unit", ["token", "turn"])
def test_a_non_finite_result_raises_on_the_fused_path_too(unit):
    """kl_ctl 1e38 times the clamped KL leaves float32: the output guard reports it on both paths."""
    batch, meta = make_batch(3, drop=("token_rewards",))
    batch["ref_logp"] = batch["logprobs"] - 5.0
    cfg = PPOActorConfig(kl_estimator="k3", kl_ctl=1e38, gae_timestep_unit=unit)
    for mode in ("on", "off"):
        with fused_mode(mode), pytest.raises(NonFiniteOutputError, match=r"actor\.kl_ctl=1e\+38"):
            PPOActor(cfg).compute_advantages(batch, meta)


@pytest.mark.parametrize("decoupled,recompute", [(False, False), (False, True), (True, False), (True, True)])
@pytest.mark.parametrize("unit", ["token", "turn"])
def test_fused_logprob_modes_and_mopd(decoupled, recompute, unit):
    cfg = PPOActorConfig(
        use_decoupled_loss=decoupled,
        recompute_logprob=recompute,
        kl_ctl=0.2,
        gae_timestep_unit=unit,
        adv_norm=NormConfig(),
    )
    batch, meta = make_batch(11, drop=("token_rewards",))
    batch["prox_logp"] = -torch.rand_like(batch["logprobs"])
    batch["mopd_teacher_logp_sum"] = torch.zeros(batch["rewards"].shape[0])
    fast, plain = both_paths(cfg, batch, meta)
    assert_identical(fast, plain, exact=True)
    assert_same(fast, ref_pipeline(batch, meta, cfg))
    behaviour = torch.roll(batch["logprobs"], -1, -1) * fast["loss_mask"]
    assert torch.equal(fast["mopd_behavior_logprobs"], behaviour)
    assert fast["mopd_behavior_logprobs"].data_ptr() != fast["logprobs"].data_ptr()  # its own tensor
    if decoupled:  # the caller's values in a tensor of its own (issue 14: no output aliases the batch)
        assert torch.equal(fast["prox_logp"], batch["prox_logp"])
        assert fast["prox_logp"].untyped_storage().data_ptr() != batch["prox_logp"].untyped_storage().data_ptr()
    else:
        assert fast["prox_logp"] is fast["logprobs"]


@pytest.mark.parametrize("unit", ["token", "turn"])
@pytest.mark.parametrize("n_rows", [1, 2, 7])
def test_fused_tiny_and_odd_batches(unit, n_rows):
    """Rows are processed in pairs for token GAE: an odd batch's last row runs twice."""
    batch, meta = make_batch(5, n_groups=n_rows, max_group=1, drop=("token_rewards",), T=3)
    cfg = PPOActorConfig(
        gae_timestep_unit=unit, discount=0.9, gae_lambda=0.8, adv_norm=NormConfig(mean_level="group", std_level="batch")
    )
    fast, plain = both_paths(cfg, batch, meta)
    assert_identical(fast, plain, exact=True)


@pytest.mark.parametrize("unit", ["token", "turn"])
def test_fused_parallel_kernels_on_a_large_batch(unit):
    """A batch above PARALLEL_MIN_ELEMENTS runs the parallel kernels (the others run the serial ones)."""
    batch, meta = make_batch(3, n_groups=80, max_group=3, max_turns=4, T=3400, drop=("token_rewards",))
    assert batch["input_ids"].numel() >= PARALLEL_MIN_ELEMENTS
    cfg = PPOActorConfig(
        gae_timestep_unit=unit,
        reward_norm=NormConfig(mean_level="group", std_level="group"),
        adv_norm=NormConfig(),
        discount=0.99,
        gae_lambda=0.95,
    )
    fast, plain = both_paths(cfg, batch, meta)
    assert_identical(fast, plain, exact=True)


@pytest.mark.skipif(not NUMBA_AVAILABLE or numba_threads() < 2, reason="needs numba with two threads")
def test_one_numba_thread_takes_the_serial_drivers_with_the_same_bits(monkeypatch):
    """With one numba thread a large batch runs the serial drivers; the outputs equal the parallel ones."""
    import numba

    from areal_adv.trainer.ppo.kernels import numba_cpu
    from areal_adv.utils import norm_kernels

    batch, meta = make_batch(3, n_groups=80, max_group=3, max_turns=4, T=3400, drop=("token_rewards",))
    n_rows, n_pos = batch["attention_mask"].shape
    cfg = PPOActorConfig(
        gae_timestep_unit="turn",
        reward_norm=NormConfig(mean_level="group", std_level="group"),
        adv_norm=NormConfig(),
        discount=0.99,
        gae_lambda=0.95,
    )
    old = numba.get_num_threads()  # an in-process trainer run earlier in the session may have set 1 thread
    numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
    try:
        assert numba_cpu.use_parallel(n_rows, n_rows * n_pos)
        with fused_mode("on"):
            parallel = PPOActor(cfg).compute_advantages(batch, meta)
        numba.set_num_threads(1)
        assert not numba_cpu.use_parallel(n_rows, n_rows * n_pos)
        calls = []
        for table in (norm_kernels._PASSES, fused_cpu._KERNELS):  # no parallel driver may run
            for key in [k for k in table if k[1]]:
                monkeypatch.setitem(table, key, lambda *a, _k=key: calls.append(_k))
        with fused_mode("on"):
            serial = PPOActor(cfg).compute_advantages(batch, meta)
    finally:
        numba.set_num_threads(old)
    assert calls == []
    assert_identical(serial, parallel, exact=True)


def test_fused_with_peer_outcome_and_custom_process_stage():
    """Stages around the estimator keep running; only steps 4-6 are fused."""
    advantage = AdvantageConfig(
        outcome_reward_shaping=StageSpec("gpg"), process_adv_shaping=StageSpec("plugin_fixtures.process_double")
    )
    cfg = PPOActorConfig(advantage=advantage, adv_norm=NormConfig())
    batch, meta = make_batch(8, drop=("token_rewards",))
    fast, plain = both_paths(cfg, batch, meta)
    assert_identical(fast, plain, exact=True)


# ---------------------------------------------------------------------------
# Bad batches: the same error as the tensor path, and the batch untouched
# ---------------------------------------------------------------------------

_PROCESS = (
    "token-rewards-nan",
    "gvpo-without-token-adv",
    "process-weighted-with-no-eos-mask",
    "process-rewards-out-of-range",
    "folded-process-not-constant",
)


@pytest.mark.parametrize(
    "case", [c for c in CASES if c[0] not in _PROCESS], ids=[c[0] for c in CASES if c[0] not in _PROCESS]
)
def test_fused_bad_batch_raises_the_tensor_path_error(case):
    name, edit, cfg_kwargs, call_kwargs, exc, needle = case
    batch, meta = make_batch(31, n_groups=3, drop=("token_rewards",))
    batch, meta = edit(batch, meta)
    before = snapshot(batch)
    errors = {}
    for mode in ("on", "off"):
        with fused_mode(mode), pytest.raises(exc) as err:
            PPOActor(PPOActorConfig(**cfg_kwargs)).compute_advantages(batch, meta, **call_kwargs)
        errors[mode] = str(err.value)
    assert needle in errors["on"]
    assert errors["on"] == errors["off"]
    for key, value in before.items():
        if torch.is_tensor(value) and value.device.type != "meta":
            assert torch.equal(batch[key], value) or torch.allclose(batch[key], value, equal_nan=True), key


def _poke(batch, key, row, col, value):
    t = batch[key].clone()
    t[row, col] = value
    batch[key] = t


@pytest.mark.parametrize("unit", ["token", "turn"])
@pytest.mark.parametrize(
    "field, value, needle",
    [
        ("logprobs", float("nan"), "logprobs: expected finite"),
        ("ref_logp", float("-inf"), "ref_logp: expected finite"),
        ("values", float("inf"), "values: expected finite"),
        ("prox_logp", float("nan"), "prox_logp: expected finite"),
        ("attention_mask", 2, "attention_mask: expected a binary"),
        ("loss_mask", -1, "loss_mask: expected a binary"),
    ],
)
def test_fused_catches_a_bad_value_anywhere(unit, field, value, needle):
    """The kernels check every position, the last one (raw token 0 after the roll) included."""
    for col in (0, 5, -1):
        batch, meta = make_batch(2, drop=("token_rewards",))
        batch["prox_logp"] = -torch.rand_like(batch["logprobs"])
        _poke(batch, field, 1, col, value)
        with fused_mode("on"), pytest.raises(ValueError, match=needle):
            PPOActor(PPOActorConfig(gae_timestep_unit=unit)).compute_advantages(batch, meta)


def test_fused_error_precedence_over_stage_errors():
    """A bad batch is reported before an outcome-stage error, as on the tensor path (which checks first)."""
    batch, meta = make_batch(4, drop=("token_rewards",))
    _poke(batch, "values", 0, 2, float("nan"))
    cfg = PPOActorConfig(advantage=AdvantageConfig(outcome_reward_shaping=StageSpec("remax")))  # needs reward_baselines
    for mode in ("on", "off"):
        with fused_mode(mode), pytest.raises(ValueError, match="values: expected finite"):
            PPOActor(cfg).compute_advantages(batch, meta)


def _empty_row(batch, row):
    for key, fill in (("attention_mask", 0), ("loss_mask", 0), ("turn_ids", -1)):
        batch[key] = batch[key].clone()
        batch[key][row] = fill


def _turn_id_of_width(batch, row):
    """The row's last generated token gets turn id T (still non-decreasing, but not < T)."""
    last = int(batch["loss_mask"][row].nonzero()[-1])
    _poke(batch, "turn_ids", row, last, batch["turn_ids"].shape[1])


@pytest.mark.parametrize(
    "bit, edit",
    [
        (fused_cpu.ROW_ATTENTION_NOT_BINARY, lambda b: _poke(b, "attention_mask", 0, 0, 3)),
        (fused_cpu.ROW_ATTENTION_NOT_RIGHT_PADDED, lambda b: _poke(b, "attention_mask", 0, 0, 0)),
        (fused_cpu.ROW_EMPTY, lambda b: _empty_row(b, 0)),
        (fused_cpu.ROW_LOSS_MASK_NOT_BINARY, lambda b: _poke(b, "loss_mask", 0, 3, 2)),
        (fused_cpu.ROW_LOSS_MASK_ON_PADDING, lambda b: _poke(b, "loss_mask", 0, -1, 1)),
        (fused_cpu.ROW_NOT_FINITE, lambda b: _poke(b, "logprobs", 0, 0, float("nan"))),
        (fused_cpu.ROW_TURN_IDS_INVALID, lambda b: _poke(b, "turn_ids", 0, int(b["loss_mask"][0].nonzero()[0]), -1)),
        (fused_cpu.ROW_TURN_IDS_INVALID, lambda b: _turn_id_of_width(b, 0)),
    ],
)
@pytest.mark.parametrize("unit", ["token", "turn"])
def test_kernel_reports_each_check_as_its_bit(bit, edit, unit):
    batch, _ = make_batch(6, drop=("token_rewards",))
    edit(batch)
    n_rows = batch["rewards"].shape[0]
    inputs = fused_cpu.FusedInputs(
        batch["attention_mask"],
        batch["loss_mask"],
        batch["logprobs"],
        batch["ref_logp"],
        batch["values"],
        None,
        batch["turn_ids"],
        torch.zeros(n_rows),
        None,
    )
    options = fused_cpu.FusedOptions(unit, False, False, "k1", 0.1, 1.0, torch.ones(n_rows), True)
    errors = fused_cpu.run_fused(inputs, options).errors
    assert int(errors[0]) & bit, (int(errors[0]), fused_cpu.ROW_ERRORS)
    assert int(errors[1:].abs().sum()) == 0


@pytest.mark.parametrize("unit", ["token", "turn"])
@pytest.mark.parametrize("n_groups", [1, 5, 64])
def test_kernel_returns_each_rows_largest_abs_value(unit, n_groups):
    """The output guard's bound on the fused path: max |values| per row, exactly, from every position."""
    batch, _ = make_batch(8, n_groups=n_groups, drop=("token_rewards",))
    n_rows = batch["rewards"].shape[0]
    values = batch["values"].clone()
    values[0, -1] = -1e30  # the last position (raw token 0's aligned slot) and a negative sign count too
    inputs = fused_cpu.FusedInputs(
        batch["attention_mask"],
        batch["loss_mask"],
        batch["logprobs"],
        batch["ref_logp"],
        values,
        None,
        batch["turn_ids"],
        torch.zeros(n_rows),
        None,
    )
    options = fused_cpu.FusedOptions(unit, False, False, "k1", 0.1, 1.0, torch.ones(n_rows), False)
    out = fused_cpu.run_fused(inputs, options)
    assert torch.equal(out.values_max_abs, values.abs().amax(dim=1))
    no_values = dataclasses.replace(inputs, values=None)
    assert torch.equal(fused_cpu.run_fused(no_values, options).values_max_abs, torch.zeros(n_rows))


@pytest.mark.parametrize("drop", [("token_rewards",), ("token_rewards", "values")])
def test_output_guard_gets_the_same_batch_stats_on_both_paths(monkeypatch, drop):
    """The fused kernels' magnitudes are what check_batch_values finds on the tensor path."""
    from areal_adv.trainer.ppo import advantage

    seen = {}
    guard = advantage.guard_outputs
    batch, meta = make_batch(9, drop=drop)
    for mode in ("on", "off"):
        monkeypatch.setattr(
            advantage, "guard_outputs", lambda fields, ctx, _m=mode: (seen.update({_m: ctx.stats}), guard(fields, ctx))
        )
        with fused_mode(mode):
            PPOActor(PPOActorConfig()).compute_advantages(batch, meta)
    assert seen["on"] == seen["off"]
    assert seen["on"].magnitude("values") == (float(batch["values"].abs().max()) if "values" in batch else 0.0)


def test_kernel_flag_without_a_batch_error_is_never_silent(monkeypatch):
    """If the kernel and the descriptive checks ever disagree, no output is returned."""
    batch, meta = make_batch(7, drop=("token_rewards",))
    _poke(batch, "values", 0, 1, float("nan"))
    monkeypatch.setattr(fused, "check_batch_values", lambda data: None)
    with fused_mode("on"), pytest.raises(RuntimeError, match="this is a bug"):
        PPOActor(PPOActorConfig()).compute_advantages(batch, meta)


# ---------------------------------------------------------------------------
# When the fused path runs
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "change, needle",
    [
        (lambda b: None, None),
        (lambda b: b.__setitem__("token_rewards", torch.zeros_like(b["logprobs"])), "process rewards"),
        (lambda b: b.__setitem__("logprobs", b["logprobs"].double()), "logprobs is torch.float64"),
        (lambda b: b.__setitem__("loss_mask", b["loss_mask"].float()), "loss_mask is torch.float32, not an integer"),
        (lambda b: b.__setitem__("turn_ids", b["turn_ids"].double()), "turn_ids is torch.float64, not an integer"),
        # AReaL's workflows: bool attention masks, int32 loss masks and turn ids (converted for the kernels)
        (lambda b: b.__setitem__("attention_mask", b["attention_mask"].bool()), None),
        (lambda b: b.__setitem__("loss_mask", b["loss_mask"].int()), None),
        (lambda b: b.__setitem__("turn_ids", b["turn_ids"].int()), None),
    ],
)
def test_blockers_name_the_reason(change, needle):
    batch, _ = make_batch(9, drop=("token_rewards",))
    change(batch)
    actor = PPOActor(PPOActorConfig())
    blockers = fused.fused_blockers(batch, actor.config, actor.resolved)
    if needle is None:
        assert blockers == []
    else:
        assert any(needle in b for b in blockers), blockers


@pytest.mark.parametrize("unit", ["token", "turn"])
def test_areal_s_mask_and_id_dtypes_give_the_int64_result_bit_for_bit(unit, monkeypatch):
    monkeypatch.setenv(fused.FUSED_ENV, "on")
    batch, meta = make_batch(11, drop=("token_rewards",))
    actor = PPOActor(PPOActorConfig(gae_timestep_unit=unit, kl_ctl=0.05, adv_norm=NormConfig()))
    areal_dtypes = {
        **batch,
        "attention_mask": batch["attention_mask"].bool(),
        "loss_mask": batch["loss_mask"].int(),
        "turn_ids": batch["turn_ids"].int(),
    }
    want = actor.compute_advantages(batch, meta)
    got = actor.compute_advantages(areal_dtypes, meta)
    for key in ("advantages", "returns", "kl_rewards", "tot_rewards", "loss_mask", "logprobs"):
        assert torch.equal(got[key], want[key]), key
    assert got["attention_mask"] is areal_dtypes["attention_mask"]  # the caller's fields, as given


@pytest.mark.parametrize(
    "cfg, needle",
    [
        (PPOActorConfig(gae_lambda="vapo"), "gae_lambda is a function"),
        (PPOActorConfig(advantage=AdvantageConfig(estimator=StageSpec("reinforce_return"))), "reinforce_return"),
        (
            PPOActorConfig(
                advantage=AdvantageConfig(estimator=StageSpec("areal_adv.trainer.ppo.advantage_algorithms.token_gae"))
            ),
            "advantage_algorithms.token_gae",
        ),
    ],
)
def test_config_blockers_and_on_mode_error(cfg, needle):
    batch, meta = make_batch(10, drop=("token_rewards",))
    actor = PPOActor(cfg)
    assert any(needle in b for b in fused.fused_blockers(batch, cfg, actor.resolved))
    with fused_mode("on"), pytest.raises(RuntimeError, match="AREAL_FUSED_ADVANTAGE=on"):
        actor.compute_advantages(batch, meta)
    with fused_mode("auto"):
        actor.compute_advantages(batch, meta)  # the tensor path runs instead


def test_off_mode_never_calls_the_kernels(monkeypatch):
    batch, meta = make_batch(12, drop=("token_rewards",))

    def fail(*args, **kwargs):
        raise AssertionError("fused kernels called with AREAL_FUSED_ADVANTAGE=off")

    monkeypatch.setattr(fused, "run_fused", fail)
    with fused_mode("off"):
        out = PPOActor(PPOActorConfig()).compute_advantages(batch, meta)
    assert set(OUT_KEYS) <= set(out)
    with fused_mode("auto"), pytest.raises(AssertionError, match="fused kernels called"):
        PPOActor(PPOActorConfig()).compute_advantages(batch, meta)


def test_bad_mode_is_an_error():
    batch, meta = make_batch(13, drop=("token_rewards",))
    with fused_mode("sometimes"), pytest.raises(ValueError, match="AREAL_FUSED_ADVANTAGE='sometimes'"):
        PPOActor(PPOActorConfig()).compute_advantages(batch, meta)


@pytest.mark.parametrize("n_pos", [1, 2])
@pytest.mark.parametrize("unit", ["token", "turn"])
def test_fused_rows_of_one_and_two_positions(n_pos, unit):
    """T = 1 (only the rolled-around position) and T = 2 (one GAE step), every row truncated.

    Position 0 is the prompt (issue 14: a generated token needs a context), so T = 1 has no generated token.
    """
    ones = torch.ones(3, n_pos, dtype=torch.long)
    loss = ones.clone()
    loss[:, 0] = 0
    batch = {
        "input_ids": ones,
        "attention_mask": ones,
        "loss_mask": loss,
        "turn_ids": torch.where(loss.bool(), 0, -1),
        "logprobs": -torch.rand(3, n_pos),
        "ref_logp": -torch.rand(3, n_pos),
        "values": torch.randn(3, n_pos),
        "rewards": torch.tensor([1.0, 0.0, 2.0]),
    }
    cfg = PPOActorConfig(gae_timestep_unit=unit, adv_norm=NormConfig(), discount=0.9)
    fast, plain = both_paths(cfg, batch, None)
    assert_identical(fast, plain, exact=True)
