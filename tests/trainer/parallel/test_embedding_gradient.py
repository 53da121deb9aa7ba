"""A tied lookup table's gradient added sparsely (areal_adv.trainer.parallel.embedding_gradient).

The engine's gradient, clipping and AdamW step with the sparse lookup backward
are compared with torch's dense backward on the same tied model: same values up
to float rounding in rows whose token repeats, one dense `.grad`, and the
engines only switch it on where it is safe.
"""

from __future__ import annotations

import copy

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st
from transformers import AutoModelForCausalLM, LlamaConfig

from areal_adv.api.train_args import LoraConfig
from areal_adv.trainer.lm.model import with_lora
from areal_adv.trainer.parallel.embedding_gradient import add_lookup_gradient_sparsely, tied_embedding
from areal_adv.trainer.parallel.engine import PolicyEngine

VOCAB = 40
EPS, ULPS = torch.finfo(torch.float32).eps, 32  # a sum of at most 24 tokens' rows plus the projection's


def tied_model(seed: int = 0, tied: bool = True) -> torch.nn.Module:
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        tie_word_embeddings=tied,
        pad_token_id=0,
    )
    return AutoModelForCausalLM.from_config(config).train()


def loss_of(engine: PolicyEngine, ids: torch.Tensor) -> torch.Tensor:
    mask = torch.ones_like(ids)
    logp, _ = engine.forward_logprobs(ids, mask, 1.0)
    return -(logp[:, :-1]).mean()


def dense_and_sparse(seed: int = 0) -> tuple[PolicyEngine, PolicyEngine]:
    model = tied_model(seed)
    dense = PolicyEngine(copy.deepcopy(model), lr=1e-2)
    dense.model.get_input_embeddings().sparse = False  # torch's default backward, the reference
    sparse = PolicyEngine(model, lr=1e-2)
    assert sparse.sparse_lookup_gradient
    return dense, sparse


def test_the_engine_adds_a_tied_lookup_gradient_sparsely_and_only_then() -> None:
    assert PolicyEngine(tied_model(), lr=1e-2).sparse_lookup_gradient
    assert tied_embedding(tied_model()) is not None
    untied = PolicyEngine(tied_model(tied=False), lr=1e-2)
    assert not untied.sparse_lookup_gradient and not untied.model.get_input_embeddings().sparse
    frozen = with_lora(tied_model(), LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    assert not add_lookup_gradient_sparsely(frozen)  # adapters only: the table gets no gradient at all


@settings(max_examples=25, deadline=None)
@example(rows=[[1] * 6, [1] * 6])  # found by hypothesis: twelve equal rows summed beat a 1e-6 relative bound
@given(rows=st.lists(st.lists(st.integers(1, VOCAB - 1), min_size=6, max_size=6), min_size=1, max_size=4))
def test_the_gradient_and_the_step_equal_the_dense_backward(rows: list[list[int]]) -> None:
    ids = torch.tensor(rows)  # repeated tokens within and across rows are the case that sums rows
    dense, sparse = dense_and_sparse()
    for engine in (dense, sparse):
        engine.optimizer.zero_grad(set_to_none=True)
        engine.backward(loss_of(engine, ids))
    table = sparse.model.get_input_embeddings().weight
    assert table.grad is not None and table.grad.layout == torch.strided and table.grad.is_contiguous()
    for a, b in zip(dense.model.parameters(), sparse.model.parameters()):
        if b is table:  # the rows' terms are summed in another order: within a few float32 ulps of the largest
            torch.testing.assert_close(b.grad, a.grad, rtol=0.0, atol=ULPS * EPS * float(a.grad.abs().max()))
        else:  # nothing else reads the table's gradient: bit for bit
            assert torch.equal(b.grad, a.grad)
    assert sparse.apply_gradients() == pytest.approx(dense.apply_gradients(), rel=1e-6)
    for a, b in zip(dense.model.parameters(), sparse.model.parameters()):
        torch.testing.assert_close(b, a, rtol=1e-6, atol=1e-7)


def test_micro_batches_accumulate_into_one_dense_gradient() -> None:
    ids = torch.tensor([[3, 4, 3, 5, 3, 6], [7, 3, 8, 3, 9, 3]])
    whole, split = dense_and_sparse()
    whole.optimizer.zero_grad(set_to_none=True)
    whole.backward(loss_of(whole, ids))
    split.optimizer.zero_grad(set_to_none=True)
    for j in range(2):
        with split.micro_batch(j, 2):
            split.backward(loss_of(split, ids[j : j + 1]) / 2)
    for a, b in zip(whole.model.parameters(), split.model.parameters()):
        torch.testing.assert_close(b.grad, a.grad, rtol=1e-6, atol=ULPS * EPS * float(a.grad.abs().max()))
