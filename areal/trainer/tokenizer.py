"""Word-level fast tokenizers for the synthetic tasks, built locally.

Each task declares its own small vocabulary (one token per word); wrapping a
`tokenizers.Tokenizer` in `PreTrainedTokenizerFast` gives the usual Hugging Face
API (encode/decode, special-token ids, `save_pretrained`) with no download.
"""

from __future__ import annotations

from collections.abc import Sequence

from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

PAD, UNK, BOS, EOS = "<pad>", "<unk>", "<bos>", "<eos>"
SPECIAL_TOKENS: tuple[str, ...] = (PAD, UNK, BOS, EOS)


def build_word_tokenizer(words: Sequence[str]) -> PreTrainedTokenizerFast:
    """A whitespace-split word-level tokenizer; special tokens take ids 0..3 (pad = 0)."""
    vocab: dict[str, int] = {}
    for word in (*SPECIAL_TOKENS, *words):
        if not word or any(ch.isspace() for ch in word):
            raise ValueError(f"tokenizer word {word!r} must be non-empty and contain no whitespace")
        vocab.setdefault(word, len(vocab))
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token=PAD, unk_token=UNK, bos_token=BOS, eos_token=EOS
    )


def encode_words(tokenizer: PreTrainedTokenizerFast, text: str) -> list[int]:
    """Token ids of `text` without any automatically added special tokens."""
    return list(tokenizer.encode(text, add_special_tokens=False))
