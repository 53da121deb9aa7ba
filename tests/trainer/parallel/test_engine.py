"""Engines in one process (areal_adv.trainer.parallel.engine); the DDP / FSDP2 paths run in test_distributed_training.py."""

from __future__ import annotations

import io

import pytest
import torch

from areal_adv.api.cli_args import ConfigError, load_config
from areal_adv.api.train_args import ModelConfig
from areal_adv.trainer.lm.model import build_critic, build_policy
from areal_adv.trainer.main import DEFAULT_CONFIG
from areal_adv.trainer.parallel.engine import (
    NonFiniteLossError,
    PolicyEngine,
    ValueEngine,
    _block_class_names,
    full_state_dict,
)

SPECIAL = {"pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}
MODEL = ModelConfig(hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64)
IDS = torch.tensor([[1, 5, 6, 7, 8], [1, 9, 10, 0, 0]])
MASK = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])


def engine(seed: int = 0, **kwargs) -> PolicyEngine:
    torch.manual_seed(seed)
    return PolicyEngine(build_policy(MODEL, 24, SPECIAL), lr=1e-2, **kwargs)


def flat(eng: PolicyEngine) -> torch.Tensor:
    return torch.cat([t.reshape(-1) for t in full_state_dict(eng.model).values()]).clone()


def loss_of(eng: PolicyEngine) -> torch.Tensor:
    logp, _ = eng.forward_logprobs(IDS, MASK, 1.0)
    return -(logp * MASK).sum() / MASK.sum()


def test_one_process_engine_trains_the_plain_module_without_any_wrapper() -> None:
    eng = engine(parallel="fsdp")  # ignored without a process group
    assert eng.parallel is None and eng.train_module is eng.model and eng.sampler is eng.model
    assert eng.backward_scale == 1.0
    before = flat(eng)
    norm = eng.optimizer_step(loss_of(eng))
    assert norm > 0 and not torch.equal(before, flat(eng))
    eng.sync_copies()  # a no-op: the rollout model is the trained module


def test_unknown_parallel_mode_names_the_choices() -> None:
    with pytest.raises(ValueError, match=r"engine parallel: got 'zero3', expected one of \['ddp', 'fsdp'\]"):
        engine(parallel="zero3")


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_loss_is_refused_before_backward(bad: float) -> None:
    eng = engine()
    before = flat(eng)
    with pytest.raises(NonFiniteLossError, match="non-finite loss") as info:
        eng.optimizer_step(loss_of(eng) * bad)
    assert info.value.failed_ranks == [0]
    assert torch.equal(before, flat(eng)) and all(p.grad is None for p in eng.model.parameters())


def test_non_finite_gradient_is_refused_before_the_step() -> None:
    eng = engine()
    before = flat(eng)
    weight = eng.model.lm_head.weight
    loss = torch.sqrt((weight - weight.detach()).abs().sum())  # value 0, gradient 0 * inf = nan
    with pytest.raises(NonFiniteLossError, match="non-finite gradient norm nan"):
        eng.optimizer_step(loss)
    assert torch.equal(before, flat(eng)) and all(p.grad is None for p in eng.model.parameters())


def test_state_dict_restores_a_fresh_engine_exactly() -> None:
    a = engine(seed=0)
    a.optimizer_step(loss_of(a))
    buffer = io.BytesIO()
    torch.save(a.state_dict(), buffer)
    buffer.seek(0)
    b = engine(seed=1)
    b.load_state_dict(torch.load(buffer))
    assert torch.equal(flat(a), flat(b))
    a.optimizer_step(loss_of(a))
    b.optimizer_step(loss_of(b))
    assert torch.equal(flat(a), flat(b))  # optimiser moments and step count came along


def test_no_grad_forwards_keep_the_training_mode_and_match_the_training_forward() -> None:
    eng = engine()
    with torch.no_grad():
        trained, _ = eng.forward_logprobs(IDS, MASK, 0.7)
    assert torch.equal(eng.compute_logprobs(IDS, MASK, 0.7), trained) and eng.model.training
    torch.manual_seed(0)
    critic = ValueEngine(build_critic(MODEL, 24, SPECIAL), lr=1e-2)
    with torch.no_grad():
        values = critic.forward_values(IDS, MASK)
    assert torch.equal(critic.compute_values(IDS, MASK), values) and critic.model.training


def test_fsdp_shards_every_transformer_block() -> None:
    torch.manual_seed(0)
    assert _block_class_names(build_policy(MODEL, 24, SPECIAL)) == {"LlamaDecoderLayer"}
    assert "LlamaDecoderLayer" in _block_class_names(build_critic(MODEL, 24, SPECIAL))


@pytest.mark.parametrize(
    "override,field",
    [
        ("train.parallel=zero3", r"train\.parallel: got 'zero3', expected one of \['ddp', 'fsdp'\]"),
        ("train.failure_timeout_s=0", r"train\.failure_timeout_s: got 0"),
    ],
)
def test_parallel_config_errors_name_the_field(override: str, field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        load_config(DEFAULT_CONFIG, [override])


def test_bf16_mixed_precision_keeps_float32_weights_gradients_and_adamw_state() -> None:
    fp32, mixed = engine(), engine(mixed_precision="bf16")
    reference, loss = loss_of(fp32), loss_of(mixed)
    assert loss.dtype == torch.float32 and loss.item() != reference.item()  # the matmuls did run in bfloat16
    assert loss.item() == pytest.approx(reference.item(), rel=2e-2)
    norm = mixed.optimizer_step(loss)
    assert norm == pytest.approx(fp32.optimizer_step(reference), rel=5e-2)
    assert all(p.dtype == torch.float32 and p.grad.dtype == torch.float32 for p in mixed.model.parameters())
    states = [s for state in mixed.optimizer.state.values() for k, s in state.items() if k != "step"]
    assert states and all(s.dtype == torch.float32 for s in states)
    values = ValueEngine(build_critic(MODEL, 24, SPECIAL), lr=1e-2, mixed_precision="bf16")
    assert values.compute_values(IDS, MASK).dtype == torch.float32


def test_unknown_mixed_precision_names_the_choices() -> None:
    with pytest.raises(ValueError, match=r"engine mixed_precision: got 'fp16', expected None or 'bf16'"):
        engine(mixed_precision="fp16")
