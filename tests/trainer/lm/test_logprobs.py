"""Log-probs at only the wanted positions (areal_adv.trainer.lm.logprobs): response-only and shared-prefix packing.

* response-only log-probs and entropies equal the dense forward's at the wanted positions, bit for bit,
  and are 0 elsewhere;
* packing rows that share their prompt gives the per-row results up to float rounding - log-probs,
  entropies and the gradient of a loss over them - for any grouping, prompt and continuation lengths,
  multi-turn masks with gaps and rows with nothing wanted (hypothesis);
* the packed layout itself: one prompt per group, each continuation after it, positions restarting
  after the prompt, and a mask under which a continuation sees the prompt and itself only;
* `AREAL_SHARED_PREFIX` switches packing off, and `on` refuses a model that cannot take it.
"""

from __future__ import annotations

import random

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from areal_adv.api.train_args import ModelConfig
from areal_adv.trainer.lm.logprobs import (
    SHARED_PREFIX_ENV,
    Selection,
    aligned_from_rollout,
    can_pack,
    dense_logprobs,
    forward_cost,
    pack_shared_prefixes,
    token_logprobs,
)
from areal_adv.trainer.lm.model import build_policy

VOCAB = 40
SPECIAL = {"pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}


def tiny(arch: str = "llama", attn: str = "sdpa", seed: int = 0):
    torch.manual_seed(seed)
    cfg = ModelConfig(
        arch=arch, hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64, attn_implementation=attn
    )
    return build_policy(cfg, VOCAB, SPECIAL)


def grpo_batch(
    group_sizes: list[int], prompt_lengths: list[int], seed: int, *, gaps: bool = False, empty_row: int | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded rows: each group's rows share a prompt; continuations of random length (>= 1).

    `gaps`: some continuation tokens are observations (loss mask 0), as in
    multi-turn episodes; `empty_row`: that row gets no generated token at all.
    """
    rng = random.Random(seed)
    rows = []
    for size, plen in zip(group_sizes, prompt_lengths):
        prompt = [1] + [rng.randrange(3, VOCAB) for _ in range(plen - 1)]
        for _ in range(size):
            cont = [rng.randrange(3, VOCAB) for _ in range(rng.randrange(1, 7))]
            mask = [1 if not gaps or rng.random() < 0.7 else 0 for _ in cont]
            mask[0] = 1
            rows.append((prompt + cont, [0] * plen + mask))
    if empty_row is not None:
        ids, _ = rows[empty_row]
        rows[empty_row] = (ids, [0] * len(ids))
    width = max(len(ids) for ids, _ in rows)
    input_ids = torch.zeros(len(rows), width, dtype=torch.long)
    attention = torch.zeros_like(input_ids)
    loss_mask = torch.zeros_like(input_ids)
    for i, (ids, mask) in enumerate(rows):
        input_ids[i, : len(ids)] = torch.tensor(ids)
        attention[i, : len(ids)] = 1
        loss_mask[i, : len(ids)] = torch.tensor(mask)
    return input_ids, attention, loss_mask


def _dense(model, ids, attention, wanted, temperature):
    logp, entropy = dense_logprobs(model(input_ids=ids, attention_mask=attention).logits, ids, temperature, True)
    return logp * wanted, entropy * wanted


@pytest.mark.parametrize("arch,attn", [("llama", "sdpa"), ("llama", "eager"), ("qwen2", "sdpa")])
def test_response_only_equals_the_dense_forward_bit_for_bit(monkeypatch, arch: str, attn: str) -> None:
    monkeypatch.setenv(SHARED_PREFIX_ENV, "off")
    model = tiny(arch, attn).eval()
    ids, attention, loss_mask = grpo_batch([3, 1, 2], [4, 6, 3], seed=1, gaps=True)
    wanted = aligned_from_rollout(loss_mask)
    with torch.no_grad():
        logp, entropy = token_logprobs(model, ids, attention, 0.7, wanted=wanted, with_entropy=True)
        ref_logp, ref_entropy = _dense(model, ids, attention, wanted, 0.7)
    assert torch.equal(logp, ref_logp) and torch.equal(entropy, ref_entropy)
    assert (logp[wanted == 0] == 0).all() and (logp[wanted == 1] < 0).all()


def _loss_and_grads(model, logp, wanted):
    model.zero_grad(set_to_none=True)
    loss = -(logp * wanted).sum() / wanted.sum()
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def _check_packed_matches_per_row(model, ids, attention, loss_mask, temperature) -> None:
    wanted = aligned_from_rollout(loss_mask)
    logp, entropy = token_logprobs(model, ids, attention, temperature, wanted=wanted, with_entropy=True)
    loss, grads = _loss_and_grads(model, logp, wanted)
    ref_logp, ref_entropy = _dense(model, ids, attention, wanted, temperature)
    ref_loss, ref_grads = _loss_and_grads(model, ref_logp, wanted)
    torch.testing.assert_close(logp.detach(), ref_logp.detach(), atol=2e-5, rtol=1e-5)
    torch.testing.assert_close(entropy, ref_entropy, atol=2e-5, rtol=1e-5)
    torch.testing.assert_close(loss, ref_loss, atol=2e-6, rtol=1e-5)
    assert grads.keys() == ref_grads.keys()
    for name in grads:
        torch.testing.assert_close(grads[name], ref_grads[name], atol=1e-6, rtol=1e-4, msg=name)
    assert (logp.detach()[wanted == 0] == 0).all()


@pytest.mark.parametrize("arch,attn", [("llama", "sdpa"), ("llama", "eager"), ("qwen2", "eager")])
def test_packed_groups_equal_the_per_row_forward_and_gradient(arch: str, attn: str) -> None:
    model = tiny(arch, attn, seed=2)
    ids, attention, loss_mask = grpo_batch([4, 4, 1, 3], [5, 3, 7, 4], seed=2)
    selection = Selection.from_wanted(ids, aligned_from_rollout(loss_mask))
    assert pack_shared_prefixes(ids, attention, selection, torch.float32) is not None  # really packed
    _check_packed_matches_per_row(model, ids, attention, loss_mask, 1.0)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    groups=st.lists(st.tuples(st.integers(1, 4), st.integers(1, 6)), min_size=1, max_size=4),
    seed=st.integers(0, 10_000),
    gaps=st.booleans(),
    temperature=st.sampled_from([1.0, 0.6]),
    empty=st.booleans(),
)
def test_packing_matches_per_row_for_any_grouping(groups, seed, gaps, temperature, empty) -> None:
    model = tiny(seed=3)
    sizes, lengths = [g[0] for g in groups], [g[1] for g in groups]
    ids, attention, loss_mask = grpo_batch(sizes, lengths, seed, gaps=gaps, empty_row=0 if empty else None)
    if not (aligned_from_rollout(loss_mask)).any():
        return
    _check_packed_matches_per_row(model, ids, attention, loss_mask, temperature)


def test_the_packed_layout_one_prompt_then_each_continuation() -> None:
    ids = torch.tensor([[1, 5, 6, 7, 0], [1, 5, 8, 0, 0], [1, 9, 10, 11, 12]])
    attention = (ids != 0).long()
    attention[1, 3:] = 0
    loss_mask = torch.tensor([[0, 0, 1, 1, 0], [0, 0, 1, 0, 0], [0, 0, 0, 1, 1]])
    selection = Selection.from_wanted(ids, aligned_from_rollout(loss_mask))
    packed = pack_shared_prefixes(ids, attention, selection, torch.float32)
    by_first_token = {int(row[1]): i for i, row in enumerate(packed.input_ids)}
    shared, alone = by_first_token[5], by_first_token[9]
    assert packed.input_ids[shared].tolist() == [1, 5, 6, 7, 8]  # prompt [1, 5], then [6, 7] and [8]
    assert packed.position_ids[shared].tolist() == [0, 1, 2, 3, 2]
    assert packed.input_ids[alone].tolist() == [1, 9, 10, 11, 12]
    visible = packed.attention_mask[shared, 0] == 0
    assert visible[4].tolist() == [True, True, False, False, True]  # row 1's token sees the prompt and itself
    assert visible[3].tolist() == [True, True, True, True, False]
    # row 0 predicts 6 from the prompt's last position, 7 from 6; row 1 predicts 8 from the prompt too
    pairs = list(
        zip(selection.rows.tolist(), selection.cols.tolist(), packed.src_rows.tolist(), packed.src_cols.tolist())
    )
    assert (0, 1, shared, 1) in pairs and (0, 2, shared, 2) in pairs and (1, 1, shared, 1) in pairs
    assert (2, 2, alone, 2) in pairs and (2, 3, alone, 3) in pairs


def test_no_shared_prompt_no_packing() -> None:
    ids, attention, loss_mask = grpo_batch([1, 1, 1], [3, 3, 4], seed=4)
    selection = Selection.from_wanted(ids, aligned_from_rollout(loss_mask))
    assert pack_shared_prefixes(ids, attention, selection, torch.float32) is None


def test_the_switch_and_models_that_cannot_pack(monkeypatch) -> None:
    assert can_pack(tiny(attn="sdpa")) and can_pack(tiny(attn="eager"))
    model = tiny(attn="sdpa")
    model.config._attn_implementation = "flash_attention_2"  # what a packed float mask would break
    assert not can_pack(model)
    ids, attention, loss_mask = grpo_batch([2], [3], seed=5)
    wanted = aligned_from_rollout(loss_mask)
    monkeypatch.setenv(SHARED_PREFIX_ENV, "on")
    with pytest.raises(ValueError, match=r"AREAL_SHARED_PREFIX=on, but the model cannot take a packed batch"):
        token_logprobs(model, ids, attention, 1.0, wanted=wanted)
    monkeypatch.setenv(SHARED_PREFIX_ENV, "sometimes")
    with pytest.raises(ValueError, match=r"AREAL_SHARED_PREFIX='sometimes', expected auto, on or off"):
        token_logprobs(tiny(), ids, attention, 1.0, wanted=wanted)


def test_nothing_wanted_gives_zeros_that_still_backpropagate() -> None:
    model = tiny()
    ids, attention, loss_mask = grpo_batch([2], [3], seed=6)
    logp, entropy = token_logprobs(model, ids, attention, 1.0, wanted=torch.zeros_like(loss_mask), with_entropy=True)
    assert not logp.any() and not entropy.any() and logp.shape == ids.shape
    logp.sum().backward()  # an empty minibatch's loss: a zero gradient, not an error
    assert all(p.grad is None or not p.grad.any() for p in model.parameters())


def test_long_continuations_are_not_packed_when_the_attention_would_cost_more() -> None:
    model = tiny()
    config = model.config
    wide = 4 * config.hidden_size * 8  # continuations far longer than the prompt
    assert forward_cost(config, 1, 2 + 4 * wide) > forward_cost(config, 4, 2 + wide)  # one long row loses
    assert forward_cost(config, 1, 40 + 4 * 16) < forward_cost(config, 4, 40 + 16)  # a GRPO prompt: packing wins
    ids, attention, loss_mask = grpo_batch([4], [3], seed=7)
    selection = Selection.from_wanted(ids, aligned_from_rollout(loss_mask))
    seen = []
    refused = pack_shared_prefixes(
        ids, attention, selection, torch.float32, worth=lambda g, w: seen.append((g, w)) or False
    )
    assert refused is None and seen == [(1, int(attention.sum() - 3 * 3))]
