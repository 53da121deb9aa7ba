"""Sampling through transformers `generate` (`areal_adv.trainer.lm.sampling`).

* greedy decoding equals a plain reference loop (one full forward per token, each row unpadded) for
  several architectures and attention kernels, with per-row caps, stop tokens and left padding;
* the sampled distribution is exactly softmax(logits / T), even when the checkpoint's
  `generation_config.json` asks for top-k/top-p/min-p, penalties, suppressed tokens or another EOS;
  the inverse-CDF draw never returns a token of probability 0, at either end of the uniform range;
* behaviour log-probs equal a recomputed forward pass at the sampling temperature;
* randomness: a `generator` makes samples reproducible and leaves the global RNG alone;
* rows sharing a context are prefilled once and sample as without sharing.
"""

from __future__ import annotations

import functools
import math
import random

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from transformers import GenerationConfig

from areal_adv.api.train_args import ModelConfig
from areal_adv.trainer.lm.model import build_policy
from areal_adv.trainer.lm.sampling import (
    Continuation,
    inverse_cdf_draw,
    neutral_generation_config,
    sample_continuations,
)
from areal_adv.trainer.lm.tokenizer import build_word_tokenizer

torch.set_num_threads(2)

VOCAB = 24
SPECIAL = {"pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}
STOP = frozenset({2, 3})


def tiny(arch: str = "llama", attn: str = "eager", seed: int = 0, path: str | None = None):
    torch.manual_seed(seed)
    if path is not None:  # a checkpoint brings its own architecture
        cfg = ModelConfig(path=path, attn_implementation=attn)
    else:
        cfg = ModelConfig(
            arch=arch, hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64, attn_implementation=attn
        )
    return build_policy(cfg, VOCAB, SPECIAL)


def contexts(n: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    return [[1] + [rng.randrange(4, VOCAB) for _ in range(rng.randrange(0, 7))] for _ in range(n)]


@torch.no_grad()
def reference_greedy(model, ctx: list[int], cap: int, temperature: float) -> Continuation:
    """One unpadded row, one full forward pass (no cache) per generated token."""
    ids, logps = list(ctx), []
    for _ in range(cap):
        logits = model(input_ids=torch.tensor([ids])).logits[0, -1].float()
        logp = torch.log_softmax(logits / temperature, dim=-1)
        tok = int(logits.argmax())
        ids.append(tok)
        logps.append(float(logp[tok]))
        if tok in STOP:
            return Continuation(ids[len(ctx) :], logps, True)
    return Continuation(ids[len(ctx) :], logps, False)


@torch.no_grad()
def recomputed_logprobs(model, ctx: list[int], out: Continuation, temperature: float) -> list[float]:
    """log softmax(logits / T) of each generated token, from one forward over the whole unpadded row."""
    full = torch.tensor([list(ctx) + out.token_ids])
    logp = torch.log_softmax(model(input_ids=full).logits[0].float() / temperature, dim=-1)
    return [float(logp[len(ctx) - 1 + i, tok]) for i, tok in enumerate(out.token_ids)]


@pytest.mark.parametrize("arch,attn", [("llama", "eager"), ("llama", "sdpa"), ("qwen2", "eager")])
def test_greedy_generate_equals_a_plain_reference_loop(arch: str, attn: str) -> None:
    model = tiny(arch, attn, seed=1)
    model.eval()
    ctx = contexts(7)
    caps = [5, 1, 3, 0, 6, 2, 4]
    outs = sample_continuations(model, ctx, caps, STOP, temperature=0.7, pad_id=0, greedy=True)
    for c, cap, out in zip(ctx, caps, outs):
        ref = reference_greedy(model, c, cap, 0.7)
        assert out.token_ids == ref.token_ids and out.stopped == ref.stopped
        assert out.logprobs == pytest.approx(ref.logprobs, abs=2e-5)


def test_rows_stop_at_their_caps_and_stop_tokens_only() -> None:
    model = tiny(seed=2)
    model.generation_config.eos_token_id = 5  # the checkpoint's own EOS must not end rows
    ctx = contexts(64, seed=3)
    caps = [random.Random(i).randrange(0, 6) for i in range(64)]
    outs = sample_continuations(
        model, ctx, caps, STOP, temperature=1.0, pad_id=0, generator=torch.Generator().manual_seed(0)
    )
    assert any(5 in o.token_ids[:-1] for o in outs)
    assert any(o.stopped for o in outs) and any(not o.stopped and o.token_ids for o in outs)
    for out, cap in zip(outs, caps):
        assert len(out.token_ids) == len(out.logprobs) <= cap
        assert not any(t in STOP for t in out.token_ids[:-1])
        assert out.stopped == (bool(out.token_ids) and out.token_ids[-1] in STOP)
        if not out.stopped:
            assert len(out.token_ids) == cap
        assert all(math.isfinite(lp) and lp <= 0 for lp in out.logprobs)


HOSTILE = dict(
    do_sample=True,
    top_k=2,
    top_p=0.3,
    min_p=0.5,
    typical_p=0.5,
    temperature=0.05,
    repetition_penalty=3.0,
    no_repeat_ngram_size=1,
    suppress_tokens=[4, 5, 6],
    bad_words_ids=[[7]],
    begin_suppress_tokens=[8],
    forced_eos_token_id=2,
    min_new_tokens=3,
    max_new_tokens=1,
    eos_token_id=9,
    epsilon_cutoff=0.2,
    renormalize_logits=True,
)


@pytest.fixture(scope="module")
def hostile_checkpoint(tmp_path_factory) -> str:
    """A saved tiny model whose generation_config.json would reshape every distribution."""
    path = tmp_path_factory.mktemp("hostile")
    model = tiny(seed=4)
    model.generation_config = GenerationConfig(**HOSTILE)
    model.save_pretrained(path)
    # a checkpoint needs its tokenizer (model.path): a word-level one with the model's 24 ids
    build_word_tokenizer([f"w{i}" for i in range(VOCAB - 4)]).save_pretrained(path)
    return str(path)


def test_checkpoint_generation_config_does_not_change_the_sampled_distribution(hostile_checkpoint: str) -> None:
    model = tiny(path=hostile_checkpoint)
    assert model.generation_config.top_k == 2  # loaded from generation_config.json
    ctx, temperature, n = [1, 10, 11, 12], 0.8, 20000
    with torch.no_grad():
        probs = torch.softmax(model(input_ids=torch.tensor([ctx])).logits[0, -1].float() / temperature, dim=-1)
    outs = sample_continuations(
        model, [ctx] * n, [1] * n, STOP, temperature=temperature, pad_id=0, generator=torch.Generator().manual_seed(1)
    )
    counts = torch.bincount(torch.tensor([o.token_ids[0] for o in outs]), minlength=VOCAB).double()
    tv = 0.5 * (counts / n - probs.double()).abs().sum().item()
    # sampling noise alone: E[TV] ~ sum_i sqrt(p_i (1 - p_i) / n) * sqrt(2/pi) / 2, about 0.012 here
    noise = 0.5 * math.sqrt(2 / math.pi) * (probs * (1 - probs) / n).sqrt().sum().item()
    print(f"\nTV(empirical, softmax(logits/T)) = {tv:.4f} (expected from noise alone ~{noise:.4f})")
    assert tv < 3 * noise
    assert (counts > 0).sum() >= 20  # none of top_k=2 / top_p / min_p / suppression was applied
    logp = torch.log(probs)
    assert [o.logprobs[0] for o in outs[:200]] == pytest.approx(
        [float(logp[o.token_ids[0]]) for o in outs[:200]], abs=1e-5
    )
    assert model.generation_config.top_k == 2 and model.generation_config.eos_token_id == 9  # restored


def test_inverse_cdf_draw_follows_a_long_tailed_distribution() -> None:
    """A 20k vocabulary whose probabilities fall geometrically: the draw's frequencies match them."""
    vocab, n, rows = 20_000, 10_000, 250
    logp = torch.log_softmax(-0.01 * torch.arange(vocab, dtype=torch.float32), dim=-1)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        tokens = torch.cat([inverse_cdf_draw(logp.expand(rows, vocab)).squeeze(-1) for _ in range(n // rows)])
    probs = logp.double().exp()
    counts = torch.bincount(tokens, minlength=vocab).double()
    tv = 0.5 * (counts / n - probs).abs().sum().item()
    noise = 0.5 * math.sqrt(2 / math.pi) * (probs * (1 - probs) / n).sqrt().sum().item()
    assert tv < 3 * noise
    mean = (tokens.double().mean() - (torch.arange(vocab) * probs).sum()).abs().item()
    assert mean < 4 * math.sqrt(((torch.arange(vocab) ** 2) * probs).sum().item() / n)


@settings(max_examples=50, deadline=None)
@given(
    allowed=st.lists(st.booleans(), min_size=2, max_size=40).filter(any),
    u=st.sampled_from([0.0, 1.0 - 2.0**-53, 0.5]),
    seed=st.integers(0, 2**16),
)
def test_inverse_cdf_draw_never_returns_a_token_of_probability_zero(allowed: list[bool], u: float, seed: int) -> None:
    logits = torch.randn(len(allowed), generator=torch.Generator().manual_seed(seed)) * 30
    logits[~torch.tensor(allowed)] = float("-inf")
    logp = torch.log_softmax(logits, dim=-1).expand(3, -1)
    with pytest.MonkeyPatch.context() as patch:  # the uniform number at 0, just under 1, or in the middle
        patch.setattr(torch, "rand", lambda size, **kw: torch.full(size, u, **kw))
        token = int(inverse_cdf_draw(logp)[0, 0])
    assert allowed[token]
    cdf = logp[0].exp().cumsum(-1, dtype=torch.float64)
    below = float(cdf[token - 1]) if token else 0.0
    assert below <= u * float(cdf[-1]) < float(cdf[token])  # the first index whose cumulative value exceeds u


@pytest.mark.parametrize("poison", [float("nan"), float("inf")])
def test_inverse_cdf_draw_refuses_a_row_without_finite_probabilities(poison: float) -> None:
    logits = torch.randn(4, 10)
    logits[2, 3] = poison  # NaN, or +inf which log_softmax turns into NaN
    with pytest.raises(FloatingPointError, match=r"rollout sampling: rows \[2\] of the batch have no finite"):
        inverse_cdf_draw(torch.log_softmax(logits, dim=-1))


def test_no_global_top_k_default_truncates_a_vocabulary_larger_than_50() -> None:
    """`generate` defaults to top_k=50 when sampling; the neutral config must switch that off."""
    torch.manual_seed(0)
    cfg = ModelConfig(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64)
    model = build_policy(cfg, 200, SPECIAL)
    n = 4000
    outs = sample_continuations(
        model, [[1, 5]] * n, [1] * n, STOP, temperature=1.0, pad_id=0, generator=torch.Generator().manual_seed(0)
    )
    assert len({o.token_ids[0] for o in outs}) > 150  # near-uniform logits over 200 tokens


@pytest.mark.parametrize("greedy", [False, True])
def test_behaviour_logprobs_equal_a_recomputed_forward_pass_under_a_hostile_config(
    hostile_checkpoint: str, greedy: bool
) -> None:
    model = tiny(path=hostile_checkpoint)
    ctx = contexts(12, seed=5)
    caps = [6] * 12
    outs = sample_continuations(
        model, ctx, caps, STOP, temperature=1.3, pad_id=0, greedy=greedy, generator=torch.Generator().manual_seed(2)
    )
    assert sum(len(o.token_ids) for o in outs) > 24
    for c, out in zip(ctx, outs):
        assert out.logprobs == pytest.approx(recomputed_logprobs(model, c, out, 1.3), abs=2e-5)
    if greedy:
        for c, out in zip(ctx, outs):
            assert out.token_ids == reference_greedy(model, c, 6, 1.3).token_ids


def test_generator_makes_samples_reproducible_and_leaves_the_global_rng_alone() -> None:
    model = tiny(seed=6)
    ctx, caps = contexts(16, seed=7), [4] * 16

    def draw(generator):
        return [
            o.token_ids
            for o in sample_continuations(model, ctx, caps, STOP, temperature=1.0, pad_id=0, generator=generator)
        ]

    torch.manual_seed(123)
    before = torch.get_rng_state()
    first = draw(torch.Generator().manual_seed(9))
    assert torch.equal(torch.get_rng_state(), before)  # forked and restored
    assert draw(torch.Generator().manual_seed(9)) == first
    assert draw(torch.Generator().manual_seed(10)) != first
    gen = torch.Generator().manual_seed(9)
    assert draw(gen) == first and draw(gen) != first  # the generator advances
    # without a generator, generate consumes torch's global RNG
    torch.manual_seed(5)
    a = draw(None)
    torch.manual_seed(5)
    assert draw(None) == a
    assert not torch.equal(torch.get_rng_state(), before)


_MODEL = tiny(seed=8)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    lengths=st.lists(st.integers(1, 9), min_size=1, max_size=6),
    caps=st.lists(st.integers(0, 5), min_size=6, max_size=6),
    temperature=st.floats(0.3, 2.0),
    seed=st.integers(0, 2**16),
)
def test_sampling_contract_holds_for_any_batch(
    lengths: list[int], caps: list[int], temperature: float, seed: int
) -> None:
    model = _MODEL
    rng = random.Random(seed)
    ctx = [[1] + [rng.randrange(2, VOCAB) for _ in range(n - 1)] for n in lengths]
    caps = caps[: len(ctx)]
    outs = sample_continuations(
        model, ctx, caps, STOP, temperature=temperature, pad_id=0, generator=torch.Generator().manual_seed(seed)
    )
    assert len(outs) == len(ctx)
    for c, cap, out in zip(ctx, caps, outs):
        assert len(out.token_ids) == len(out.logprobs) <= cap
        assert out.stopped == (bool(out.token_ids) and out.token_ids[-1] in STOP)
        if not out.stopped:
            assert len(out.token_ids) == cap
        assert not any(t in STOP for t in out.token_ids[:-1])
        assert out.logprobs == pytest.approx(recomputed_logprobs(model, c, out, temperature), abs=3e-5)


def test_neutral_config_sets_every_score_changing_option_explicitly() -> None:
    cfg = neutral_generation_config(max_new_tokens=3, stop_ids=[2, 3], pad_id=0)
    assert (cfg.do_sample, cfg.num_beams, cfg.repetition_penalty, cfg.no_repeat_ngram_size, cfg.min_new_tokens) == (
        False,  # the draw is made by the processor; generate takes the arg-max of what it returns
        1,
        1.0,
        0,
        0,
    )
    assert cfg.eos_token_id == [2, 3] and cfg.pad_token_id == 0 and cfg.max_new_tokens == 3


@pytest.mark.parametrize(
    "args,match",
    [
        (dict(contexts=[[1]], max_new_tokens=[1, 2]), "1 contexts but 2 max_new_tokens"),
        (dict(contexts=[[1], []], max_new_tokens=[1, 1]), r"contexts \[1\] are empty"),
        (dict(contexts=[[1]], max_new_tokens=[-1]), r"max_new_tokens\[0\] are not integers >= 0"),
        (dict(contexts=[[1]], max_new_tokens=[1], temperature=0.0), "temperature=0.0"),
    ],
)
def test_bad_requests_name_the_problem(args: dict, match: str) -> None:
    kwargs = {"temperature": 1.0, **args}
    with pytest.raises(ValueError, match=match):
        sample_continuations(_MODEL, kwargs.pop("contexts"), kwargs.pop("max_new_tokens"), STOP, pad_id=0, **kwargs)


def test_no_contexts_and_zero_caps_generate_nothing() -> None:
    assert sample_continuations(_MODEL, [], [], STOP, temperature=1.0, pad_id=0) == []
    outs = sample_continuations(_MODEL, [[1, 4], [1]], [0, 0], STOP, temperature=1.0, pad_id=0)
    assert outs == [Continuation([], [], False), Continuation([], [], False)]


def _groups(n_prompts: int, size: int, seed: int) -> list[list[int]]:
    """GRPO-style contexts: each prompt repeated `size` times in a row (prompts of different lengths)."""
    return [c for c in contexts(n_prompts, seed=seed) for _ in range(size)]


@pytest.mark.parametrize("arch,attn", [("llama", "sdpa"), ("llama", "eager"), ("qwen2", "sdpa")])
def test_a_shared_prompt_is_prefilled_once_and_samples_as_before(monkeypatch, arch: str, attn: str) -> None:
    model = tiny(arch, attn, seed=11)
    ctx, caps = _groups(4, 4, seed=12), [5] * 16
    calls = []
    forward = model.forward

    @functools.wraps(forward)  # keeps the signature that generate inspects
    def recording(*args, **kwargs):
        calls.append(kwargs["input_ids"].shape)
        return forward(*args, **kwargs)

    monkeypatch.setattr(model, "forward", recording)

    def draw(mode: str, greedy: bool) -> list[Continuation]:
        monkeypatch.setenv("AREAL_SHARED_PREFIX", mode)
        calls.clear()
        return sample_continuations(
            model, ctx, caps, STOP, temperature=0.9, pad_id=0, greedy=greedy, generator=torch.Generator().manual_seed(3)
        )

    shared = draw("auto", greedy=False)
    width = max(len(c) for c in ctx)
    assert calls[0] == (4, width - 1) and calls[1] == (16, 1)  # 4 distinct prompts once, then decoding
    plain = draw("off", greedy=False)
    assert calls[0] == (16, width)
    assert [o.token_ids for o in shared] == [o.token_ids for o in plain]
    for c, a, b in zip(ctx, shared, plain):
        assert a.logprobs == pytest.approx(b.logprobs, abs=2e-5)
        assert a.logprobs == pytest.approx(recomputed_logprobs(model, c, a, 0.9), abs=2e-5)
    for c, out in zip(ctx, draw("auto", greedy=True)):
        ref = reference_greedy(model, c, 5, 0.9)
        assert out.token_ids == ref.token_ids and out.stopped == ref.stopped
