"""Rollout layout: masks, behaviour log-probs, multi-turn turn_ids and split-row export."""

from __future__ import annotations

import pytest
import torch
from runtime_helpers import make_runtime, run, sample_rows

from areal_adv.trainer.lm.sampling import left_pad, sample_continuations
from areal_adv.trainer.parallel.engine import PolicyEngine
from areal_adv.trainer.rollout.episodes import export_episodes, export_turn_rows
from areal_adv.utils.data import RolloutGroup, concat_batch

torch.set_num_threads(2)


def test_left_pad_positions_start_at_zero_per_row() -> None:
    ids, mask, pos = left_pad([[5, 6, 7], [8]], pad_id=0)
    assert ids.tolist() == [[5, 6, 7], [0, 0, 8]]
    assert mask.tolist() == [[1, 1, 1], [0, 0, 1]]
    assert pos.tolist() == [[0, 1, 2], [0, 0, 0]]


def test_sampling_respects_per_row_limits_and_stop_tokens() -> None:
    task, model = make_runtime("guess", {"max_turn_tokens": 3})
    outs = sample_continuations(
        model,
        [[2, 5], [2, 5, 6, 7], [2]],
        [3, 1, 2],
        task.stop_token_ids,
        temperature=1.0,
        pad_id=0,
        generator=torch.Generator().manual_seed(0),
    )
    for out, cap in zip(outs, [3, 1, 2]):
        assert 1 <= len(out.token_ids) <= cap and len(out.logprobs) == len(out.token_ids)
        stops = [t in task.stop_token_ids for t in out.token_ids]
        assert not any(stops[:-1])  # a stop token can only be the last one
        assert out.stopped == stops[-1]


def test_single_turn_masks_and_layout() -> None:
    task, model = make_runtime("arith", {"max_operand": 9})  # two-token answer field
    groups = run(task, model)
    batch = export_episodes(groups[0], task.pad_token_id)
    rows, width = batch["input_ids"].shape
    assert rows == 4
    for key in ("attention_mask", "loss_mask", "logprobs", "turn_ids"):
        assert batch[key].shape == (rows, width)
    assert batch["rewards"].shape == (rows,) and batch["is_truncated"].dtype == torch.bool
    for i, rec in enumerate(groups[0]):
        n_prompt = len(task.open(rec.row, 0).prompt_ids)
        seqlen = len(rec.tokens)
        assert batch["attention_mask"][i].tolist() == [1] * seqlen + [0] * (width - seqlen)
        expected_loss = [0] * n_prompt + [1] * (seqlen - n_prompt) + [0] * (width - seqlen)
        assert batch["loss_mask"][i].tolist() == expected_loss
        assert batch["turn_ids"][i].tolist() == [-1] * n_prompt + [0] * (seqlen - n_prompt) + [-1] * (width - seqlen)
        assert (batch["logprobs"][i][batch["loss_mask"][i] == 0] == 0).all()
        assert (batch["logprobs"][i][batch["loss_mask"][i] == 1] < 0).all()
        assert not rec.truncated  # the answer field always fits the budget


@pytest.mark.parametrize("attn,temperature", [("eager", 1.0), ("eager", 0.7), ("sdpa", 1.3)])
def test_behaviour_logprobs_equal_a_recomputed_forward_pass(attn: str, temperature: float) -> None:
    task, model = make_runtime("guess", {"num_range": 8, "max_turns": 3}, attn=attn, seed=3)
    groups = run(task, model, n_prompts=3, n_samples=4, temperature=temperature)
    batch, _ = concat_batch([export_episodes(g, task.pad_token_id) for g in groups])
    engine = PolicyEngine(model, lr=1e-3)
    aligned = engine.compute_logprobs(batch["input_ids"], batch["attention_mask"], temperature)
    recomputed = torch.nn.functional.pad(aligned[:, :-1], (1, 0))  # token t's log-prob back at t
    gen = batch["loss_mask"].bool()
    assert gen.any()
    torch.testing.assert_close(batch["logprobs"][gen], recomputed[gen], atol=2e-5, rtol=1e-4)


def test_multi_turn_turn_ids_feedback_and_process_rewards() -> None:
    task, model = make_runtime("guess", {"num_range": 8, "max_turns": 4, "max_turn_tokens": 2}, seed=1)
    groups = run(task, model, n_prompts=4, n_samples=8, process=True)
    records = [r for g in groups for r in g]
    assert max(len(r.turn_spans) for r in records) >= 2
    feedback_words = {"higher", "lower", "invalid"}
    for rec in records:
        n_turns = len(rec.turn_spans)
        assert 1 <= n_turns <= 4
        expected_turn = [-1] * len(rec.tokens)
        for k, (start, end) in enumerate(rec.turn_spans):
            expected_turn[start:end] = [k] * (end - start)
            assert len(set(rec.token_rewards[start:end])) == 1  # constant within a turn
            assert rec.token_rewards[start] in (0.0, 1.0)
        assert rec.turn_ids == expected_turn
        assert rec.loss_mask == [int(t >= 0) for t in expected_turn]
        # between consecutive turns: exactly one environment token, never trained on
        for (_, end), (nxt, _) in zip(rec.turn_spans, rec.turn_spans[1:]):
            assert nxt == end + 1
            assert task.tokenizer.convert_ids_to_tokens(rec.tokens[end]) in feedback_words
            assert rec.loss_mask[end] == 0 and rec.token_rewards[end] == 0.0
        assert rec.turn_spans[-1][1] == len(rec.tokens)  # no feedback after the last turn
        assert rec.reward in (0.0, 1.0)
    batch = export_episodes(groups[0], task.pad_token_id, with_process=True)
    assert batch["token_rewards"].shape == batch["input_ids"].shape
    assert (batch["token_rewards"][batch["loss_mask"] == 0] == 0).all()


def test_budget_exhaustion_marks_truncated() -> None:
    task, model = make_runtime("guess", {"max_turn_tokens": 2})
    for rec in (r for g in run(task, model, budget=1) for r in g):
        assert rec.generated_tokens == 1 and rec.truncated


@pytest.mark.parametrize("explicit", [False, True])
def test_split_rows_one_row_per_turn_with_rollout_group(explicit: bool) -> None:
    task, model = make_runtime("guess", {"num_range": 8, "max_turns": 4}, seed=2)
    groups = run(task, model, n_prompts=3, n_samples=4, process=True)
    dicts = [export_turn_rows(g, task.pad_token_id, with_process=True, explicit_rewards=explicit) for g in groups]
    for records, d in zip(groups, dicts):
        group = d["rollout_group"]
        assert isinstance(group, RolloutGroup)
        assert list(group.row_counts) == [len(r.turn_spans) for r in records]
        assert d["input_ids"].shape[0] == sum(group.row_counts)
        if explicit:
            assert group.rewards.tolist() == [r.reward for r in records]
        else:
            assert group.rewards is None
        row = 0
        for rec in records:
            for _k, (start, end) in enumerate(rec.turn_spans):
                n = end
                assert d["input_ids"][row, :n].tolist() == rec.tokens[:end]
                assert d["attention_mask"][row].sum() == n
                assert d["loss_mask"][row].tolist()[:n] == [0] * start + [1] * (end - start)
                assert d["turn_ids"][row].tolist()[:n] == [-1] * start + [0] * (end - start)
                assert d["logprobs"][row, start:end].tolist() == pytest.approx(rec.logprobs[start:end])
                assert d["token_rewards"][row, start:end].tolist() == rec.token_rewards[start:end]
                assert (d["token_rewards"][row, :start] == 0).all()
                assert d["rewards"][row] == rec.reward  # every row carries the episode's reward
                assert bool(d["is_truncated"][row]) == rec.truncated
                row += 1
    batch, meta = concat_batch(dicts)
    assert meta.logical_group_sizes == (4, 4, 4)
    assert meta.traj_group_sizes == tuple(sum(d["rollout_group"].row_counts) for d in dicts)
    assert batch["turn_ids"].shape == batch["input_ids"].shape


def test_greedy_sampling_takes_the_argmax_and_keeps_tempered_logprobs() -> None:
    task, model = make_runtime("arith", {}, seed=4)
    ctx = [task.open(row, i).prompt_ids for i, row in enumerate(sample_rows(task, 5))]
    outs = sample_continuations(model, ctx, [1] * 5, task.stop_token_ids, temperature=0.5, pad_id=0, greedy=True)
    ids, mask, pos = left_pad(ctx, 0)
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask, position_ids=pos).logits[:, -1]
    logp = torch.log_softmax(logits / 0.5, dim=-1)
    assert [o.token_ids[0] for o in outs] == logits.argmax(-1).tolist()
    assert [o.logprobs[0] for o in outs] == pytest.approx(logp.max(-1).values.tolist(), abs=1e-5)
