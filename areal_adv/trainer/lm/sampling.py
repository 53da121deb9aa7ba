"""Rollout sampling through `transformers` `generate`, recording behaviour log-probs.

`sample_continuations` is the call the rollout makes. By default it runs the
model's own `generate` (every architecture and cache `transformers` supports),
with three things added around it:

* **A distribution that is exactly softmax(logits / temperature).** `generate`
  fills every generation option the caller leaves unset from the checkpoint's
  `generation_config.json` and then from global defaults (top_k=50 among them),
  so a checkpoint could silently add top-k/top-p/min-p truncation, repetition
  penalties, suppressed tokens or a forced EOS. The call therefore runs with the
  model's generation config replaced by a neutral one (`neutral_generation_config`)
  and restores it afterwards.
* **The draw, and the behaviour log-probs of the drawn tokens.** `_TemperedDraw`,
  the only logits processor left, divides the scores by the temperature (the
  sampling distribution), draws each row's token itself (`inverse_cdf_draw`;
  the arg-max for greedy decoding) and records its `log_softmax`: one `[rows]`
  vector per step instead of `output_scores`' `[steps, rows, vocab]` tensors.
  It hands `generate` scores whose arg-max is that token, and `generate` runs in
  arg-max mode. `generate`'s own sampler, `torch.multinomial`, draws one
  exponential variate per vocabulary entry and row: 15 ms a step for 16 rows of
  SmolLM2's 49k-token vocabulary on a CPU, a tenth of the decode. The inverse
  CDF needs one uniform number per row and a cumulative sum (about 1 ms).
* **Per-row token caps.** `generate` has one `max_new_tokens` for the batch;
  `_RowCaps` finishes each row at its own cap.
* **One prefill per distinct context.** A GRPO group's rows share their
  prompt: `shared_prefix_cache` prefills each distinct context once and hands
  `generate` the gathered KV cache, so the prompt is not encoded once per row
  (`AREAL_SHARED_PREFIX=off` turns it off).

Randomness: the draw uses torch's global RNG (`torch.rand` without a
generator, as `generate`'s own sampler would). With `generator=` the draw is made reproducible from that
generator: one seed is taken from it and the global RNG of the model's device is
forked (saved and restored) around the call, so other users of the global RNG
neither disturb nor are disturbed by sampling. With `generator=None` the global
RNG itself is consumed.

The trainer's former private per-token loop is kept only as a benchmark
reference (bench/peers/reference_sampler.py); docs/performance.md has both timings.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from transformers import (
    GenerationConfig,
    LogitsProcessor,
    LogitsProcessorList,
    PreTrainedModel,
    StoppingCriteria,
    StoppingCriteriaList,
)
from transformers.modeling_outputs import CausalLMOutputWithPast

from areal_adv.api.config_checks import is_integer
from areal_adv.trainer.lm.logprobs import shared_prefix_mode


@dataclass
class Continuation:
    """Sampled tokens of one row and their behaviour log-probs."""

    token_ids: list[int]
    logprobs: list[float]
    stopped: bool  # ended by a stop token (not by the length limit)


def left_pad(contexts: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Left-padded ids, attention mask and position ids (0 at each row's first token)."""
    width = max(len(c) for c in contexts)
    ids = torch.full((len(contexts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(contexts), width), dtype=torch.long)
    for row, ctx in enumerate(contexts):
        if ctx:
            ids[row, width - len(ctx) :] = torch.tensor(list(ctx), dtype=torch.long)
            mask[row, width - len(ctx) :] = 1
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    return ids, mask, positions


def check_request(contexts: Sequence[Sequence[int]], max_new_tokens: Sequence[int], temperature: float) -> None:
    """The checks both samplers make before touching the model."""
    if len(contexts) != len(max_new_tokens):
        raise ValueError(
            f"sample_continuations: {len(contexts)} contexts but {len(max_new_tokens)} "
            "max_new_tokens entries; one cap per context is required"
        )
    bad = [i for i, c in enumerate(contexts) if len(c) == 0]
    if bad:
        raise ValueError(f"sample_continuations: contexts {bad} are empty; every context needs at least one token")
    caps = [i for i, n in enumerate(max_new_tokens) if not is_integer(n, low=0)]
    if caps:
        raise ValueError(f"sample_continuations: max_new_tokens{caps} are not integers >= 0")
    if not temperature > 0:
        raise ValueError(f"sample_continuations: temperature={temperature!r}, expected a number > 0")


def neutral_generation_config(*, max_new_tokens: int, stop_ids: Sequence[int], pad_id: int) -> GenerationConfig:
    """Arg-max decoding over the scores `_TemperedDraw` returns: no option that reshapes them.

    `generate` fills every option the caller leaves unset from the checkpoint's
    `generation_config.json`, so each processor that could change the scores
    (repetition penalties, n-gram bans, minimum lengths, forced tokens) is set
    to its neutral value here. Sampling-only options (temperature, top-k/p)
    play no part in arg-max mode: the temperature is applied, and the token
    drawn, by `_TemperedDraw`. Only `stop_ids` end a row: the checkpoint's own
    EOS does not.
    """
    return GenerationConfig(
        max_new_tokens=max_new_tokens,
        min_new_tokens=0,
        do_sample=False,
        num_beams=1,
        num_return_sequences=1,
        repetition_penalty=1.0,
        no_repeat_ngram_size=0,
        renormalize_logits=False,
        eos_token_id=list(stop_ids) or None,
        pad_token_id=pad_id,
        use_cache=True,
        return_dict_in_generate=False,
        output_scores=False,
        output_logits=False,
    )


@contextlib.contextmanager
def _model_generation_defaults(model: PreTrainedModel, config: GenerationConfig) -> Iterator[None]:
    """Make `config` the model's generation defaults for one call (nothing is filled from the checkpoint)."""
    saved = model.generation_config
    model.generation_config = config
    try:
        yield
    finally:
        model.generation_config = saved


@contextlib.contextmanager
def _rng_from(generator: torch.Generator | None, device: torch.device) -> Iterator[None]:
    """Seed the global RNG of `device` from `generator` for one call, restoring it afterwards."""
    if generator is None:
        yield
        return
    seed = int(torch.randint(0, 2**62, (1,), generator=generator, device=generator.device).item())
    cuda = [device.index if device.index is not None else torch.cuda.current_device()] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=cuda, device_type="cuda"):
        torch.random.default_generator.manual_seed(seed)
        if cuda:
            torch.cuda.manual_seed(seed)
        yield


def inverse_cdf_draw(logprobs: torch.Tensor) -> torch.Tensor:
    """One token per row from exp(`logprobs`) [rows, vocab]: [rows, 1] indices.

    Inverse-CDF sampling: u ~ U[0, 1) per row (torch's global RNG), the first
    index whose cumulative probability exceeds u * total. The cumulative sum is
    float64, so every token keeps its probability to about 1e-16 (a float32 sum
    over a large vocabulary would round the smallest ones away). A token of
    probability 0 is never drawn: its cumulative value equals its predecessor's,
    so it is never the first to exceed u * total, and u * total < total. A row
    with nothing to draw from (NaN or infinite logits) is an error naming it, as
    `torch.multinomial` would refuse it, not an arbitrary token.
    """
    cdf = logprobs.exp().cumsum(-1, dtype=torch.float64)
    total = cdf[:, -1:]
    bad = ~(torch.isfinite(total) & (total > 0)).squeeze(-1)
    if bool(bad.any()):
        raise FloatingPointError(
            f"rollout sampling: rows {bad.nonzero().flatten().tolist()} of the batch have no finite "
            "probabilities to draw from (the model's logits there are NaN or infinite); expected finite logits"
        )
    u = torch.rand((cdf.shape[0], 1), dtype=torch.float64, device=cdf.device) * total
    return torch.searchsorted(cdf, u, right=True).clamp_(max=cdf.shape[-1] - 1)


class _TemperedDraw(LogitsProcessor):
    """Temper the scores, choose each row's token, record its log-prob; return scores whose arg-max is it.

    Hand-written for two reasons: `generate` only offers `output_scores` /
    `output_logits`, which keep a `[rows, vocab]` float tensor per step, and its
    sampler costs a tenth of a CPU decode (module docstring). Greedy decoding
    takes the arg-max of the tempered scores, which is what `generate` itself
    would pick.
    """

    def __init__(self, temperature: float, greedy: bool) -> None:
        self.temperature = temperature
        self.greedy = greedy
        self.picked: list[torch.Tensor] = []

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        tempered = scores / self.temperature
        logprobs = torch.log_softmax(tempered.float(), dim=-1)
        tokens = tempered.argmax(-1, keepdim=True) if self.greedy else inverse_cdf_draw(logprobs)
        self.picked.append(logprobs.gather(-1, tokens).squeeze(-1))
        return torch.full_like(scores, float("-inf")).scatter_(-1, tokens, 0.0)

    def logprobs(self, generated: torch.Tensor) -> torch.Tensor:
        """[rows, steps] log-probs of the `generated` tokens."""
        return torch.stack(self.picked[: generated.shape[1]], dim=1)


class _RowCaps(StoppingCriteria):
    """Finish row i once it has `caps[i]` new tokens (`generate` has one cap for the whole batch)."""

    def __init__(self, prompt_width: int, caps: torch.Tensor) -> None:
        self.prompt_width = prompt_width
        self.caps = caps

    def __call__(self, input_ids: torch.LongTensor, scores: object, **kwargs: object) -> torch.BoolTensor:
        return (input_ids.shape[1] - self.prompt_width) >= self.caps


def _continuations(
    generated: torch.Tensor, logprobs: torch.Tensor, caps: torch.Tensor, stop_ids: frozenset[int]
) -> list[Continuation]:
    """Each row's tokens up to its first stop token or its cap (later columns are padding)."""
    steps = generated.shape[1]
    is_stop = torch.isin(generated, torch.tensor(sorted(stop_ids), dtype=torch.long, device=generated.device))
    first = torch.where(is_stop.any(-1), is_stop.int().argmax(-1), torch.full_like(caps, steps))
    stopped = first < caps
    lengths = torch.where(stopped, first + 1, torch.clamp(caps, max=steps))
    ids, lps = generated.cpu().tolist(), logprobs.float().cpu().tolist()
    return [
        Continuation(ids[r][:n], lps[r][:n], bool(s))
        for r, (n, s) in enumerate(zip(lengths.cpu().tolist(), stopped.cpu().tolist()))
    ]


@torch.no_grad()
def shared_prefix_cache(model: PreTrainedModel, ids: torch.Tensor, mask: torch.Tensor) -> Any | None:
    """A KV cache of every row's context but its last token, each distinct context computed once.

    GRPO samples a group of rows from one prompt; `generate` would prefill each
    row's copy. Here each distinct left-padded context is prefilled once and its
    cache rows are gathered for every row that has it (`batch_select_indices`,
    transformers' own), and `generate` continues from that cache with the last
    context token. None (plain `generate`) when no two rows share a context, a
    context is a single column, the model returns no cache that can be gathered,
    or AREAL_SHARED_PREFIX=off.
    """
    if ids.shape[1] < 2 or shared_prefix_mode() == "off":
        return None
    _, first, inverse = _unique_rows(torch.cat([mask, ids], dim=1))
    if first.numel() == ids.shape[0]:
        return None
    head_ids, head_mask = ids[first, :-1], mask[first, :-1]
    positions = (head_mask.cumsum(-1) - 1).clamp(min=0)
    extra = {"logits_to_keep": 1} if "logits_to_keep" in inspect.signature(model.forward).parameters else {}
    out = model(input_ids=head_ids, attention_mask=head_mask, position_ids=positions, use_cache=True, **extra)
    cache = getattr(out, cache_keyword(), None)
    if cache is None or not callable(getattr(cache, "batch_select_indices", None)):
        return None
    cache.batch_select_indices(inverse)
    return cache


@functools.cache
def cache_keyword() -> str:
    """The installed release's name for the KV cache in `forward`, `generate` and model outputs.

    transformers renamed `past_key_values` to `cache`; the newer releases keep the
    old name as a deprecated alias that warns on every run. Their causal-LM output
    class has the field under the name the release uses, whatever wraps the model
    (a PEFT model's `forward` takes `**kwargs` and names neither), so the pinned
    and the newest releases each get their own name and no warning.
    """
    return "cache" if "cache" in CausalLMOutputWithPast.__dataclass_fields__ else "past_key_values"


def _unique_rows(rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Distinct rows, the index of each one's first occurrence, and each row's distinct index."""
    unique, inverse = torch.unique(rows, dim=0, return_inverse=True)
    order = torch.arange(rows.shape[0], device=rows.device)
    first = torch.full((unique.shape[0],), rows.shape[0], dtype=torch.long, device=rows.device)
    first = first.scatter_reduce(0, inverse, order, reduce="amin")
    return unique, first, inverse


@torch.no_grad()
def sample_continuations(
    model: PreTrainedModel,
    contexts: Sequence[Sequence[int]],
    max_new_tokens: Sequence[int],
    stop_ids: frozenset[int],
    *,
    temperature: float,
    pad_id: int,
    generator: torch.Generator | None = None,
    greedy: bool = False,
) -> list[Continuation]:
    """Sample up to `max_new_tokens[i]` tokens after each context, stopping at `stop_ids`.

    Recorded log-probs are `log_softmax(logits / temperature)` at each sampled
    token, what a training forward pass at that temperature recomputes. `greedy`
    takes the arg-max token instead (e.g. ReMax's greedy baseline); its
    log-probs are still those at `temperature`. Rows are left-padded, so every
    architecture `generate` supports sees each row at its unpadded positions
    (how `generate` is driven: the module docstring).
    """
    check_request(contexts, max_new_tokens, temperature)
    if not contexts:
        return []
    if max(max_new_tokens) == 0:
        return [Continuation([], [], False) for _ in contexts]
    device = next(model.parameters()).device
    ids, mask, _ = left_pad(contexts, pad_id)
    ids, mask = ids.to(device), mask.to(device)
    caps = torch.tensor(list(max_new_tokens), dtype=torch.long, device=device)
    config = neutral_generation_config(max_new_tokens=int(caps.max()), stop_ids=sorted(stop_ids), pad_id=pad_id)
    recorder = _TemperedDraw(temperature, greedy)
    was_training = model.training
    model.eval()
    try:
        cache = shared_prefix_cache(model, ids, mask)
        extra = {cache_keyword(): cache} if cache is not None else {}
        with _model_generation_defaults(model, config), _rng_from(generator, device):
            sequences = model.generate(
                input_ids=ids,
                attention_mask=mask,
                generation_config=config,
                logits_processor=LogitsProcessorList([recorder]),
                stopping_criteria=StoppingCriteriaList([_RowCaps(ids.shape[1], caps)]),
                **extra,
            )
    finally:
        model.train(was_training)
    generated = sequences[:, ids.shape[1] :]
    return _continuations(generated, recorder.logprobs(generated), caps, stop_ids)
