"""The proximal log-probs taken from the update's own forward (`ppo_update(proximal_from_forward=True)`).

With one minibatch the training forward runs on the weights the proximal policy means, so its
detached log-probs must give the update that a batch carrying those same log-probs as `prox_logp`
gives (verl's on-policy shortcut). Checked against the update with a separately computed
`prox_logp`, whole and in micro-batches; `observe` sees every micro-batch; the two misuses raise;
and `logprobs_in_update` takes the shortcut only where nothing reads the log-probs before the update.
"""

from __future__ import annotations

import pytest
import torch
from test_micro_batches import _batch, _engine

from areal_adv.api.cli_args import PPOActorConfig, load_config
from areal_adv.trainer.parallel.engine import PolicyEngine
from areal_adv.trainer.ppo.training.rollout_mismatch import mismatch_sums
from areal_adv.trainer.ppo.training.update import ppo_update
from areal_adv.trainer.run.training_logprobs import MismatchObserver, logprobs_in_update, needs_training_logprobs

CAP = 0.6  # the untrained model's weights are 0.25-0.9 on this batch: some tokens above, some below
DECOUPLED = dict(use_decoupled_loss=True, behav_imp_weight_cap=CAP, eps_clip=0.1, c_clip=2.0)


def _separate_prox(engine: PolicyEngine, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """The proximal log-probs as the trainer's pass before the update computes them (no gradient)."""
    with torch.no_grad():
        logp, _ = engine.forward_logprobs(batch["input_ids"], batch["attention_mask"], 1.0, wanted=batch["loss_mask"])
    return logp * batch["loss_mask"]


def _params(engine: PolicyEngine) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in engine.model.parameters()])


@pytest.mark.parametrize("size", [None, 2])
def test_the_forward_proximal_gives_the_update_of_a_separate_pass(size: int | None) -> None:
    batch = _batch()
    config = PPOActorConfig(ppo_micro_batch_size=size, **DECOUPLED)
    separate = _engine()
    start = _params(separate)
    prox = _separate_prox(separate, batch)
    stats_separate = ppo_update(config, separate, {**batch, "prox_logp": prox})
    in_update = _engine()
    stats_forward = ppo_update(config, in_update, batch, proximal_from_forward=True)
    # the behaviour weights drop some tokens and keep others: the cap is exercised, not bypassed
    weights = (prox - batch["logprobs"]).exp()[batch["loss_mask"].bool()]
    assert (weights > CAP).any() and (weights <= CAP).any()
    moved = (_params(separate) - start).abs().max().item()
    worst = (_params(separate) - _params(in_update)).abs().max().item()
    assert moved > 1e-4 and worst <= 1e-6 * moved / 1e-4, (moved, worst)
    assert set(stats_forward) == set(stats_separate)
    for key, value in stats_separate.items():
        assert stats_forward[key] == pytest.approx(value, rel=1e-5, abs=1e-6), key
    assert stats_forward["approx_kl"] == 0.0  # the ratio is exactly 1 at the proximal policy


def test_observe_sees_every_micro_batch_and_its_sums_equal_the_whole_batch() -> None:
    batch = _batch()
    seen: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []
    observer = MismatchObserver(CAP)

    def observe(behaviour: torch.Tensor, training: torch.Tensor, mask: torch.Tensor) -> None:
        seen.append((behaviour, training, mask))
        observer(behaviour, training, mask)

    engine = _engine()
    prox = _separate_prox(engine, batch)
    ppo_update(
        PPOActorConfig(ppo_micro_batch_size=4, **DECOUPLED), engine, batch, observe=observe, proximal_from_forward=True
    )
    assert len(seen) == 3  # 9 rows in micro-batches of 4
    assert sum(int(m.sum()) for _, _, m in seen) == int(batch["loss_mask"].sum())
    assert all(not t.requires_grad for _, t, _ in seen)
    whole = mismatch_sums(batch["logprobs"], prox, batch["loss_mask"], CAP)
    got = observer.sums
    assert got.tokens == whole.tokens and got.capped == whole.capped
    assert got.kl_sum == pytest.approx(whole.kl_sum, rel=1e-5) and got.k3_sum == pytest.approx(whole.k3_sum, rel=1e-4)
    assert got.weight_max == pytest.approx(whole.weight_max, rel=1e-5)


def test_misuses_name_what_is_needed() -> None:
    with pytest.raises(ValueError, match=r"proximal_from_forward=True needs actor\.use_decoupled_loss=true"):
        ppo_update(PPOActorConfig(), _engine(), _batch(), proximal_from_forward=True)
    with pytest.raises(ValueError, match=r"needs one minibatch \(actor\.ppo_n_minibatches=1\), got 2"):
        ppo_update(PPOActorConfig(ppo_n_minibatches=2, **DECOUPLED), _engine(), _batch(), proximal_from_forward=True)


DEFAULT = "examples/grpo_arith.yaml"
BF16 = "rollout.weights_dtype=bfloat16"
DECOUPLED_SET = "actor.use_decoupled_loss=true"
ONE = "actor.ppo_n_minibatches=1"  # the example takes 2 optimiser steps per batch


@pytest.mark.parametrize(
    "overrides,needed,in_update",
    [
        ([ONE], False, False),  # nothing reads them: no pass at all
        ([ONE, BF16], True, True),  # the mismatch only
        ([ONE, DECOUPLED_SET], True, True),
        ([ONE, BF16, DECOUPLED_SET, "actor.recompute_logprob=true"], True, True),
        ([ONE, "actor.recompute_logprob=true"], True, False),  # they enter the advantages, computed first
        ([BF16, DECOUPLED_SET], True, False),  # 2 minibatches: the second step's weights are not the proximal ones
        ([ONE, BF16, DECOUPLED_SET, "diagnostics.estimators=[rloo]"], True, False),
        ([ONE, BF16, DECOUPLED_SET, "output.save_rollouts=true"], True, False),
        ([ONE, BF16, DECOUPLED_SET, "rollout.filter_zero_advantage=true"], True, False),
    ],
)
def test_the_update_supplies_them_only_where_nothing_reads_them_first(
    overrides: list[str], needed: bool, in_update: bool
) -> None:
    from pathlib import Path

    cfg = load_config(Path(__file__).resolve().parents[4] / DEFAULT, overrides)
    assert needs_training_logprobs(cfg) is needed
    assert logprobs_in_update(cfg) is in_update


def test_a_model_with_dropout_keeps_the_pass_before_the_update() -> None:
    """The pass before the update runs in eval mode; a training forward with dropout is not the proximal policy."""
    from areal_adv.trainer.run.training_logprobs import stochastic_forward

    engine = _engine()
    assert not stochastic_forward(engine.model)
    engine.model.config.attention_dropout = 0.1  # transformers' attention draws it in training mode
    assert stochastic_forward(engine.model)
    engine.model.config.attention_dropout = 0.0
    engine.model.model.layers[0].mlp.add_module("dropout", torch.nn.Dropout(0.2))
    assert stochastic_forward(engine.model)
