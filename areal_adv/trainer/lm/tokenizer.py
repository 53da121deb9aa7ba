"""Tokenizers: the checkpoint's own, or a tiny local one for the random-init model.

With `model.path` the prompts and completions go through the checkpoint's own
`AutoTokenizer` (local files only; from the GGUF file when `model.gguf_file`).
Only the random-init default builds a tokenizer here, with `tokenizers`: a
word-level one from the task's declared vocabulary (one token per word, so a
tiny model learns arithmetic in seconds), or, for a task without a vocabulary,
a byte-level one (any text, a ChatML template for chat prompts).
"""

from __future__ import annotations

from collections.abc import Sequence

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
from transformers import AutoTokenizer, PreTrainedTokenizerBase, PreTrainedTokenizerFast

from areal_adv.api.config_checks import ConfigError
from areal_adv.api.train_args import ModelConfig

PAD, UNK, BOS, EOS = "<pad>", "<unk>", "<bos>", "<eos>"
SPECIAL_TOKENS: tuple[str, ...] = (PAD, UNK, BOS, EOS)
IM_START, IM_END = "<|im_start|>", "<|im_end|>"

#: ChatML, the template of the byte-level fallback tokenizer (random init with chat prompts).
CHATML_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + "
    "'<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def _with_bos(core: Tokenizer, bos_id: int) -> None:
    """Encoding with special tokens prepends `<bos>`, as Llama tokenizers do."""
    core.post_processor = processors.TemplateProcessing(single=f"{BOS} $A", special_tokens=[(BOS, bos_id)])


def build_word_tokenizer(words: Sequence[str], stop_words: Sequence[str] = ()) -> PreTrainedTokenizerFast:
    """A whitespace-split word-level tokenizer; specials take ids 0..3 (pad = 0).

    `stop_words` (e.g. `<eot>`) become additional special tokens: they end a
    turn and are skipped when a completion is decoded to text.
    """
    vocab: dict[str, int] = {}
    for word in (*SPECIAL_TOKENS, *words, *stop_words):
        if not isinstance(word, str) or not word or any(ch.isspace() for ch in word):
            raise ValueError(f"tokenizer word {word!r} must be a non-empty string without whitespace")
        vocab.setdefault(word, len(vocab))
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    _with_bos(core, vocab[BOS])
    tok = PreTrainedTokenizerFast(tokenizer_object=core, pad_token=PAD, unk_token=UNK, bos_token=BOS, eos_token=EOS)
    if stop_words:
        tok.add_special_tokens({"additional_special_tokens": list(dict.fromkeys(stop_words))})
    return tok


def build_byte_tokenizer() -> PreTrainedTokenizerFast:
    """Byte-level BPE without merges: 256 byte tokens + specials, a ChatML chat template.

    Its eos is `<|im_end|>`, as in ChatML checkpoints, so one token ends a
    turn for plain-text and chat prompts alike.
    """
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    specials = (*SPECIAL_TOKENS, IM_START, IM_END)
    vocab = {tok: i for i, tok in enumerate([*specials, *sorted(alphabet)])}
    core = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token=UNK))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    _with_bos(core, vocab[BOS])
    tok = PreTrainedTokenizerFast(tokenizer_object=core, pad_token=PAD, unk_token=UNK, bos_token=BOS, eos_token=IM_END)
    tok.add_special_tokens({"additional_special_tokens": [IM_START, EOS]})
    tok.chat_template = CHATML_TEMPLATE
    return tok


def encode_words(tokenizer: PreTrainedTokenizerBase, text: str) -> list[int]:
    """Token ids of `text` without any automatically added special tokens."""
    return list(tokenizer.encode(text, add_special_tokens=False))


def load_checkpoint_tokenizer(cfg: ModelConfig) -> PreTrainedTokenizerBase:
    """The checkpoint's own tokenizer (local files only); a clear error when it has none."""
    extra = {"gguf_file": cfg.gguf_file} if cfg.gguf_file else {}
    try:
        tok = AutoTokenizer.from_pretrained(cfg.path, local_files_only=True, **extra)
    except (OSError, ValueError, TypeError, KeyError, ImportError) as exc:
        where = f"model.gguf_file={cfg.gguf_file!r}" if cfg.gguf_file else f"model.path={cfg.path!r}"
        raise ConfigError(f"{where}: cannot load the checkpoint's tokenizer ({type(exc).__name__}: {exc})") from exc
    if tok.pad_token_id is None and tok.eos_token_id is None:
        raise ConfigError(f"model.path={cfg.path!r}: the tokenizer has neither a pad nor an eos token")
    _no_bpe_cleanup(tok)
    return tok


def _no_bpe_cleanup(tok: PreTrainedTokenizerBase) -> None:
    """`clean_up_tokenization_spaces: false` for a byte-pair tokenizer, whatever its saved config says.

    The clean-up (dropping the space before punctuation) is WordPiece's; on BPE text it deletes spaces
    the model wrote. Many checkpoints still save `true` (SmolLM2 does): transformers 5 then ignores it
    and warns at the first decode of every run, older releases apply it. False is what both then decode
    with; a WordPiece tokenizer keeps its own setting.
    """
    model = getattr(getattr(tok, "backend_tokenizer", None), "model", None)
    if type(model).__name__ == "BPE" and getattr(tok, "clean_up_tokenization_spaces", False):
        tok.clean_up_tokenization_spaces = False


def build_tokenizer(
    cfg: ModelConfig, vocabulary: Sequence[str] | None, stop_words: Sequence[str] = ()
) -> PreTrainedTokenizerBase:
    """The tokenizer that follows the model: the checkpoint's, else a tiny local one."""
    if cfg.path is not None:
        return load_checkpoint_tokenizer(cfg)
    if vocabulary is not None:
        return build_word_tokenizer(vocabulary, stop_words)
    return build_byte_tokenizer()
