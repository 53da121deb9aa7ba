"""Tied input/output embeddings: the lookup's gradient added sparsely into the output projection's.

A model with tied word embeddings (SmolLM2, Qwen2.5-0.5B, Llama-3.2-1B) uses one
[vocab, hidden] weight W twice: as the lookup table and as the output
projection. Its gradient is the sum of two terms,

    dL/dW = G_out + G_in,   G_out = dlogits^T h   (dense: every row of W is used)
                            G_in[v] = sum over positions t with token v of dL/de_t

and `nn.Embedding`'s default (dense) backward builds G_in as a full
[vocab, hidden] tensor: zero-filled, a few hundred rows written, then added to
G_out into a third tensor. For SmolLM2 that is three 108 MiB float32 tensors
alive at once inside the backward, and two passes over 28 M numbers per
micro-batch, to add a few hundred rows.

With `sparse=True` the lookup's backward returns G_in as a sparse tensor of
only the rows the batch used, and autograd adds it in place into the dense
G_out buffer (the engine's input buffer accumulates in place when it holds the
last reference). The parameter's `.grad` is still one dense tensor, so
clipping, fused AdamW and checkpoints see nothing different. The sum is the
same up to the order of float additions within rows whose token occurs more
than once (tested against the dense backward).

Only for one process and tied weights: with untied embeddings the lookup's
gradient would stay sparse and reach the optimiser (fused AdamW refuses sparse
gradients), DDP's reducer fixes each parameter's gradient layout when it is
built, and FSDP2's DTensor parameters have no sparse lookup.
"""

from __future__ import annotations

from torch import nn


def tied_embedding(model: nn.Module) -> nn.Embedding | None:
    """The trainable lookup table that is also the output projection's weight, else None."""
    get_in = getattr(model, "get_input_embeddings", None)
    get_out = getattr(model, "get_output_embeddings", None)
    if not callable(get_in) or not callable(get_out):
        return None
    lookup, projection = get_in(), get_out()
    if not isinstance(lookup, nn.Embedding) or projection is None:
        return None
    tied = getattr(projection, "weight", None) is lookup.weight
    return lookup if tied and lookup.weight.requires_grad else None


def add_lookup_gradient_sparsely(model: nn.Module) -> bool:
    """Make a tied lookup table's backward sparse (see the module docstring); True when it was changed."""
    lookup = tied_embedding(model)
    if lookup is None or lookup.max_norm is not None:  # max_norm renormalises rows in place: keep torch's path
        return False
    lookup.sparse = True
    return True
