"""Malformed batches, configs and plugins: a clear error naming the field, and the caller's batch
and metadata untouched (deep comparison). The table covers every class of issue 14."""

from __future__ import annotations

import copy
import dataclasses
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import field as dc_field

import numpy as np
import pytest
import torch
from batch_factory import make_batch

from areal_adv.api.cli_args import AdvantageConfig, ConfigError, NormConfig, PPOActorConfig, StageSpec
from areal_adv.trainer.ppo.actor import PPOActor
from areal_adv.trainer.ppo.checks.contracts import StageContractError
from areal_adv.trainer.ppo.fused import FUSED_ENV
from areal_adv.trainer.ppo.gae import LambdaFunctionError
from areal_adv.trainer.ppo.output_guard import NonFiniteOutputError


def _set(key, value):
    def edit(batch, meta):
        batch[key] = value(batch) if callable(value) else value
        return batch, meta

    return edit


def _drop(key):
    def edit(batch, meta):
        del batch[key]
        return batch, meta

    return edit


def _poke(key, row, col, value):
    def edit(batch, meta):
        t = batch[key].clone()
        t[row, col] = value
        batch[key] = t
        return batch, meta

    return edit


def _first_generated(batch):
    pos = batch["loss_mask"][0].nonzero()
    return int(pos[0])


def _turn_gap_to_decrease(batch, meta):
    t = batch["turn_ids"].clone()
    # make a generated token of a later turn carry a smaller id than an earlier one
    for b in range(t.shape[0]):
        ids = t[b][t[b] >= 0]
        if ids.max() > 0:
            last = int((t[b] >= 0).nonzero()[-1])
            t[b, last] = 0
            first = int((t[b] >= 0).nonzero()[0])
            t[b, first] = int(ids.max())
            batch["turn_ids"] = t
            return batch, meta
    pytest.skip("no multi-turn row")


def _wrong_group_sizes(batch, meta):
    from areal_adv.utils.data import TrajBatchMeta

    sizes = list(meta.traj_group_sizes)
    sizes[0] += 1
    return batch, TrajBatchMeta.from_group_sizes(sizes)


def _uneven_tokens(batch, meta):
    tr = batch["token_rewards"].clone()
    for b in range(tr.shape[0]):
        gen = batch["loss_mask"][b].nonzero().flatten()
        for i in range(len(gen) - 1):
            a, c = int(gen[i]), int(gen[i + 1])
            if c == a + 1 and batch["turn_ids"][b, a] == batch["turn_ids"][b, c]:
                tr[b, c] = tr[b, a] + 0.25
                batch["token_rewards"] = tr
                return batch, meta
    pytest.skip("no two adjacent tokens in one turn")


LEGACY_CASES = [
    # (id, batch edit, config kwargs, call kwargs, exception, text that must appear)
    ("missing-rewards", _drop("rewards"), {}, {}, ValueError, "rewards"),
    ("missing-loss-mask", _drop("loss_mask"), {}, {}, ValueError, "loss_mask"),
    (
        "rewards-shape",
        _set("rewards", lambda b: b["rewards"][:-1]),
        {},
        {},
        ValueError,
        "rewards: expected one reward per row",
    ),
    (
        "rewards-nan",
        _set("rewards", lambda b: torch.full_like(b["rewards"], float("nan"))),
        {},
        {},
        ValueError,
        "rewards: expected finite",
    ),
    (
        "rewards-bool",
        _set("rewards", lambda b: b["rewards"] > 0),
        {},
        {},
        ValueError,
        "rewards: expected an integer or floating",
    ),
    (
        "logprobs-shape",
        _set("logprobs", lambda b: b["logprobs"][:, :-1]),
        {},
        {},
        ValueError,
        "logprobs: expected shape",
    ),
    (
        "logprobs-int",
        _set("logprobs", lambda b: b["logprobs"].long()),
        {},
        {},
        ValueError,
        "logprobs: expected a floating",
    ),
    ("values-inf", _poke("values", 0, 0, float("inf")), {}, {}, ValueError, "values: expected finite"),
    ("loss-mask-not-binary", _poke("loss_mask", 0, 1, 2), {}, {}, ValueError, "loss_mask: expected a binary"),
    (
        "loss-mask-on-padding",
        _set("loss_mask", lambda b: torch.ones_like(b["loss_mask"])),
        {},
        {},
        ValueError,
        "loss_mask",
    ),
    (
        "attention-not-right-padded",
        _poke("attention_mask", 0, 0, 0),
        {},
        {},
        ValueError,
        "attention_mask: expected right padding",
    ),
    (
        "input-ids-1d",
        _set("input_ids", lambda b: b["input_ids"][0]),
        {},
        {},
        ValueError,
        "input_ids: expected shape [B, T]",
    ),
    ("device-mismatch", _set("values", lambda b: b["values"].to("meta")), {}, {}, ValueError, "values: on device meta"),
    ("turn-ids-float", _set("turn_ids", lambda b: b["turn_ids"].float()), {}, {}, ValueError, "turn_ids"),
    (
        "turn-id-negative-on-generated-token",
        _set("turn_ids", lambda b: torch.where(b["loss_mask"] != 0, -1, b["turn_ids"])),
        {},
        {},
        ValueError,
        "turn_ids",
    ),
    ("turn-ids-decreasing", _turn_gap_to_decrease, {}, {}, ValueError, "turn_ids"),
    ("turn-ids-missing-for-turn-mode", _drop("turn_ids"), {"gae_timestep_unit": "turn"}, {}, ValueError, "turn_ids"),
    ("group-sizes-do-not-sum", _wrong_group_sizes, {}, {}, ValueError, "traj_group_sizes"),
    ("is-truncated-shape", _set("is_truncated", lambda b: b["is_truncated"][:-1]), {}, {}, ValueError, "is_truncated"),
    (
        "token-rewards-nan",
        _poke("token_rewards", 0, 0, float("nan")),
        {},
        {},
        ValueError,
        "token_rewards: expected finite",
    ),
    ("recompute-without-prox", lambda b, m: (b, m), {"recompute_logprob": True}, {}, ValueError, "prox_logp"),
    (
        "gvpo-without-token-adv",
        lambda b, m: (b, m),
        {"token_rewards_as_adv": False},
        {"advantage_shaping_mode": "gvpo"},
        ValueError,
        "token_rewards_as_adv",
    ),
    (
        "process-weighted-with-no-eos-mask",
        lambda b, m: (b, m),
        {"mask_no_eos_with_zero": True},
        {"advantage_shaping_mode": "process_weighted"},
        ValueError,
        "mask_no_eos_with_zero",
    ),
    (
        "process-rewards-out-of-range",
        _set("token_rewards", lambda b: b["token_rewards"] + 2.0),
        {},
        {"advantage_shaping_mode": "process_weighted"},
        ValueError,
        "token_rewards must lie in [0, 1]",
    ),
    (
        "folded-process-not-constant",
        _uneven_tokens,
        {"token_rewards_as_adv": False},
        {},
        ValueError,
        "constant within a turn",
    ),
]


@dataclass(frozen=True)
class Case:
    """One bad input: how to build it, what must be raised, which field the message must name."""

    id: str
    edit: Callable = lambda b, m: (b, m)
    cfg: dict = dc_field(default_factory=dict)
    call: dict = dc_field(default_factory=dict)
    exc: type = ValueError
    field: str = ""
    also: tuple[str, ...] = ()
    batch: dict = dc_field(default_factory=lambda: {"n_groups": 3})
    actor_edit: Callable | None = None


def _legacy(case) -> Case:
    ident, edit, cfg, call, exc, needle = case
    return Case(ident, edit, cfg, call, exc, needle)


def _meta_as(value):
    return lambda b, m: (b, value(m) if callable(value) else value)


def _on_meta_device(b, m):
    return {k: (v.to("meta") if torch.is_tensor(v) else v) for k, v in b.items()}, m


def _complex(key):
    return _set(key, lambda b: b[key].to(torch.complex64))


def _generated_at_zero(b, m):
    for key, value in (("loss_mask", 1), ("attention_mask", 1), ("turn_ids", 0), ("logprobs", -0.5)):
        t = b[key].clone()
        t[0, 0] = value
        b[key] = t
    b["turn_ids"] = torch.where(
        b["loss_mask"].bool(), torch.zeros_like(b["turn_ids"]), torch.full_like(b["turn_ids"], -1)
    )
    return b, m


def _turn_id_too_big(b, m):
    T = b["input_ids"].shape[1]
    t = b["turn_ids"].clone()
    rows, cols = (t >= 0).nonzero(as_tuple=True)
    row = int(rows[0])
    t[row][t[row] >= 0] = T + 5  # one turn, with an id past T (non-decreasing, -1 off generated tokens)
    b["turn_ids"] = t
    return b, m


def _nan_reference(b, m):
    group = next(g for g in m.rollout_groups if g is not None and g.rewards is not None)
    group.rewards[0] = float("nan")  # written after the RolloutGroup was built
    return b, m


def _reference_wrong_shape(b, m):
    group = next(g for g in m.rollout_groups if g is not None and g.rewards is not None)
    object.__setattr__(group, "rewards", torch.zeros(group.n_logical + 2, dtype=torch.float64))
    return b, m


def _wrong_rollout_group_count(b, m):
    from areal_adv.utils.data import RolloutGroup

    groups = list(m.rollout_groups or [None] * m.n_trajs)
    groups[0] = RolloutGroup(row_counts=(1,) * (m.traj_group_sizes[0] + 1))
    return b, _bypass_meta(m, rollout_groups=tuple(groups))


def _bypass_meta(m, **changes):
    """A TrajBatchMeta edited without its constructor's checks (as a caller could)."""
    meta = copy.copy(m)
    for key, value in changes.items():
        object.__setattr__(meta, key, value)
    return meta


def _empty_row(b, m):
    b["attention_mask"] = b["attention_mask"].clone()
    b["attention_mask"][0] = 0
    b["loss_mask"] = b["loss_mask"].clone()
    b["loss_mask"][0] = 0
    b["turn_ids"] = torch.where(b["loss_mask"].bool(), b["turn_ids"], torch.full_like(b["turn_ids"], -1))
    return b, m


def _zero_rows(b, m):
    return {k: (v[:0] if torch.is_tensor(v) else v) for k, v in b.items()}, None


def _plugin(stage, path, **kwargs):
    spec = {"implementation": path, "kwargs": kwargs}
    return {"advantage": AdvantageConfig(**{stage: StageSpec(**spec)})}


def _change_actor_config(actor):
    actor.config.kl_ctl = 0.5


def _change_nested_actor_config(actor):
    actor.config.adv_norm = NormConfig()


SPLIT = {"n_groups": 3, "split": True, "explicit_refs": True}
OUTCOME = "'outcome_reward_shaping'"
ESTIMATOR = "'estimator'"
PROCESS = "'process_adv_shaping'"
COMPUTE = "'compute'"
PF = "plugin_fixtures."

CASES = [_legacy(c) for c in LEGACY_CASES] + [
    # 1. silent non-finite outputs: rejected configs, or the guard names the field and the cause
    Case(
        "nonfinite-clip-inf-scaling",
        _set("rewards", lambda b: b["rewards"] * 100 + 50),
        {"reward_clip": float("inf"), "reward_scaling": 1e38},
        exc=NonFiniteOutputError,
        field="tot_rewards",
        also=("probable cause", "reward_scaling=1e+38", "reward_clip=inf"),
    ),
    Case(
        "nonfinite-kl-ctl-1e38",
        _set("logprobs", lambda b: torch.where(b["loss_mask"].bool(), -50.0, 0.0)),
        {"kl_ctl": 1e38},
        exc=NonFiniteOutputError,
        field="kl_rewards",
        also=("actor.kl_ctl=1e+38",),
    ),
    Case(
        "nonfinite-values-3e38",
        _set("values", lambda b: torch.where(b["values"] >= 0, 3e38, -3e38)),
        exc=NonFiniteOutputError,
        field="returns",
        also=("values reach 3e+38",),
    ),
    Case(
        "nonfinite-values-3e38-turn-gae",
        _set("values", lambda b: torch.where(b["values"] >= 0, 3e38, -3e38)),
        {"gae_timestep_unit": "turn"},
        exc=NonFiniteOutputError,
        field="returns",
        also=("values reach",),
    ),
    Case(
        "nonfinite-length-penalty",
        cfg={
            "overlong_reward_penalty": True,
            "overlong_tokens": 1,
            "overlong_penalty_factor": 1e38,
            "max_new_tokens": 1,
        },
        exc=NonFiniteOutputError,
        field="rewards",
        also=("actor.overlong_penalty_factor=1e+38",),
    ),
    Case("adv-norm-eps-zero", cfg={"adv_norm": NormConfig(eps=0.0)}, exc=ConfigError, field="actor.adv_norm.eps"),
    Case(
        "reward-norm-eps-zero",
        cfg={"reward_norm": NormConfig(mean_level="group", eps=0.0)},
        exc=ConfigError,
        field="actor.reward_norm.eps",
    ),
    # 2. errors that name the field
    Case("rewards-none", _set("rewards", None), field="rewards: got None"),
    Case("loss-mask-none", _set("loss_mask", None), field="loss_mask: got None"),
    Case("input-ids-none", _set("input_ids", None), field="input_ids: got None"),
    Case("rewards-list", _set("rewards", lambda b: b["rewards"].tolist()), field="rewards: got list"),
    Case("values-numpy", _set("values", lambda b: b["values"].numpy()), field="values: got ndarray"),
    Case("meta-dict", _meta_as(lambda m: {"traj_group_sizes": m.traj_group_sizes}), field="meta: got dict"),
    Case("meta-list", _meta_as(lambda m: list(m.traj_group_sizes)), field="meta: got list"),
    Case("data-none", lambda b, m: (None, None), field="data: got NoneType"),
    Case("data-string", lambda b, m: ("batch.pt", None), field="data: got str"),
    Case("logprobs-complex", _complex("logprobs"), field="logprobs: got dtype torch.complex64"),
    Case("attention-mask-complex", _complex("attention_mask"), field="attention_mask: got dtype torch.complex64"),
    Case("loss-mask-complex", _complex("loss_mask"), field="loss_mask: got dtype torch.complex64"),
    Case("rewards-complex", _complex("rewards"), field="rewards: got dtype torch.complex64"),
    Case("is-truncated-complex", _complex("is_truncated"), field="is_truncated: got dtype torch.complex64"),
    Case(
        "input-ids-float",
        _set("input_ids", lambda b: b["input_ids"].float()),
        field="input_ids: got dtype torch.float32",
    ),
    Case("everything-on-meta-device", _on_meta_device, field="input_ids: on device meta"),
    Case(
        "turn-ids-on-meta-device",
        _set("turn_ids", lambda b: b["turn_ids"].to("meta")),
        field="turn_ids: on device meta",
    ),
    Case(
        "outcome-plugin-sys-exit",
        cfg=_plugin("outcome_reward_shaping", PF + "exits"),
        exc=StageContractError,
        field=OUTCOME,
        also=(PF + "exits", "called sys.exit(3)"),
    ),
    Case(
        "estimator-plugin-sys-exit",
        cfg=_plugin("estimator", PF + "estimator_exits"),
        exc=StageContractError,
        field=ESTIMATOR,
        also=(PF + "estimator_exits", "called sys.exit('bye')"),
    ),
    Case(
        "gae-lambda-plugin-raises",
        cfg={"gae_lambda": PF + "lambda_raises"},
        exc=LambdaFunctionError,
        field="actor.gae_lambda (plugin_fixtures.lambda_raises)",
        also=("raised KeyError: 'no such length'",),
    ),
    Case(
        "gae-lambda-plugin-sys-exit",
        cfg={"gae_lambda": PF + "lambda_exits"},
        exc=LambdaFunctionError,
        field="actor.gae_lambda (plugin_fixtures.lambda_exits)",
        also=("called sys.exit(0)",),
    ),
    Case(
        "gae-lambda-raises-in-custom-estimator",
        cfg={
            "gae_lambda": PF + "lambda_raises",
            **_plugin("estimator", "examples.custom_advantage.plugins.token_gae_turn_lambda"),
        },
        exc=StageContractError,
        field=ESTIMATOR,
        also=("actor.gae_lambda (plugin_fixtures.lambda_raises)", "no such length"),
    ),
    # 3. plugins cannot reach the caller's batch, metadata or config
    Case(
        "outcome-rescales-references",
        cfg=_plugin("outcome_reward_shaping", PF + "rescale_references"),
        exc=StageContractError,
        field="meta.rollout_groups[",
        also=(OUTCOME, ".rewards", "in place"),
        batch=SPLIT,
    ),
    Case(
        "outcome-replaces-group-sizes",
        cfg=_plugin("outcome_reward_shaping", PF + "replace_group_sizes"),
        exc=StageContractError,
        field="meta.traj_group_sizes",
        also=(OUTCOME, "meta.n_trajs"),
    ),
    Case(
        "outcome-writes-through-data",
        cfg=_plugin("outcome_reward_shaping", PF + "write_through_data"),
        exc=StageContractError,
        field="data['rewards']",
        also=(OUTCOME, "in place"),
    ),
    Case(
        "outcome-writes-through-numpy",
        cfg=_plugin("outcome_reward_shaping", PF + "write_through_numpy"),
        exc=StageContractError,
        field="data['rewards']",
        also=(OUTCOME,),
    ),
    Case(
        "outcome-writes-logprobs-through-numpy",
        cfg=_plugin("outcome_reward_shaping", PF + "write_logprobs_through_numpy"),
        exc=StageContractError,
        field="data['logprobs']",
        also=(OUTCOME,),
    ),
    Case(
        "estimator-writes-through-data",
        cfg=_plugin("estimator", PF + "estimator_writes_data"),
        exc=StageContractError,
        field="values",
        also=(ESTIMATOR, "in place"),
    ),
    Case(
        "estimator-object-setattr",
        cfg=_plugin("estimator", PF + "estimator_setattr"),
        exc=StageContractError,
        field="values",
        also=(ESTIMATOR,),
    ),
    Case(
        "estimator-edits-meta",
        cfg=_plugin("estimator", PF + "estimator_edits_meta"),
        exc=StageContractError,
        field="meta.traj_seqlens",
        also=(ESTIMATOR,),
    ),
    Case(
        "outcome-edits-config",
        cfg=_plugin("outcome_reward_shaping", PF + "outcome_edits_config"),
        exc=StageContractError,
        field="config.kl_ctl",
        also=(OUTCOME,),
    ),
    Case(
        "outcome-edits-nested-config",
        cfg=_plugin("outcome_reward_shaping", PF + "outcome_edits_nested_config"),
        exc=StageContractError,
        field="config.advantage.outcome_reward_shaping.kwargs",
        also=(OUTCOME,),
    ),
    Case(
        "process-edits-meta",
        cfg=_plugin("process_adv_shaping", PF + "process_edits_meta"),
        exc=StageContractError,
        field="meta.n_trajs",
        also=(PROCESS,),
    ),
    Case(
        "process-writes-mask-through-numpy",
        cfg=_plugin("process_adv_shaping", PF + "process_writes_mask"),
        exc=StageContractError,
        field="loss_mask",
        also=(PROCESS,),
    ),
    Case(
        "replacement-writes-values-through-numpy",
        cfg=_plugin("compute", PF + "replace_writes_values"),
        exc=StageContractError,
        field="data['values']",
        also=(COMPUTE,),
    ),
    # 4. accepted although invalid
    Case(
        "reference-nan-after-construction",
        _nan_reference,
        {"reward_norm": NormConfig(mean_level="group")},
        field="meta.rollout_groups[",
        also=(".rewards[0]: got nan", "after the RolloutGroup was built"),
        batch=SPLIT,
    ),
    Case(
        "reference-nan-without-reward-norm",
        _nan_reference,
        field="meta.rollout_groups[",
        also=("got nan",),
        batch=SPLIT,
    ),
    Case(
        "reference-replaced-wrong-shape",
        _reference_wrong_shape,
        field="meta.rollout_groups[",
        also=(".rewards",),
        batch=SPLIT,
    ),
    Case(
        "gvpo-negative-scale-without-token-rewards",
        _drop("token_rewards"),
        call={"advantage_shaping_mode": "gvpo", "gvpo_negative_scale": -1.0},
        field="gvpo_negative_scale",
    ),
    Case(
        "gvpo-nan-zero-penalty-without-token-rewards",
        _drop("token_rewards"),
        call={"advantage_shaping_mode": "gvpo", "gvpo_zero_penalty": float("nan")},
        field="gvpo_zero_penalty",
    ),
    Case(
        "gvpo-inf-zero-eps-with-explicit-process",
        _drop("token_rewards"),
        cfg=_plugin("process_adv_shaping", "gvpo"),
        call={"gvpo_zero_eps": float("inf")},
        field="gvpo_zero_eps",
    ),
    Case(
        "bad-mode-with-explicit-process",
        cfg=_plugin("process_adv_shaping", "additive"),
        call={"advantage_shaping_mode": "bogus"},
        field="advantage_shaping_mode",
    ),
    Case(
        "replacement-float-is-truncated",
        cfg=_plugin("compute", PF + "replace_float_truncation"),
        exc=StageContractError,
        field="extras['is_truncated']",
        also=(COMPUTE, "expected torch.bool"),
    ),
    Case("kl-ctl-negative", cfg={"kl_ctl": -0.1}, exc=ConfigError, field="actor.kl_ctl"),
    Case(
        "actor-config-changed-after-init",
        exc=ConfigError,
        field="actor.kl_ctl",
        also=("changed after the actor was built",),
        actor_edit=_change_actor_config,
    ),
    Case(
        "actor-config-section-replaced-after-init",
        exc=ConfigError,
        field="actor.adv_norm",
        also=("changed after the actor was built",),
        actor_edit=_change_nested_actor_config,
    ),
    # 6. layout edges
    Case(
        "generated-token-at-position-0",
        _generated_at_zero,
        field="loss_mask: row 0 has a generated token at position 0",
    ),
    Case("turn-id-not-below-T", _turn_id_too_big, field="turn_ids: turn id", also=("expected turn ids < T=",)),
    # more malformed batches and stage results
    Case("empty-row", _empty_row, field="attention_mask: every row needs at least one token"),
    Case("zero-rows", _zero_rows, field="input_ids: expected a non-empty batch"),
    Case("is-truncated-not-binary", _set("is_truncated", lambda b: b["is_truncated"].long() * 2), field="is_truncated"),
    Case(
        "token-rewards-shape",
        _set("token_rewards", lambda b: b["token_rewards"][:, :-1]),
        field="token_rewards: expected shape",
    ),
    Case("ref-logp-inf", _poke("ref_logp", 1, 2, float("-inf")), field="ref_logp: expected finite"),
    Case(
        "prox-logp-nan-decoupled",
        _set("prox_logp", lambda b: torch.full_like(b["logprobs"], float("nan"))),
        {"use_decoupled_loss": True},
        field="prox_logp: expected finite",
    ),
    Case("turn-ids-shape", _set("turn_ids", lambda b: b["turn_ids"][:-1]), field="turn_ids: expected shape"),
    Case("values-integer", _set("values", lambda b: b["values"].long()), field="values: expected a floating"),
    Case("logprobs-bool", _set("logprobs", lambda b: b["logprobs"] < 0), field="logprobs: expected a floating"),
    Case("rollout-groups-row-counts-mismatch", _wrong_rollout_group_count, field="meta.rollout_groups[0].row_counts"),
    Case(
        "process-plugin-nan",
        cfg=_plugin("process_adv_shaping", PF + "process_nan"),
        exc=StageContractError,
        field=PROCESS,
        also=("advantages: returned non-finite nan",),
    ),
    Case(
        "replacement-inf-advantages",
        cfg=_plugin("compute", PF + "replace_nan_advantages"),
        exc=StageContractError,
        field=COMPUTE,
        also=("advantages: returned non-finite inf",),
    ),
    Case(
        "shaped-references-nan",
        cfg={"reward_norm": NormConfig(mean_level="group"), **_plugin("outcome_reward_shaping", PF + "refs_nan")},
        exc=StageContractError,
        field=OUTCOME,
        also=("normalization_rewards: returned non-finite nan",),
        batch=SPLIT,
    ),
]


def deep_snapshot(value):
    """An independent copy to compare the caller's objects against (meta tensors kept by identity)."""
    if torch.is_tensor(value):
        return value if value.device.type == "meta" else value.clone()
    if isinstance(value, dict):
        return {k: deep_snapshot(v) for k, v in value.items()}
    return copy.deepcopy(value)


def assert_same(a, b, where):
    """Deep, NaN-aware equality of the caller's batch / metadata with their snapshots."""
    if torch.is_tensor(a) or torch.is_tensor(b):
        assert torch.is_tensor(a) and torch.is_tensor(b), where
        if a.device.type == "meta" or b.device.type == "meta":
            assert a is b, where
            return
        assert a.dtype == b.dtype and a.shape == b.shape, where
        assert torch.equal(a.isnan(), b.isnan()) if a.is_floating_point() else True, where
        assert torch.equal(torch.nan_to_num(a), torch.nan_to_num(b)) if a.is_floating_point() else torch.equal(a, b), (
            where
        )
    elif isinstance(a, dict):
        assert isinstance(b, dict) and list(a) == list(b), where
        for k in a:
            assert_same(a[k], b[k], f"{where}[{k!r}]")
    elif dataclasses.is_dataclass(a):
        assert type(a) is type(b), where
        for f in dataclasses.fields(a):
            assert_same(getattr(a, f.name), getattr(b, f.name), f"{where}.{f.name}")
    elif isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray) and np.array_equal(a, b, equal_nan=True), where
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{where}[{i}]")
    else:
        assert a == b, where


def _expect_named_error(case: Case, batch, meta):
    before = deep_snapshot(batch), deep_snapshot(meta)
    with pytest.raises(case.exc) as err:
        actor = PPOActor(PPOActorConfig(**case.cfg))
        if case.actor_edit is not None:
            case.actor_edit(actor)
        actor.compute_advantages(batch, meta, **case.call)
    message = str(err.value)
    for needle in (case.field, *case.also):
        assert needle in message, f"{needle!r} not in {message!r}"
    assert_same(batch, before[0], "batch")
    assert_same(meta, before[1], "meta")


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_names_the_field_and_leaves_batch_and_meta_untouched(case, monkeypatch):
    """The whole table on the tensor path (AREAL_FUSED_ADVANTAGE=off), whatever the environment says."""
    monkeypatch.setenv(FUSED_ENV, "off")
    batch, meta = make_batch(31, **case.batch)
    _expect_named_error(case, *case.edit(batch, meta))


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_on_the_fused_path(case, monkeypatch):
    """The table on the fused kernels (AREAL_FUSED_ADVANTAGE=on): the same error, field and untouched inputs.

    Process rewards block the fused path, so the batch comes without them; a case
    that needs them, or that passes the structure checks with a config the kernels
    cannot run (a custom estimator, a gae_lambda function: on-mode's RuntimeError),
    has only the tensor path and is skipped here, with the reason.
    """
    monkeypatch.setenv(FUSED_ENV, "on")
    batch, meta = make_batch(31, **{**case.batch, "drop": (*case.batch.get("drop", ()), "token_rewards")})
    try:
        batch, meta = case.edit(batch, meta)
    except KeyError as missing:
        pytest.skip(f"the case edits {missing}, which only the tensor path takes")
    try:
        _expect_named_error(case, batch, meta)
    except RuntimeError as blocked:
        if not str(blocked).startswith(f"{FUSED_ENV}=on, but"):
            raise
        pytest.skip(f"tensor path only ({blocked})")


def test_the_table_covers_every_class():
    assert len(CASES) >= 60
    for prefix in (
        "nonfinite-",
        "meta-",
        "outcome-",
        "estimator-",
        "reference-",
        "gvpo-",
        "generated-token",
        "turn-id",
    ):
        assert any(c.id.startswith(prefix) for c in CASES), prefix
    # each way a plugin could reach the caller, and each way an error could lose the field
    for part in (
        "sys-exit",
        "gae-lambda-plugin-raises",
        "-none",
        "-complex",
        "meta-device",
        "rescales-references",
        "replaces-group-sizes",
        "through-data",
        "through-numpy",
        "object-setattr",
        "edits-meta",
        "edits-config",
        "after-construction",
        "after-init",
        "float-is-truncated",
        "kl-ctl-negative",
    ):
        assert any(part in c.id for c in CASES), part


def _groups_with(singleton: bool):
    """A batch whose prompt groups include a one-member group, or none."""
    for seed in range(100):
        batch, meta = make_batch(seed, max_group=3)
        if (1 in meta.logical_group_sizes) == singleton:
            return batch, meta
    raise AssertionError("no such seed")


@pytest.mark.parametrize("mode", ["off", "on"])
def test_group_centering_of_a_single_rollout_warns_that_it_erases_the_task_reward(mode, monkeypatch):
    """AReaL's warning: centering a group of one on its own mean sets its score to 0 (on both paths)."""
    from areal_adv.trainer.ppo.rewards.scores import AdvantageWarning

    monkeypatch.setenv(FUSED_ENV, mode)
    cfg = PPOActorConfig(reward_norm=NormConfig(mean_level="group", std_level="group"))
    batch, meta = _groups_with(singleton=True)
    if mode == "on":  # process rewards take the tensor path
        del batch["token_rewards"]
    with pytest.warns(AdvantageWarning, match=r"actor\.reward_norm\.mean_level='group'.*erasing its task reward"):
        PPOActor(cfg).compute_advantages(batch, meta)
    batch, meta = _groups_with(singleton=False)
    if mode == "on":
        del batch["token_rewards"]
    with warnings.catch_warnings():
        warnings.simplefilter("error", AdvantageWarning)
        PPOActor(cfg).compute_advantages(batch, meta)  # every group has two or more: nothing to warn about
        batch, meta = _groups_with(singleton=True)
        if mode == "on":
            del batch["token_rewards"]
        PPOActor(PPOActorConfig(reward_norm=NormConfig(mean_level="batch"))).compute_advantages(batch, meta)


CONFIG_CASES = [
    (dict(discount=1.5), "actor.discount"),
    (dict(gae_lambda=-0.1), "actor.gae_lambda"),
    (dict(kl_estimator="k4"), "actor.kl_estimator"),
    (dict(gae_timestep_unit="episode"), "actor.gae_timestep_unit"),
    (dict(overlong_reward_penalty=True, overlong_tokens=None, overlong_penalty_factor=1.0), "actor.overlong_tokens"),
    (dict(reward_clip=0.0), "actor.reward_clip"),
    (dict(gae_lambda_kwargs={"a": 1}), "actor.gae_lambda_kwargs"),
    (
        dict(token_rewards_as_adv=False, advantage=AdvantageConfig(process_adv_shaping=StageSpec("gvpo"))),
        "token_rewards_as_adv",
    ),
    (
        dict(mask_no_eos_with_zero=True, advantage=AdvantageConfig(process_adv_shaping=StageSpec("process_weighted"))),
        "mask_no_eos_with_zero",
    ),
]


@pytest.mark.parametrize("kwargs, needle", CONFIG_CASES)
def test_bad_actor_config_names_the_field(kwargs, needle):
    with pytest.raises(ConfigError, match=needle.replace(".", r"\.")):
        PPOActorConfig(**kwargs)


def test_bad_norm_config_names_the_field():
    with pytest.raises(ConfigError, match=r"NormConfig\.std_level"):
        NormConfig(std_level="token")
    with pytest.raises(ConfigError, match=r"NormConfig\.group_size"):
        NormConfig(group_size=0)


def test_the_deep_comparison_can_fail():
    batch, meta = make_batch(31, **SPLIT)
    before = deep_snapshot(batch), deep_snapshot(meta)
    batch["rewards"].data[0] += 1
    with pytest.raises(AssertionError):
        assert_same(batch, before[0], "batch")
    next(g for g in meta.rollout_groups if g is not None).rewards[0] += 1
    with pytest.raises(AssertionError):
        assert_same(meta, before[1], "meta")
