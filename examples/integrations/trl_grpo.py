"""AReaLGRPOTrainer on CPU: a tiny random Llama and a word-level tokenizer built locally, 2 steps.

    .venv/bin/python examples/integrations/trl_grpo.py [--config preset:grpo] [--steps 2]

Nothing is downloaded. With a real model, pass its path (or a loaded model) as
`model=` and keep everything else.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import torch
from datasets import Dataset
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import WhitespaceSplit
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
from trl import GRPOConfig

from areal_adv.integrations.trl import AReaLGRPOTrainer

WORDS = ["<pad>", "<eos>", "<unk>", "a", "b", "c", "yes", "no"]


def tiny_model(directory: Path) -> str:
    backend = Tokenizer(WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<unk>"))
    backend.pre_tokenizer = WhitespaceSplit()
    PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>"
    ).save_pretrained(directory)
    torch.manual_seed(0)
    LlamaForCausalLM(
        LlamaConfig(
            vocab_size=len(WORDS),
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=2,
            pad_token_id=0,
            eos_token_id=1,
            bos_token_id=None,
        )
    ).save_pretrained(directory)
    return str(directory)


def says_yes(completions: list[str], **_) -> list[float]:
    """A TRL reward function: the share of 'yes' words."""
    return [c.split().count("yes") / max(len(c.split()), 1) for c in completions]


def yes_no_steps(completion_ids: list[list[int]], **_) -> list[list[float]]:
    """Per-token process rewards: +0.1 for each 'yes', -0.1 for each 'no'."""
    return [
        [0.1 if t == WORDS.index("yes") else -0.1 if t == WORDS.index("no") else 0.0 for t in ids]
        for ids in completion_ids
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="preset:grpo", help="pipeline YAML or preset:NAME (areal-adv presets)")
    parser.add_argument("--steps", type=int, default=2)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="areal-trl-"))
    trainer = AReaLGRPOTrainer(
        model=tiny_model(work / "model"),
        reward_funcs=says_yes,
        args=GRPOConfig(
            output_dir=str(work / "out"),
            use_cpu=True,
            per_device_train_batch_size=8,
            num_generations=4,
            max_completion_length=6,
            max_steps=args.steps,
            report_to="none",
            save_strategy="no",
            logging_steps=1,
            disable_tqdm=True,
        ),
        train_dataset=Dataset.from_dict({"prompt": ["a b", "b c", "c a", "a a"]}),
        areal_config=args.config,
        areal_overrides=["actor.reward_norm.eps=1e-4"],  # TRL's std + 1e-4
        token_reward_func=yes_no_steps,
    )
    trainer.train()
    print(f"trained {trainer.state.global_step} steps with advantages from {trainer.areal_spec.source}")


if __name__ == "__main__":
    main()
