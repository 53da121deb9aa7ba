"""A tiny local model, tokenizer, dataset and trainer for the TRL tests (nothing is downloaded).

`Recorder` sits between `AReaLGRPOTrainer` and `trl.GRPOTrainer` in the MRO, so it
sees TRL's own advantages before the subclass replaces them; `make_trainer`
also records the gathered rollouts and the pipeline's advantages of each
generation batch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from datasets import Dataset
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import WhitespaceSplit
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
from trl import GRPOConfig, GRPOTrainer

from areal_adv.integrations.trl import AReaLGRPOTrainer

WORDS = ["<pad>", "<eos>", "<unk>", "a", "b", "c", "d", "e", "yes", "no", "x", "y"]


def build_model(directory: Path) -> str:
    """A random 1-layer Llama and a word-level tokenizer, saved with save_pretrained."""
    vocab = {w: i for i, w in enumerate(WORDS)}
    backend = Tokenizer(WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>"
    )
    tokenizer.save_pretrained(directory)
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(WORDS),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=64,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=None,
        tie_word_embeddings=False,
    )
    LlamaForCausalLM(config).save_pretrained(directory)
    return str(directory)


def count_yes(completions: list[str], **_: Any) -> list[float | None]:
    """A continuous reward (share of 'yes' words); None for completions starting with 'x' (unscorable)."""
    out: list[float | None] = []
    for text in completions:
        words = text.split()
        out.append(None if words[:1] == ["x"] else words.count("yes") / max(len(words), 1) + 0.1 * len(words))
    return out


def per_token_yes(completion_ids: list[list[int]], **_: Any) -> list[list[float]]:
    """A process reward per completion token: +0.5 on 'yes', -0.25 on 'no', else 0."""
    yes, no = WORDS.index("yes"), WORDS.index("no")
    return [[0.5 if t == yes else -0.25 if t == no else 0.0 for t in ids] for ids in completion_ids]


class Recorder(GRPOTrainer):
    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        self.records.append({"trl": output["advantages"].detach().clone()})
        return output


class RecordingTrainer(AReaLGRPOTrainer, Recorder):
    def __init__(self, *args: Any, **kwargs: Any):
        self.records: list[dict[str, Any]] = []
        super().__init__(*args, **kwargs)

    def _gather_rollouts(self, local, mask):
        gathered = super()._gather_rollouts(local, mask)
        self.records[-1]["gathered"] = gathered
        return gathered

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        self.records[-1]["ours"] = output["advantages"].detach().clone()
        self.records[-1]["completion_mask"] = output["completion_mask"].detach().clone()
        return output


def make_trainer(
    model_dir: str,
    out_dir: Path,
    areal_config: Any,
    *,
    overrides: tuple[str, ...] = (),
    steps: int = 2,
    token_reward_func: Any = None,
    **config: Any,
) -> RecordingTrainer:
    settings = dict(
        output_dir=str(out_dir),
        use_cpu=True,
        per_device_train_batch_size=8,
        num_generations=4,
        max_completion_length=6,
        max_steps=steps,
        learning_rate=1e-2,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        seed=0,
        bf16=False,
        dataloader_num_workers=0,
        disable_tqdm=True,
    )
    args = GRPOConfig(**{**settings, **config})
    prompts = ["a b", "c d", "e a", "b c", "d e", "a c", "b d", "c e"]
    return RecordingTrainer(
        model=model_dir,
        reward_funcs=count_yes,
        args=args,
        train_dataset=Dataset.from_dict({"prompt": prompts}),
        areal_config=areal_config,
        areal_overrides=list(overrides),
        token_reward_func=token_reward_func,
    )
