"""The caller's objects stay the caller's: outputs never alias inputs, plugins and later edits change nothing
(issue 14, classes 3, 5 and 7)."""

from __future__ import annotations

import plugin_fixtures
import pytest
import torch
from batch_factory import make_batch
from test_advantage_default import assert_same

from areal_adv.api.cli_args import AdvantageConfig, NormConfig, PPOActorConfig, StageSpec
from areal_adv.trainer.ppo.actor import PPOActor

EMITTED = (
    "advantages",
    "returns",
    "loss_mask",
    "logprobs",
    "kl_rewards",
    "tot_rewards",
    "prox_logp",
    "is_truncated",
    "rewards",
)


def storages(batch):
    return {k: v.untyped_storage().data_ptr() for k, v in batch.items() if torch.is_tensor(v)}


SELF_CONTAINED = "examples.custom_advantage.plugins.sequence_reinforce"


@pytest.mark.parametrize(
    "cfg",
    [
        PPOActorConfig(),
        PPOActorConfig(use_decoupled_loss=True),
        PPOActorConfig(recompute_logprob=True),
        PPOActorConfig(advantage=AdvantageConfig(compute=StageSpec(SELF_CONTAINED))),
        PPOActorConfig(
            advantage=AdvantageConfig(compute=StageSpec("examples.custom_advantage.plugins.default_replica"))
        ),
    ],
    ids=["default", "decoupled", "recompute", "self-contained-replacement", "default-replica"],
)
def test_emitted_fields_never_share_memory_with_the_caller(cfg):
    batch, meta = make_batch(40, integer_rewards=True)
    batch["prox_logp"] = -torch.rand_like(batch["logprobs"])
    batch["is_truncated"] = batch["is_truncated"].bool()
    caller = set(storages(batch).values())
    before = {k: v.clone() for k, v in batch.items()}
    out = PPOActor(cfg).compute_advantages(batch, meta)
    # that replacement returns no is_truncated extra, so the caller's flags pass through unchanged
    emitted = [
        k for k in EMITTED if not (k == "is_truncated" and cfg.advantage.compute.implementation == SELF_CONTAINED)
    ]
    for key in emitted:
        if key in out:
            assert out[key].untyped_storage().data_ptr() not in caller, key
            out[key].zero_()  # editing the result in place...
    for key, value in before.items():  # ...never edits the caller's batch
        assert torch.equal(batch[key], value), key
    for key in ("input_ids", "attention_mask", "values", "ref_logp"):  # passed through, by design
        assert out[key] is batch[key]


def test_prox_logp_is_logprobs_without_decoupled_loss():
    """The one documented sharing: without use_decoupled_loss the proximal policy is the behaviour policy."""
    batch, meta = make_batch(41)
    out = PPOActor(PPOActorConfig()).compute_advantages(batch, meta)
    assert out["prox_logp"] is out["logprobs"]


def test_default_replica_accepts_integer_task_rewards_and_equals_default():
    """The documented replica used to fail on integer rewards (the full-replacement contract wanted floats)."""
    batch, meta = make_batch(42, integer_rewards=True)
    cfg = dict(reward_norm=NormConfig(mean_level="group", std_level="group"), adv_norm=NormConfig())
    default = PPOActor(PPOActorConfig(**cfg)).compute_advantages(batch, meta)
    replica = PPOActor(
        PPOActorConfig(
            **cfg, advantage=AdvantageConfig(compute=StageSpec("examples.custom_advantage.plugins.default_replica"))
        )
    ).compute_advantages(batch, meta)
    assert_same(replica, default)
    assert replica["rewards"].dtype == default["rewards"].dtype == torch.long


def test_list_kwargs_are_fresh_on_every_call():
    """A plugin that mutates its kwargs cannot carry state into later calls or other workers."""
    plugin_fixtures.KWARGS_SEEN.clear()
    cfg = PPOActorConfig(
        advantage=AdvantageConfig(
            outcome_reward_shaping=StageSpec("plugin_fixtures.appends_to_kwargs", {"history": []})
        )
    )
    actor = PPOActor(cfg)
    batch, meta = make_batch(43)
    for _ in range(3):
        actor.compute_advantages(batch, meta)
    assert plugin_fixtures.KWARGS_SEEN == [[0], [0], [0]]
    assert actor.config.advantage.outcome_reward_shaping.kwargs == {"history": []}


def test_caller_config_edits_after_init_have_no_effect():
    cfg = PPOActorConfig(kl_ctl=0.1)
    actor = PPOActor(cfg)
    batch, meta = make_batch(44)
    first = actor.compute_advantages(batch, meta)
    cfg.kl_ctl = 5.0
    cfg.adv_norm = NormConfig()
    assert_same(actor.compute_advantages(batch, meta), first)
    assert actor.config.kl_ctl == 0.1 and actor.config is not cfg


def test_a_plugin_editing_its_config_copy_changes_nothing_else():
    """The edit is reported, and the actor's own config is untouched by it."""
    from areal_adv.trainer.ppo.checks.contracts import StageContractError

    actor = PPOActor(
        PPOActorConfig(
            advantage=AdvantageConfig(outcome_reward_shaping=StageSpec("plugin_fixtures.outcome_edits_config")),
            kl_ctl=0.1,
        )
    )
    batch, meta = make_batch(45)
    with pytest.raises(StageContractError, match=r"config\.kl_ctl"):
        actor.compute_advantages(batch, meta)
    assert actor.config.kl_ctl == 0.1
