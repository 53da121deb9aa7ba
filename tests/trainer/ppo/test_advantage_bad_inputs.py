"""Malformed batches and configs: a clear error naming the field, and the caller's batch untouched."""

from __future__ import annotations

import pytest
import torch
from batch_factory import make_batch

from areal.api.cli_args import AdvantageConfig, ConfigError, NormConfig, PPOActorConfig, StageSpec
from areal.trainer.ppo.actor import PPOActor


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
    from areal.utils.data import TrajBatchMeta

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


CASES = [
    # (id, batch edit, config kwargs, call kwargs, exception, text that must appear)
    ("missing-rewards", _drop("rewards"), {}, {}, ValueError, "rewards"),
    ("missing-loss-mask", _drop("loss_mask"), {}, {}, ValueError, "loss_mask"),
    ("rewards-shape", _set("rewards", lambda b: b["rewards"][:-1]), {}, {}, ValueError, "rewards: expected one reward per row"),
    ("rewards-nan", _set("rewards", lambda b: torch.full_like(b["rewards"], float("nan"))), {}, {}, ValueError, "rewards: expected finite"),
    ("rewards-bool", _set("rewards", lambda b: b["rewards"] > 0), {}, {}, ValueError, "rewards: expected an integer or floating"),
    ("logprobs-shape", _set("logprobs", lambda b: b["logprobs"][:, :-1]), {}, {}, ValueError, "logprobs: expected shape"),
    ("logprobs-int", _set("logprobs", lambda b: b["logprobs"].long()), {}, {}, ValueError, "logprobs: expected a floating"),
    ("values-inf", _poke("values", 0, 0, float("inf")), {}, {}, ValueError, "values: expected finite"),
    ("loss-mask-not-binary", _poke("loss_mask", 0, 1, 2), {}, {}, ValueError, "loss_mask: expected a binary"),
    ("loss-mask-on-padding", _set("loss_mask", lambda b: torch.ones_like(b["loss_mask"])), {}, {}, ValueError, "loss_mask"),
    ("attention-not-right-padded", _poke("attention_mask", 0, 0, 0), {}, {}, ValueError, "attention_mask: expected right padding"),
    ("input-ids-1d", _set("input_ids", lambda b: b["input_ids"][0]), {}, {}, ValueError, "input_ids: expected shape [B, T]"),
    ("device-mismatch", _set("values", lambda b: b["values"].to("meta")), {}, {}, ValueError, "values: on device meta"),
    ("turn-ids-float", _set("turn_ids", lambda b: b["turn_ids"].float()), {}, {}, ValueError, "turn_ids"),
    ("turn-id-on-prompt", _poke("turn_ids", 0, 0, 0), {}, {}, ValueError, "turn_ids"),
    ("turn-ids-decreasing", _turn_gap_to_decrease, {}, {}, ValueError, "turn_ids"),
    ("turn-ids-missing-for-turn-mode", _drop("turn_ids"), {"gae_timestep_unit": "turn"}, {}, ValueError, "turn_ids"),
    ("group-sizes-do-not-sum", _wrong_group_sizes, {}, {}, ValueError, "traj_group_sizes"),
    ("is-truncated-shape", _set("is_truncated", lambda b: b["is_truncated"][:-1]), {}, {}, ValueError, "is_truncated"),
    ("token-rewards-nan", _poke("token_rewards", 0, 0, float("nan")), {}, {}, ValueError, "token_rewards: expected finite"),
    ("recompute-without-prox", lambda b, m: (b, m), {"recompute_logprob": True}, {}, ValueError, "prox_logp"),
    ("gvpo-without-token-adv", lambda b, m: (b, m), {"token_rewards_as_adv": False}, {"advantage_shaping_mode": "gvpo"}, ValueError, "token_rewards_as_adv"),
    ("process-weighted-with-no-eos-mask", lambda b, m: (b, m), {"mask_no_eos_with_zero": True}, {"advantage_shaping_mode": "process_weighted"}, ValueError, "mask_no_eos_with_zero"),
    ("process-rewards-out-of-range", _set("token_rewards", lambda b: b["token_rewards"] + 2.0), {}, {"advantage_shaping_mode": "process_weighted"}, ValueError, "token_rewards must lie in [0, 1]"),
    ("folded-process-not-constant", _uneven_tokens, {"token_rewards_as_adv": False}, {}, ValueError, "constant within a turn"),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bad_batch_raises_and_leaves_batch_untouched(case):
    _, edit, cfg_kwargs, call_kwargs, exc, needle = case
    batch, meta = make_batch(31, n_groups=3)
    batch, meta = edit(batch, meta)
    before = {k: (v.clone() if torch.is_tensor(v) and v.device.type != "meta" else v) for k, v in batch.items()}
    with pytest.raises(exc) as err:
        PPOActor(PPOActorConfig(**cfg_kwargs)).compute_advantages(batch, meta, **call_kwargs)
    assert needle in str(err.value)
    assert batch.keys() == before.keys()
    for key, value in before.items():
        if torch.is_tensor(value) and value.device.type != "meta":
            assert batch[key] is value or torch.allclose(batch[key], value, rtol=0, atol=0, equal_nan=True), key


CONFIG_CASES = [
    (dict(discount=1.5), "actor.discount"),
    (dict(gae_lambda=-0.1), "actor.gae_lambda"),
    (dict(kl_estimator="k4"), "actor.kl_estimator"),
    (dict(gae_timestep_unit="episode"), "actor.gae_timestep_unit"),
    (dict(overlong_reward_penalty=True, overlong_tokens=None, overlong_penalty_factor=1.0), "actor.overlong_tokens"),
    (dict(reward_clip=0.0), "actor.reward_clip"),
    (dict(gae_lambda_kwargs={"a": 1}), "actor.gae_lambda_kwargs"),
    (dict(token_rewards_as_adv=False, advantage=AdvantageConfig(process_adv_shaping=StageSpec("gvpo"))), "token_rewards_as_adv"),
    (dict(mask_no_eos_with_zero=True, advantage=AdvantageConfig(process_adv_shaping=StageSpec("process_weighted"))), "mask_no_eos_with_zero"),
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
