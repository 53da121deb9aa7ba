"""A tiny local checkpoint built by the tests: random Llama + a small BPE tokenizer with a chat template."""

from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

#: A template unlike the fallback's ChatML, so a test sees that the checkpoint's own one is used.
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}{{ eos_token }}\n{% endfor %}"
    "{% if add_generation_prompt %}[assistant] {% endif %}"
)
SPECIALS = ["<pad>", "<unk>", "<s>", "</s>"]


def _corpus() -> list[str]:
    lines = [f"[user] {a} + {b} = [assistant] {a + b}" for a in range(10) for b in range(10)]
    lines += ["[system] you are a careful assistant that answers with a number", "reach at higher lower guess"]
    return lines * 3


def build_bpe_tokenizer(vocab_size: int = 320) -> PreTrainedTokenizerFast:
    core = Tokenizer(models.BPE(unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    core.train_from_iterator(_corpus(), trainer)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token="<pad>", unk_token="<unk>", bos_token="<s>", eos_token="</s>"
    )
    tok.chat_template = CHAT_TEMPLATE
    return tok


def build_checkpoint(
    path: Path, *, seed: int = 0, with_tokenizer: bool = True, tied: bool = False
) -> PreTrainedTokenizerFast:
    """Writes `save_pretrained` model (and tokenizer) files to `path`; returns the tokenizer.

    `tied`: one weight for the token lookup and the output projection, as SmolLM2 has.
    """
    tok = build_bpe_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=256,
        pad_token_id=tok.pad_token_id,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        tie_word_embeddings=tied,
    )
    torch.manual_seed(seed)
    LlamaForCausalLM(config).save_pretrained(path)
    if with_tokenizer:
        tok.save_pretrained(path)
    return tok
