"""PPO policy/value losses and the minibatch update (pure, hand-checkable cases)."""

from __future__ import annotations

import math

import pytest
import torch

from areal_adv.api.cli_args import PPOActorConfig
from areal_adv.trainer.ppo.training.loss import clipped_value_loss, masked_mean, ppo_policy_loss
from areal_adv.trainer.ppo.training.update import minibatch_slices, ppo_update


def _loss(logp, prox, adv, mask, **kw):
    logp, prox, adv, mask = (torch.tensor([x], dtype=torch.float32) for x in (logp, prox, adv, mask))
    old = kw.pop("old", None)
    old = prox if old is None else torch.tensor([old], dtype=torch.float32)
    return ppo_policy_loss(logp, prox, old, adv, mask, **kw)


def test_on_policy_loss_is_minus_mean_advantage_over_active_tokens() -> None:
    loss, stats = _loss([-1.0, -2.0, -3.0], [-1.0, -2.0, -3.0], [1.0, -3.0, 100.0], [1, 1, 0], eps_clip=0.2)
    assert loss.item() == pytest.approx(1.0)  # -(1 - 3) / 2 ; the masked token is ignored
    assert stats.clip_frac == 0.0 and stats.approx_kl == 0.0


def test_clipping_uses_the_pessimistic_bound_and_eps_clip_higher() -> None:
    up = math.log(1.5)
    loss, stats = _loss([up], [0.0], [1.0], [1], eps_clip=0.2)
    assert loss.item() == pytest.approx(-1.2) and stats.clip_frac == 1.0
    loss, _ = _loss([up], [0.0], [1.0], [1], eps_clip=0.2, eps_clip_higher=0.28)
    assert loss.item() == pytest.approx(-1.28)
    down = math.log(0.5)
    loss, stats = _loss([down], [0.0], [-1.0], [1], eps_clip=0.2)
    assert loss.item() == pytest.approx(0.8) and stats.clip_frac == 1.0


def test_dual_clip_caps_negative_advantage_loss() -> None:
    big = math.log(5.0)
    loss, stats = _loss([big], [0.0], [-1.0], [1], eps_clip=0.2)
    assert loss.item() == pytest.approx(5.0)
    loss, stats = _loss([big], [0.0], [-1.0], [1], eps_clip=0.2, c_clip=3.0)
    assert loss.item() == pytest.approx(3.0) and stats.dual_clip_frac == 1.0
    loss, _ = _loss([big], [0.0], [1.0], [1], eps_clip=0.2, c_clip=3.0)  # positive advantages untouched
    assert loss.item() == pytest.approx(-1.2)


def test_decoupled_loss_weights_by_behaviour_ratio_and_caps() -> None:
    w = 1.5
    loss, stats = _loss(
        [0.0, 0.0], [0.0, 0.0], [1.0, 1.0], [1, 1], eps_clip=0.2, decoupled=True, old=[-math.log(w), -math.log(10.0)]
    )
    assert loss.item() == pytest.approx(-(w + 10.0) / 2)
    loss, stats = _loss(
        [0.0, 0.0],
        [0.0, 0.0],
        [1.0, 1.0],
        [1, 1],
        eps_clip=0.2,
        decoupled=True,
        old=[-math.log(w), -math.log(10.0)],
        behav_imp_weight_cap=5.0,
    )
    assert loss.item() == pytest.approx(-w / 2)  # the capped token is dropped but still counted
    assert stats.behav_mask_frac == pytest.approx(0.5)


def test_policy_loss_gradient_only_flows_through_active_tokens() -> None:
    logp = torch.zeros(1, 3, requires_grad=True)
    loss, _ = ppo_policy_loss(
        logp, torch.zeros(1, 3), torch.zeros(1, 3), torch.ones(1, 3), torch.tensor([[1, 0, 1]]), eps_clip=0.2
    )
    loss.backward()
    assert logp.grad.tolist() == [[-0.5, 0.0, -0.5]]


def test_value_loss_clips_around_the_rollout_values() -> None:
    values, old, ret = torch.tensor([[1.0, 0.0]]), torch.tensor([[0.0, 0.0]]), torch.tensor([[2.0, 0.5]])
    loss, clip_frac = clipped_value_loss(values, old, ret, torch.tensor([[1, 0]]), value_eps_clip=0.2)
    # clipped value 0.2: max((1-2)^2, (0.2-2)^2) = 3.24 ; 0.5 * 3.24
    assert loss.item() == pytest.approx(1.62) and clip_frac == 1.0


def test_masked_mean_of_an_empty_mask_is_zero() -> None:
    assert masked_mean(torch.ones(2, 2), torch.zeros(2, 2)).item() == 0.0


@pytest.mark.parametrize("rows,n,expected", [(8, 2, [4, 4]), (5, 2, [2, 3]), (2, 4, [1, 1]), (7, 1, [7])])
def test_minibatch_slices_cover_all_rows(rows: int, n: int, expected: list[int]) -> None:
    slices = minibatch_slices(rows, n)
    assert [s.stop - s.start for s in slices] == expected
    assert slices[0].start == 0 and slices[-1].stop == rows


class _RecordingEngine:
    """A linear 'policy' over positions: log-probs = theta, so steps are observable."""

    def __init__(self, width: int) -> None:
        self.theta = torch.zeros(width, requires_grad=True)
        self.opt = torch.optim.SGD([self.theta], lr=0.1)
        self.rows_seen: list[int] = []

    def forward_logprobs(self, input_ids, attention_mask, temperature, *, with_entropy=False):
        self.rows_seen.append(input_ids.shape[0])
        logp = self.theta[: input_ids.shape[1]].expand(input_ids.shape[0], -1) - 1.0
        return logp, torch.zeros_like(logp)

    def optimizer_step(self, loss):
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        return 0.0


def _batch(rows: int = 4, width: int = 3) -> dict[str, torch.Tensor]:
    return {
        "input_ids": torch.ones(rows, width, dtype=torch.long),
        "attention_mask": torch.ones(rows, width, dtype=torch.long),
        "loss_mask": torch.tensor([[1, 1, 0]] * rows),
        "logprobs": torch.full((rows, width), -1.0),
        "advantages": torch.ones(rows, width),
    }


def test_ppo_update_one_step_per_minibatch_and_stats() -> None:
    engine = _RecordingEngine(3)
    stats = ppo_update(PPOActorConfig(ppo_n_minibatches=2), engine, _batch())
    assert engine.rows_seen == [2, 2]
    assert engine.theta[0].item() > 0 and engine.theta[2].item() == 0.0  # masked position untouched
    assert set(stats) >= {"policy_loss", "entropy", "clip_frac", "approx_kl", "grad_norm"}
    assert stats["policy_loss"] < 0


def test_ppo_update_decoupled_needs_prox_logp() -> None:
    with pytest.raises(ValueError, match="prox_logp"):
        ppo_update(PPOActorConfig(use_decoupled_loss=True, recompute_logprob=True), _RecordingEngine(3), _batch())


def test_ppo_update_rejects_a_batch_without_advantages() -> None:
    batch = _batch()
    del batch["advantages"]
    with pytest.raises(KeyError, match="advantages"):
        ppo_update(PPOActorConfig(), _RecordingEngine(3), batch)
