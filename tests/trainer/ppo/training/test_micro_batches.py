"""Micro-batches with gradient accumulation (`actor.ppo_micro_batch_size`) equal the one-pass update.

The 2-rank DDP / FSDP2 form is checked in tests/trainer/parallel/test_distributed_training.py.
"""

from __future__ import annotations

import copy

import pytest
import torch

from areal_adv.api.cli_args import ConfigError, PPOActorConfig
from areal_adv.api.train_args import ModelConfig
from areal_adv.trainer.lm.model import build_policy
from areal_adv.trainer.parallel.engine import NonFiniteLossError, PolicyEngine
from areal_adv.trainer.parallel.micro_batches import chunked_rows, micro_slices
from areal_adv.trainer.ppo.training.update import ppo_update

SPECIAL = {"pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}
MODEL = ModelConfig(hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64)
VOCAB, PROMPT, WIDTH = 24, 4, 9


def _batch(n_groups: int = 3, group: int = 3) -> dict[str, torch.Tensor]:
    """GRPO-like rows: each group shares its prompt; continuations of different lengths (right-padded)."""
    gen = torch.Generator().manual_seed(0)
    rows = []
    for _ in range(n_groups):
        prompt = torch.randint(3, VOCAB, (PROMPT,), generator=gen)
        for _ in range(group):
            length = int(torch.randint(PROMPT + 1, WIDTH + 1, (1,), generator=gen))
            ids = torch.zeros(WIDTH, dtype=torch.long)
            ids[:PROMPT] = prompt
            ids[PROMPT:length] = torch.randint(3, VOCAB, (length - PROMPT,), generator=gen)
            rows.append((ids, length))
    ids = torch.stack([r[0] for r in rows])
    pos = torch.arange(WIDTH)[None, :]
    lengths = torch.tensor([r[1] for r in rows])[:, None]
    attention = (pos < lengths).long()
    loss_mask = ((pos >= PROMPT - 1) & (pos < lengths - 1)).long()  # aligned: predicts a generated token
    return {
        "input_ids": ids,
        "attention_mask": attention,
        "loss_mask": loss_mask,
        "logprobs": (-2.5 + 0.3 * torch.randn(ids.shape, generator=gen)) * loss_mask,
        "advantages": torch.randn(ids.shape, generator=gen) * loss_mask,
    }


def _engine() -> PolicyEngine:
    torch.manual_seed(3)
    return PolicyEngine(build_policy(MODEL, VOCAB, SPECIAL), lr=1e-3, grad_clip=1e9)


def _update(size: int | None, minibatches: int = 1, **config) -> tuple[PolicyEngine, dict[str, float], list]:
    engine = _engine()
    cfg = PPOActorConfig(ppo_n_minibatches=minibatches, ppo_micro_batch_size=size, **config)
    stats = ppo_update(cfg, engine, _batch())
    grads = [p.grad.clone() for p in engine.model.parameters()]
    return engine, stats, grads


@pytest.mark.parametrize("size", [1, 2, 4, 8])
@pytest.mark.parametrize("minibatches", [1, 2])
def test_accumulated_gradient_equals_the_one_pass_gradient(size: int, minibatches: int) -> None:
    _, whole_stats, whole_grads = _update(None, minibatches)
    _, micro_stats, micro_grads = _update(size, minibatches)
    worst = max((a - b).abs().max().item() for a, b in zip(whole_grads, micro_grads))
    assert worst <= 1e-6, worst
    assert max(g.abs().max().item() for g in whole_grads) > 1e-3  # a real gradient, not zeros
    assert set(micro_stats) == set(whole_stats)
    for key, value in whole_stats.items():
        assert micro_stats[key] == pytest.approx(value, rel=1e-5, abs=1e-6), key


def test_accumulation_holds_for_the_decoupled_and_dual_clip_loss() -> None:
    batch = _batch()
    extra = dict(use_decoupled_loss=True, c_clip=2.0, behav_imp_weight_cap=5.0, eps_clip=0.1)
    grads = []
    for size in (None, 3):
        engine = _engine()
        data = {**batch, "prox_logp": batch["logprobs"] + 0.2 * batch["loss_mask"]}
        ppo_update(PPOActorConfig(ppo_micro_batch_size=size, **extra), engine, data)
        grads.append(torch.cat([p.grad.reshape(-1) for p in engine.model.parameters()]))
    assert (grads[0] - grads[1]).abs().max().item() <= 1e-6


def test_a_later_forward_keeps_the_accumulated_gradient_and_the_first_frees_it() -> None:
    engine, batch = _engine(), _batch()
    for index in range(2):
        with engine.micro_batch(index, 2):
            logp, _ = engine.forward_logprobs(batch["input_ids"][index : index + 1], batch["attention_mask"][:1], 1.0)
            engine.backward(logp.sum())
        if index == 0:
            first = engine.model.lm_head.weight.grad.clone()
    assert not torch.equal(first, engine.model.lm_head.weight.grad)  # the second backward added to the first
    engine.forward_logprobs(batch["input_ids"][:1], batch["attention_mask"][:1], 1.0)  # a new step
    assert engine.model.lm_head.weight.grad is None


def test_non_finite_micro_batch_drops_the_accumulated_gradient() -> None:
    engine, batch = _engine(), _batch()
    before = [p.detach().clone() for p in engine.model.parameters()]
    with engine.micro_batch(0, 2):
        logp, _ = engine.forward_logprobs(batch["input_ids"], batch["attention_mask"], 1.0)
        engine.backward(logp.mean())
    with pytest.raises(NonFiniteLossError, match="non-finite loss nan"), engine.micro_batch(1, 2):
        logp, _ = engine.forward_logprobs(batch["input_ids"], batch["attention_mask"], 1.0)
        engine.backward(logp.mean() * float("nan"))
    assert all(p.grad is None for p in engine.model.parameters())
    assert all(torch.equal(a, b) for a, b in zip(before, engine.model.parameters()))


def test_chunked_log_prob_pass_equals_the_whole_pass() -> None:
    engine, batch = _engine(), _batch()
    ids, mask, wanted = batch["input_ids"], batch["attention_mask"], batch["loss_mask"]
    whole = engine.compute_logprobs(ids, mask, 1.0, wanted=wanted)
    chunks = micro_slices(ids.shape[0], 4)
    assert [s.stop - s.start for s in chunks] == [3, 3, 3]
    parts = chunked_rows(lambda i, m, w: engine.compute_logprobs(i, m, 1.0, wanted=w), chunks, ids, mask, wanted)
    torch.testing.assert_close(parts, whole, rtol=0, atol=1e-6)


@pytest.mark.parametrize(
    ("rows", "size", "expected"),
    [(9, None, [9]), (9, 4, [3, 3, 3]), (8, 4, [4, 4]), (3, 8, [3]), (5, 1, [1, 1, 1, 1, 1])],
)
def test_micro_slices_cover_the_rows_in_chunks_of_at_most_size(
    rows: int, size: int | None, expected: list[int]
) -> None:
    slices = micro_slices(rows, size)
    assert [s.stop - s.start for s in slices] == expected
    assert slices[0].start == 0 and slices[-1].stop == rows


def test_micro_batches_need_an_engine_that_accumulates() -> None:
    class StepOnly:
        def forward_logprobs(self, input_ids, attention_mask, temperature, *, with_entropy=False):
            return torch.zeros(input_ids.shape, requires_grad=True), torch.zeros(input_ids.shape)

        def optimizer_step(self, loss):
            return 0.0

    with pytest.raises(TypeError, match=r"actor.ppo_micro_batch_size=2 needs an engine with micro_batch"):
        ppo_update(PPOActorConfig(ppo_micro_batch_size=2), StepOnly(), _batch())
    data = _batch()
    snapshot = copy.deepcopy(data)
    ppo_update(PPOActorConfig(ppo_micro_batch_size=None), StepOnly(), data)  # one pass: any engine
    assert all(torch.equal(data[k], snapshot[k]) for k in data)


@pytest.mark.parametrize("bad", [0, -2, 1.5, True, "4"])
def test_bad_micro_batch_size_names_the_field(bad: object) -> None:
    with pytest.raises(
        ConfigError,
        match=r"^actor.ppo_micro_batch_size: got .*, expected null \(the whole "
        r"minibatch\) or an integer >= 1",
    ):
        PPOActorConfig(ppo_micro_batch_size=bad)
