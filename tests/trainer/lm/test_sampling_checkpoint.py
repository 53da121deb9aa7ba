"""`generate`-based rollouts on a real Hugging Face checkpoint: its tokenizer's pad/eos and its own
`generation_config.json`.

A tiny Llama saved with `save_pretrained`, a trained byte-level BPE tokenizer (tests/trainer/
checkpoint_factory.py) and a generation config that would truncate, penalise and suppress the end of
turn (its eos is the tokenizer's, which the trainer takes as a stop id; its pad is another
token). Two tokenizers: one with a pad token, one without (pad falls back to eos, as for many released
chat models, so left padding and the end of a turn share an id). Through the trainer's own start-up
(`Trainer`), a single-turn dataset task and the multi-turn guess task, checked on every episode:

* behaviour log-probs equal a forward pass over the unpadded episode at the sampling temperature;
* a turn ends exactly at its first stop id (the tokenizer's eos), and nothing is kept after it;
* greedy rollouts equal a plain reference loop (one full forward per token, no padding, no cache);
* the checkpoint's generation config is back on the model afterwards.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from checkpoint_factory import build_bpe_tokenizer
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

from areal_adv.api.cli_args import load_config
from areal_adv.trainer.rollout.episodes import EpisodeRecord, collect_episodes
from areal_adv.trainer.run.loop import Trainer

ROOT = Path(__file__).resolve().parents[3]
DATA = ROOT / "examples" / "custom_task" / "data"
TEMPERATURE = 0.9


def _save_checkpoint(path: Path, *, with_pad: bool) -> None:
    tok = build_bpe_tokenizer()
    if not with_pad:
        tok.pad_token = None
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=512,
        pad_token_id=tok.pad_token_id,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        tie_word_embeddings=False,
    )
    torch.manual_seed(3)
    model = LlamaForCausalLM(config)
    # point the eos row of the head along the mean final hidden state, so about one token in five is
    # eos: turns end early at it and rows of several lengths share a batch
    with torch.no_grad():
        ids = torch.randint(4, len(tok), (8, 16), generator=torch.Generator().manual_seed(0))
        hidden = model.model(input_ids=ids).last_hidden_state
        direction = hidden.mean((0, 1))
        direction /= direction.norm()
        model.lm_head.weight[tok.eos_token_id] = direction * (4.0 / float((hidden @ direction).mean()))
    model.generation_config = GenerationConfig(
        do_sample=True,
        top_k=1,
        top_p=0.1,
        temperature=0.01,
        repetition_penalty=4.0,
        no_repeat_ngram_size=1,
        suppress_tokens=[tok.eos_token_id],
        min_new_tokens=5,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.unk_token_id,
    )
    model.save_pretrained(path)
    tok.save_pretrained(path)


@pytest.fixture(scope="module", params=[True, False], ids=["with_pad", "pad_is_eos"])
def checkpoint(request, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, bool]:
    path = tmp_path_factory.mktemp("gen_ckpt")
    _save_checkpoint(path, with_pad=request.param)
    return path, request.param


def _trainer(tmp_path: Path, ckpt: Path, *task: str) -> Trainer:
    return Trainer(
        load_config(
            None,
            [
                f"model.path={ckpt}",
                "rollout.batch_size=3",
                "rollout.n_samples=4",
                "actor.max_new_tokens=7",
                f"actor.temperature={TEMPERATURE}",
                "output.progress_bar=false",
                "output.plot=false",
                f"output.dir={tmp_path}",
                *task,
            ],
        )
    )


DATASET = [
    f"data.train={DATA / 'train.jsonl'}",
    "task.implementation=dataset",
    "reward=[{implementation: examples.custom_task.rewards.exact_answer}]",
]


@torch.no_grad()
def _recomputed(model, rec: EpisodeRecord) -> list[float]:
    logp = torch.log_softmax(model(input_ids=torch.tensor([rec.tokens])).logits[0].float() / TEMPERATURE, -1)
    return [float(logp[t - 1, rec.tokens[t]]) for t in range(1, len(rec.tokens)) if rec.loss_mask[t]]


def _check_turns(rec: EpisodeRecord, stop: frozenset[int], cap: int) -> None:
    for start, end in rec.turn_spans:
        turn = rec.tokens[start:end]
        assert 0 < len(turn) <= cap
        assert not any(t in stop for t in turn[:-1])  # cut at the first stop id


#: dataset rows whose prompts tokenise to different lengths (the rows of a batch are left-padded)
ROWS = [
    {"prompt": "3 + 3 =", "answer": "6"},
    {"prompt": "reach", "answer": "0"},
    {"prompt": "you are a careful assistant that answers with a number: 12 + 7 =", "answer": "19"},
]


def _rows(trainer: Trainer) -> list[dict]:
    if trainer.cfg.task.implementation == "dataset":
        return [dict(row) for row in ROWS]
    return trainer.prompt_source.sample(trainer.cfg.rollout.batch_size)


@pytest.mark.parametrize("task", [DATASET, ["task.implementation=guess"]], ids=["dataset", "guess"])
def test_sampled_episodes_match_a_recomputed_forward_pass(tmp_path: Path, checkpoint, task) -> None:
    ckpt, with_pad = checkpoint
    trainer = _trainer(tmp_path, ckpt, *task)
    tok, runtime, model = trainer.tokenizer, trainer.task, trainer.policy
    assert (tok.pad_token_id is not None) == with_pad
    assert runtime.pad_token_id == (tok.pad_token_id if with_pad else tok.eos_token_id)
    assert runtime.stop_token_ids == {tok.eos_token_id}
    saved = model.generation_config
    groups = collect_episodes(
        model,
        runtime,
        _rows(trainer),
        4,
        budget=trainer.cfg.generation_budget,
        temperature=TEMPERATURE,
        generator=torch.Generator().manual_seed(0),
    )
    records = [rec for g in groups for rec in g]
    assert model.generation_config is saved and saved.top_k == 1  # the checkpoint's config is back
    ended = 0
    for rec in records:
        _check_turns(rec, runtime.stop_token_ids, runtime.max_turn_tokens or trainer.cfg.generation_budget)
        behaviour = [lp for lp, m in zip(rec.logprobs, rec.loss_mask) if m]
        assert behaviour == pytest.approx(_recomputed(model, rec), abs=2e-5)
        ended += sum(rec.tokens[end - 1] == tok.eos_token_id for _, end in rec.turn_spans)
    assert ended > 0  # eos was not suppressed: some turns ended at it
    # rows finishing early were batched with longer ones: turns of several lengths (an episode of the guess
    # task fills its whole token budget over its turns, so whole episodes can all be equally long)
    assert len({end - start for rec in records for start, end in rec.turn_spans}) > 1
    if task == DATASET:
        assert len({len(rec.tokens) - rec.generated_tokens for rec in records}) > 1  # prompts of several lengths


@torch.no_grad()
def _reference_greedy(model, ids: list[int], cap: int, stop: frozenset[int]) -> list[int]:
    out = []
    for _ in range(cap):
        tok = int(model(input_ids=torch.tensor([ids + out])).logits[0, -1].argmax())
        out.append(tok)
        if tok in stop:
            break
    return out


def test_greedy_rollout_equals_a_plain_reference_loop(tmp_path: Path, checkpoint) -> None:
    ckpt, _ = checkpoint
    trainer = _trainer(tmp_path, ckpt, *DATASET)
    runtime, model, cap = trainer.task, trainer.policy, trainer.cfg.actor.max_new_tokens
    groups = collect_episodes(
        model, runtime, _rows(trainer), 1, budget=trainer.cfg.generation_budget, temperature=TEMPERATURE, greedy=True
    )
    for [rec] in groups:
        start, end = rec.turn_spans[0]
        assert rec.tokens[start:end] == _reference_greedy(model, rec.tokens[:start], cap, runtime.stop_token_ids)
