"""The language model side: policy/critic models, tokenizers, text codec, sampling.

Holds model construction (`model`), tokenizers (`tokenizer`), text <-> token
conversion (`codec`), sampling through `generate` with behaviour log-probs
(`sampling`) and aligned log-probs and entropies of a forward (`logprobs`). It is
the bottom of the trainer and may import only `areal_adv.api` and `areal_adv.utils`.
"""
