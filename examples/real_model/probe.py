"""How the task was chosen: greedy accuracy of the untrained model on candidate tasks and prompt formats.

    .venv/bin/python examples/real_model/probe.py [--n 32] [--only sums_number_only ...]

Each candidate is a list of chat prompts with known integer answers, decoded
greedily in one left-padded `generate` batch (transformers) with the
checkpoint's chat template. Printed per candidate: `strict` (the completion is
exactly the answer), `last_int` (its last integer is the answer), `correct`
(also finished: the model ended it before the token budget did; the run's
`correct` reward), the mean completion length in tokens, and a few samples.
A candidate for the learning run should start at about 10-40 % `correct`.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from examples.real_model.rewards import last_integer  # noqa: E402

MODEL = Path(__file__).resolve().parents[2] / "runs" / "models" / "SmolLM2-135M-Instruct"
NUMBER_ONLY = "Answer with the number only."
Prompt = tuple[list[dict[str, str]], str]


def chat(question: str, system: str | None) -> list[dict[str, str]]:
    return ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": question}]


def sums(rng: random.Random, n: int, lo: int, hi: int, system: str | None = NUMBER_ONLY, suffix: str = "",
         shots: int = 0) -> list[Prompt]:
    """`What is a + b?` with a, b in [lo, hi]; `shots` solved examples as earlier chat turns."""
    def one() -> tuple[str, str]:
        a, b = rng.randint(lo, hi), rng.randint(lo, hi)
        return f"What is {a} + {b}?", str(a + b)

    out = []
    for _ in range(n):
        messages = [{"role": "system", "content": system}] if system else []
        for _ in range(shots):
            q, a = one()
            messages += [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
        q, a = one()
        out.append(([*messages, {"role": "user", "content": q + suffix}], a))
    return out


def reasoning_gym(name: str, n: int, **config: object) -> list[Prompt]:
    import reasoning_gym as rg

    data = rg.create_dataset(name, seed=5, size=n, **config)
    return [(chat(entry["question"], NUMBER_ONLY), str(entry["answer"])) for entry in data]


def held_out(n: int) -> list[Prompt]:
    """The run's own held-out set (data/eval.jsonl), with its system prompt."""
    import json

    rows = [json.loads(line) for line in (Path(__file__).parent / "data" / "eval.jsonl").read_text().splitlines()]
    return [(chat(r["prompt"], NUMBER_ONLY), r["answer"]) for r in rows[:n]]


def candidates(n: int) -> dict[str, tuple[Callable[[], list[Prompt]], int]]:
    """name -> (prompts, max new tokens)."""
    rng = random.Random(0)
    return {
        "held_out_set": (lambda: held_out(max(n, 40)), 16),
        "sums_number_only": (lambda: sums(rng, n, 0, 9), 16),
        "sums_number_only_10tok": (lambda: sums(rng, n, 0, 9), 10),
        "sums_number_only_24tok": (lambda: sums(rng, n, 0, 9), 24),
        "sums_2digit_number_only": (lambda: sums(rng, n, 10, 99), 16),
        "sums_0_20_number_only": (lambda: sums(rng, n, 0, 20), 16),
        "sums_instruction_in_user_turn": (lambda: sums(rng, n, 0, 9, None, " " + NUMBER_ONLY), 12),
        "sums_2_shot": (lambda: sums(rng, n, 0, 9, shots=2), 12),
        "sums_2digit_2_shot": (lambda: sums(rng, n, 10, 99, shots=2), 12),
        "rg_chain_sum_2_3_terms": (lambda: reasoning_gym("chain_sum", n, min_terms=2, max_terms=3, min_digits=1,
                                                         max_digits=1), 16),
        "rg_basic_arithmetic_1_2_digits": (lambda: reasoning_gym(
            "basic_arithmetic", n, min_terms=2, max_terms=2, min_digits=1, max_digits=2, operators=("+", "-"),
            allow_parentheses=False, allow_negation=False), 16),
        "rg_letter_counting": (lambda: reasoning_gym("letter_counting", n, min_words=3, max_words=5), 16),
        "rg_leg_counting": (lambda: reasoning_gym("leg_counting", n, min_animals=1, max_animals=2,
                                                  max_instances=3), 16),
    }


@torch.no_grad()
def probe(model: object, tok: object, prompts: list[Prompt], max_new: int) -> tuple[list[str], list[bool], float]:
    """Greedy completions, whether each one ended at a stop token (the trainer's: eos of tokenizer and model)."""
    texts = [tok.apply_chat_template(m, tokenize=False, add_generation_prompt=True) for m, _ in prompts]
    enc = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    stops = sorted({tok.eos_token_id, model.generation_config.eos_token_id})
    start = time.perf_counter()
    out = model.generate(**enc, max_new_tokens=max_new, do_sample=False, pad_token_id=model.config.eos_token_id,
                         eos_token_id=stops)
    new = out[:, enc.input_ids.shape[1]:]
    finished = torch.isin(new, torch.tensor(stops)).any(dim=1).tolist()
    return tok.batch_decode(new, skip_special_tokens=True), finished, time.perf_counter() - start


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=32, help="prompts per candidate")
    p.add_argument("--only", nargs="*", default=None, help="candidate names (default: all)")
    p.add_argument("--model", type=Path, default=MODEL)
    p.add_argument("--threads", type=int, default=2)
    opts = p.parse_args()
    torch.set_num_threads(opts.threads)
    tok = AutoTokenizer.from_pretrained(opts.model, padding_side="left")
    tok.pad_token = tok.pad_token or tok.eos_token
    model = AutoModelForCausalLM.from_pretrained(opts.model, dtype=torch.float32).eval()
    for name, (make, max_new) in candidates(opts.n).items():
        if opts.only and name not in opts.only:
            continue
        prompts = make()
        completions, finished, seconds = probe(model, tok, prompts, max_new)
        answers = [a for _, a in prompts]
        strict = sum(c.strip() == a for c, a in zip(completions, answers)) / len(answers)
        last = [last_integer(c) == a for c, a in zip(completions, answers)]
        correct = sum(ok and done for ok, done in zip(last, finished)) / len(answers)
        length = sum(len(tok(c).input_ids) for c in completions) / len(completions)
        print(f"{name}: n={len(prompts)} max_new={max_new} strict={strict:.2f} last_int={sum(last) / len(last):.2f} "
              f"correct={correct:.2f} tokens={length:.1f} ({seconds:.0f} s)", flush=True)
        for (messages, answer), completion in list(zip(prompts, completions))[:3]:
            print(f"    {messages[-1]['content']!r} -> {completion!r} [{answer}]")


if __name__ == "__main__":
    main()
