"""Text <-> tokens for the rollout, with the model's tokenizer.

Tasks speak text (or chat messages); the rollout speaks token ids. A prompt
string is encoded with the tokenizer's special tokens (e.g. a leading BOS); a
message list is rendered with the tokenizer's chat template and a generation
prompt. Environment observations are encoded without special tokens, or, when
they are messages, as the continuation of the conversation the template would
write (see `ChatCodec.continuation`). Completions are decoded with special
tokens skipped, so an end-of-turn token never reaches a scorer.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from transformers import PreTrainedTokenizerBase

#: A prompt or an observation: plain text or chat messages [{"role": ..., "content": ...}, ...].
Text = str | list[dict[str, str]]

_SENTINEL = "\u2063areal-sentinel\u2063"


def is_messages(value: Any) -> bool:
    """A non-empty list of {"role": str, "content": str} mappings."""
    return (
        isinstance(value, list)
        and bool(value)
        and all(
            isinstance(m, Mapping) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
            for m in value
        )
    )


def check_text(value: Any, where: str) -> Text:
    """A prompt/observation must be a string or chat messages; anything else names `where`."""
    if isinstance(value, str) or is_messages(value):
        return value if isinstance(value, str) else [dict(m) for m in value]
    raise TypeError(
        f"{where}: got {type(value).__name__} {value!r:.120}, expected a string or a list of "
        "{'role': str, 'content': str} chat messages"
    )


def stop_token_ids(
    tokenizer: PreTrainedTokenizerBase, generation_eos: int | Sequence[int] | None, stop_words: Iterable[str] = ()
) -> frozenset[int]:
    """End-of-turn ids: the tokenizer's eos, the model's generation eos ids, and single-token stop words."""
    ids = set()
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    if isinstance(generation_eos, int):
        ids.add(generation_eos)
    elif generation_eos is not None:
        ids.update(int(i) for i in generation_eos)
    for word in stop_words:
        tid = tokenizer.convert_tokens_to_ids(word)
        if isinstance(tid, int) and tid != tokenizer.unk_token_id:
            ids.add(tid)
    if not ids:
        raise ValueError("the tokenizer has no eos token and the model no generation eos id: nothing ends a turn")
    return frozenset(ids)


class ChatCodec:
    """Encodes prompts and observations and decodes completions with one tokenizer."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, stop_ids: frozenset[int]) -> None:
        self.tokenizer = tokenizer
        self.stop_ids = stop_ids
        pad = tokenizer.pad_token_id
        self.pad_id = int(pad if pad is not None else min(stop_ids))

    @property
    def has_chat_template(self) -> bool:
        return bool(getattr(self.tokenizer, "chat_template", None))

    def _template(self, messages: list[dict[str, str]], *, generation_prompt: bool) -> str:
        if not self.has_chat_template:
            raise ValueError(
                "the model's tokenizer has no chat template, so chat messages cannot be rendered; "
                "give plain-text prompts or use a checkpoint whose tokenizer has a chat_template"
            )
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt)

    def encode_prompt(self, prompt: Text) -> list[int]:
        if isinstance(prompt, str):
            return list(self.tokenizer.encode(prompt, add_special_tokens=True))
        text = self._template(prompt, generation_prompt=True)
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def encode_observation(self, observation: Text, last_turn_ids: Sequence[int]) -> list[int]:
        if isinstance(observation, str):
            return list(self.tokenizer.encode(observation, add_special_tokens=False))
        return list(self.tokenizer.encode(self.continuation(observation, last_turn_ids), add_special_tokens=False))

    def continuation(self, messages: list[dict[str, str]], last_turn_ids: Sequence[int]) -> str:
        """The text the template writes after an assistant turn, then `messages`, then a generation prompt.

        Rendered as the difference of two renderings of a dummy conversation,
        so it holds for any template that renders a prefix of a conversation
        as a prefix of its text. The template's end of the assistant turn
        (e.g. `<|im_end|>\\n`) is added after the generated turn, minus the
        stop token the policy already generated.
        """
        base = [{"role": "user", "content": _SENTINEL}, {"role": "assistant", "content": _SENTINEL}]
        head = self._template(base, generation_prompt=False)
        full = self._template(base + messages, generation_prompt=True)
        if not full.startswith(head):
            raise ValueError(
                "the chat template does not render a conversation's prefix as a prefix of its text, "
                "so observation messages cannot be appended; return observation text instead"
            )
        closing = head[head.rindex(_SENTINEL) + len(_SENTINEL) :]
        if last_turn_ids and last_turn_ids[-1] in self.stop_ids:
            stop_text = self.tokenizer.decode([last_turn_ids[-1]], skip_special_tokens=False)
            if closing.startswith(stop_text):
                closing = closing[len(stop_text) :]
        return closing + full[len(head) :]

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)
