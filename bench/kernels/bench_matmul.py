"""This machine's float32 matmul throughput, and a GRPO step's floating-point floor on a causal LM.

Usage:
    .venv/bin/python -m bench.kernels.bench_matmul [--threads 2] [--model runs/models/SmolLM2-135M-Instruct]

`matmul_gflops` times `torch.mm` on the shapes a 135M-parameter decoder's
training and sampling multiply (tokens x hidden by hidden x intermediate and
the reverse, and the vocabulary projection) and on one square 1024^3 product,
and reports the best (least disturbed) rate of each, and their median as the
machine's rate. `step_flops` counts the floating-point operations of one GRPO
step (formulas below); floor seconds = FLOPs / rate, and a step's time divided
by that floor is how far it is from the compute floor on this machine.

FLOP formulas (one multiply-add = 2 FLOPs; `matmul_params` P = every weight of
the attention and MLP projections of all layers, `head_params` Ph = vocab x
hidden, the vocabulary projection; an embedding look-up is free):

* a forward pass over n tokens: 2 P n, plus attention 4 L d_attn sum(ctx), where
  ctx is the number of positions a token attends to (causal: its position + 1),
  d_attn = heads x head_dim, L layers; plus 2 Ph per position whose logits are
  needed;
* training (forward + backward, backward = 2x forward): 3 x the forward over
  every token of the trained rows, with logits at the generated tokens only;
* sampling: prefill of every row's prompt (logits at its last position only),
  then one decode position per generated token after the first, each with
  logits: 2 (P + Ph) per token plus its attention;
* shared prefix (`group`): a prompt shared by a group's rows is counted once
  in the prefill and once in training (its tokens' forward and backward); the
  completions still attend to all of it.

Greedy evaluation, reward functions and the optimiser step are not counted (the
optimiser is memory-bound: about 16 bytes read and 12 written per parameter).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch

#: (M, K, N) products: a 135M decoder's MLP and projection shapes at ~1k tokens, and one square.
SHAPES = ((1024, 576, 1536), (1024, 1536, 576), (1024, 576, 576), (256, 576, 8192), (1024, 1024, 1024))


def matmul_gflops(threads: int, *, seconds_per_shape: float = 0.6) -> dict[str, float]:
    """Best GFLOP/s of `torch.mm` per shape at `threads` intra-op threads, and their median (`rate`)."""
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        out: dict[str, float] = {}
        for m, k, n in SHAPES:
            a, b = torch.randn(m, k), torch.randn(k, n)
            torch.mm(a, b)  # warm-up: kernel selection, page faults
            best, deadline = float("inf"), time.perf_counter() + seconds_per_shape
            while time.perf_counter() < deadline:
                start = time.perf_counter()
                torch.mm(a, b)
                best = min(best, time.perf_counter() - start)
            out[f"{m}x{k}x{n}"] = 2 * m * k * n / best / 1e9
        out["rate"] = statistics.median(out.values())
        return out
    finally:
        torch.set_num_threads(previous)


@dataclass(frozen=True)
class DecoderShape:
    """The sizes of a decoder that its FLOPs depend on."""

    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int

    @classmethod
    def from_config(cls, config: object) -> DecoderShape:
        heads = config.num_attention_heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
        return cls(
            config.num_hidden_layers,
            config.hidden_size,
            config.intermediate_size,
            heads,
            getattr(config, "num_key_value_heads", None) or heads,
            head_dim,
            config.vocab_size,
        )

    @property
    def matmul_params(self) -> int:
        """q, k, v, o and the gated MLP's three projections, over all layers."""
        d_q, d_kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        per_layer = self.hidden * (2 * d_q + 2 * d_kv) + 3 * self.hidden * self.intermediate
        return self.layers * per_layer

    @property
    def head_params(self) -> int:
        return self.vocab * self.hidden

    def attention_flops(self, contexts: Sequence[int]) -> float:
        """QK^T and the weighted sum of V for tokens attending to `contexts` positions each."""
        return 4.0 * self.layers * self.heads * self.head_dim * float(sum(contexts))


def _causal_contexts(start: int, stop: int) -> range:
    """Positions attended by tokens start..stop-1 of a row (each sees itself and everything before it)."""
    return range(start + 1, stop + 1)


def step_flops(
    shape: DecoderShape, prompt_lengths: Sequence[int], completion_lengths: Sequence[int], *, group: int = 1
) -> dict[str, float]:
    """FLOPs of one GRPO step: sampling (prefill + decode) and training (forward + backward), per row lists.

    `group` > 1: consecutive rows of `group` share their prompt and it is
    computed once per group (in the prefill and in training); 1: every row's
    prompt is computed for that row.
    """
    p, ph = float(shape.matmul_params), float(shape.head_params)
    prefill = decode = train = 0.0
    for i, (prompt, completion) in enumerate(zip(prompt_lengths, completion_lengths)):
        first = i % group == 0  # the row that pays for its group's prompt
        if first:
            prefill += 2 * p * prompt + shape.attention_flops(_causal_contexts(0, prompt))
            train += 3 * (2 * p * prompt + shape.attention_flops(_causal_contexts(0, prompt)))
        prefill += 2 * ph  # every row samples its first token from the prompt's last logits
        steps = max(completion - 1, 0)  # the first token comes from the prefill's logits
        decode += 2 * (p + ph) * steps + shape.attention_flops(_causal_contexts(prompt, prompt + steps))
        total = prompt + completion
        train += 3 * (2 * p * completion + 2 * ph * completion + shape.attention_flops(_causal_contexts(prompt, total)))
    return {
        "prefill": prefill,
        "decode": decode,
        "sample": prefill + decode,
        "train": train,
        "total": prefill + decode + train,
    }


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--model", default=None, help="a local checkpoint folder: print its per-token FLOPs too")
    args = parser.parse_args(argv)
    rates = matmul_gflops(args.threads)
    for key, value in rates.items():
        print(f"{key:>16}: {value:7.1f} GFLOP/s float32, {args.threads} thread(s)")
    if args.model:
        from transformers import AutoConfig

        shape = DecoderShape.from_config(AutoConfig.from_pretrained(args.model, local_files_only=True))
        flops = step_flops(shape, [40] * 16, [16] * 16)
        print(
            f"{args.model}: {shape.matmul_params / 1e6:.1f} M projection + {shape.head_params / 1e6:.1f} M "
            f"head parameters; a 16-row step (40 prompt + 16 generated tokens each): "
            + ", ".join(f"{k} {v / 1e9:.0f} GFLOP ({v / 1e9 / rates['rate']:.2f} s)" for k, v in flops.items())
        )


if __name__ == "__main__":
    main()
