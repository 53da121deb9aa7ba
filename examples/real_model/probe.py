"""How the tasks were chosen: accuracy of the untrained model on candidate tasks and prompt formats.

    .venv/bin/python examples/real_model/probe.py [--n 32] [--only sums_number_only ...]
    .venv/bin/python examples/real_model/probe.py --skills [--n 100] [--only spell_backward_3_6 ...]
    .venv/bin/python examples/real_model/probe.py --skills --rows data/TASK/eval.jsonl --model CHECKPOINT
    ... --results bench/results/FILE.jsonl --label NAME   # also append the scores (and per-row hits) as a JSON row

Each candidate is a list of chat prompts with known integer answers, decoded
greedily in one left-padded `generate` batch (transformers) with the
checkpoint's chat template. Printed per candidate: `strict` (the completion is
exactly the answer), `last_int` (its last integer is the answer), `correct`
(also finished: the model ended it before the token budget did; the run's
`correct` reward), the mean completion length in tokens, and a few samples.
A candidate for the learning run should start at about 10-40 % `correct`.

`--skills` probes the skill tasks of skill_tasks.py instead, each scored by
reasoning-gym's `score_answer` (an answer counts when it scores 1.0):
`strict` (the whole finished completion is the answer, the format the system
prompt asks for), `lenient` (the answer read out of any wording), `prefix`
(greedy again with the answer's start forced into the assistant turn, e.g.
"The answer is ", then read leniently), and under sampling (temperature 1,
`--k` samples for each of the first `--sampled-prompts` prompts) the mean
strict success, pass@k and the fraction of prompts with a mixed group (some
but not all samples right: the groups GRPO learns from), the same two read
leniently, and `constant`: the share of rows whose answer is the most common
one (what an answer that ignores the question scores; a gain up to it can be a
learned prior rather than the skill). Low `strict` with high
`lenient`/`prefix` is a missing format; all three low is a missing skill.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from examples.real_model import skill_tasks  # noqa: E402
from examples.real_model.rewards import last_integer  # noqa: E402

MODEL = Path(__file__).resolve().parents[2] / "runs" / "models" / "SmolLM2-135M-Instruct"
NUMBER_ONLY = "Answer with the number only."
Prompt = tuple[list[dict[str, str]], str]


def chat(question: str, system: str | None) -> list[dict[str, str]]:
    return ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": question}]


def sums(
    rng: random.Random, n: int, lo: int, hi: int, system: str | None = NUMBER_ONLY, suffix: str = "", shots: int = 0
) -> list[Prompt]:
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
        "rg_chain_sum_2_3_terms": (
            lambda: reasoning_gym("chain_sum", n, min_terms=2, max_terms=3, min_digits=1, max_digits=1),
            16,
        ),
        "rg_basic_arithmetic_1_2_digits": (
            lambda: reasoning_gym(
                "basic_arithmetic",
                n,
                min_terms=2,
                max_terms=2,
                min_digits=1,
                max_digits=2,
                operators=("+", "-"),
                allow_parentheses=False,
                allow_negation=False,
            ),
            16,
        ),
        "rg_letter_counting": (lambda: reasoning_gym("letter_counting", n, min_words=3, max_words=5), 16),
        "rg_leg_counting": (
            lambda: reasoning_gym("leg_counting", n, min_animals=1, max_animals=2, max_instances=3),
            16,
        ),
    }


@torch.no_grad()
def probe(model: object, tok: object, prompts: list[Prompt], max_new: int) -> tuple[list[str], list[bool], float]:
    """Greedy completions, whether each one ended at a stop token (the trainer's: eos of tokenizer and model)."""
    texts = [tok.apply_chat_template(m, tokenize=False, add_generation_prompt=True) for m, _ in prompts]
    enc = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    stops = sorted({tok.eos_token_id, model.generation_config.eos_token_id})
    start = time.perf_counter()
    out = model.generate(
        **enc, max_new_tokens=max_new, do_sample=False, pad_token_id=model.config.eos_token_id, eos_token_id=stops
    )
    new = out[:, enc.input_ids.shape[1] :]
    finished = torch.isin(new, torch.tensor(stops)).any(dim=1).tolist()
    return tok.batch_decode(new, skip_special_tokens=True), finished, time.perf_counter() - start


@torch.no_grad()
def generate(model: Any, tok: Any, texts: list[str], max_new: int, samples: int = 0) -> tuple[list[str], list[bool]]:
    """Completions of chat-formatted `texts` (greedy; `samples` > 0: that many each at temperature 1), finished?"""
    enc = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    stops = sorted({tok.eos_token_id, model.generation_config.eos_token_id})
    sampling = (
        {"do_sample": True, "temperature": 1.0, "top_p": 1.0, "top_k": 0, "num_return_sequences": samples}
        if samples
        else {"do_sample": False}
    )
    out = model.generate(
        **enc, max_new_tokens=max_new, pad_token_id=model.config.eos_token_id, eos_token_id=stops, **sampling
    )
    new = out[:, enc.input_ids.shape[1] :]
    return tok.batch_decode(new, skip_special_tokens=True), torch.isin(new, torch.tensor(stops)).any(dim=1).tolist()


def forced_start(task: skill_tasks.SkillTask, row: dict[str, str], equation: bool) -> str:
    """The answer's forced start: the task's prefix, or with `equation` the sum's own "a + b =" (basic_arithmetic)."""
    if not equation:
        return task.prefix
    if task.dataset != "basic_arithmetic":
        raise SystemExit(f"--equation-prefix: {task.name} is {task.dataset}, expected a basic_arithmetic task")
    return row["prompt"].removeprefix("Calculate ").rstrip(".") + " ="


def probe_skill(
    model: Any,
    tok: Any,
    task: skill_tasks.SkillTask,
    n: int,
    k: int,
    sampled: int,
    given: list[dict] | None = None,
    equation: bool = False,
) -> dict[str, Any]:
    """strict / lenient / forced-prefix greedy accuracy on `n` rows, and sampled success on the first `sampled`.

    The rows are reasoning-gym's seed 5, or the first `n` of `given` (a run's held-out file, so that a
    trained checkpoint is scored on questions it was not trained on).
    """
    rows = given[:n] if given is not None else skill_tasks.rows(task, seed=5, size=n)
    n = len(rows)
    texts = [
        tok.apply_chat_template(
            [{"role": "system", "content": task.system_prompt}, {"role": "user", "content": r["prompt"]}],
            tokenize=False,
            add_generation_prompt=True,
        )
        for r in rows
    ]

    def solved(row: dict[str, str], answer: str | None) -> bool:
        return skill_tasks.score(task.name, answer, row["answer"], row["metadata"]) == 1.0

    def lenient(row: dict[str, str], text: str) -> bool:
        return solved(row, skill_tasks.lenient_answer(task.name, text, row["answer"]))

    start = time.perf_counter()
    greedy, done = generate(model, tok, texts, task.max_new_tokens)
    starts = [forced_start(task, r, equation) for r in rows]
    forced, _ = generate(model, tok, [t + start for t, start in zip(texts, starts)], task.max_new_tokens)
    picked = rows[:sampled]
    draws, draws_done = generate(model, tok, texts[:sampled], task.max_new_tokens, samples=k)
    wins = [
        [ok and solved(r, c.strip()) for c, ok in zip(draws[i * k : (i + 1) * k], draws_done[i * k : (i + 1) * k])]
        for i, r in enumerate(picked)
    ]
    lenient_wins = [[lenient(r, c) for c in draws[i * k : (i + 1) * k]] for i, r in enumerate(picked)]
    # the best answer that ignores the question: the most common answer of the rows, right on this share of them
    constant = max(Counter(r["answer"].lower() for r in rows).values()) / n
    prefix_hits = [int(lenient(r, start + c)) for r, start, c in zip(rows, starts, forced)]
    return {
        "task": task.name,
        "n": n,
        "max_new": task.max_new_tokens,
        "strict": sum(ok and solved(r, c.strip()) for r, c, ok in zip(rows, greedy, done)) / n,
        "lenient": sum(lenient(r, c) for r, c in zip(rows, greedy)) / n,
        "prefix": sum(prefix_hits) / n,
        "prefix_hits": prefix_hits,  # per row, in the rows' order: paired comparisons of two checkpoints
        "sampled_mean": sum(map(sum, wins)) / (k * len(wins)),
        "pass_at_k": sum(map(any, wins)) / len(wins),
        "mixed_groups": sum(any(w) and not all(w) for w in wins) / len(wins),
        "sampled_lenient": sum(map(sum, lenient_wins)) / (k * len(lenient_wins)),
        "mixed_lenient": sum(any(w) and not all(w) for w in lenient_wins) / len(lenient_wins),
        "constant": constant,
        "k": k,
        "seconds": time.perf_counter() - start,
        "examples": [(r["prompt"], c, r["answer"]) for r, c in zip(rows[:3], greedy)],
    }


def main_skills(model: Any, tok: Any, opts: argparse.Namespace) -> None:
    """One line per skill task (and its first greedy answers)."""
    given = [json.loads(line) for line in opts.rows.read_text().splitlines()] if opts.rows else None
    for name, task in skill_tasks.TASKS.items():
        if (opts.only and name not in opts.only) or (given and name != given[0]["task"]):
            continue
        r = probe_skill(model, tok, task, opts.n, opts.k, opts.sampled_prompts, given, opts.equation_prefix)
        print(
            f"{name}: n={r['n']} max_new={r['max_new']} strict={r['strict']:.2f} lenient={r['lenient']:.2f} "
            f"prefix={r['prefix']:.2f} sampled={r['sampled_mean']:.3f} pass@{r['k']}={r['pass_at_k']:.2f} "
            f"mixed={r['mixed_groups']:.2f} sampled_lenient={r['sampled_lenient']:.3f} "
            f"mixed_lenient={r['mixed_lenient']:.2f} constant={r['constant']:.2f} ({r['seconds']:.0f} s)",
            flush=True,
        )
        for prompt, completion, answer in r["examples"]:
            print(f"    {prompt!r} -> {completion!r} [{answer}]")
        if opts.results is not None:
            append_result(opts, r)


def append_result(opts: argparse.Namespace, scores: dict[str, Any]) -> None:
    """One JSON row in `--results`: the label, what was probed and how, and the scores (examples left out)."""
    row = {
        "label": opts.label or str(opts.model),
        "model": str(opts.model),
        "rows": str(opts.rows) if opts.rows else None,
        "equation_prefix": opts.equation_prefix,
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "command": "examples/real_model/probe.py " + " ".join(sys.argv[1:]),
        **{k: v for k, v in scores.items() if k != "examples"},
    }
    opts.results.parent.mkdir(parents=True, exist_ok=True)
    with opts.results.open("a", encoding="utf-8") as f:
        f.write(json.dumps(row) + "\n")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=32, help="prompts per candidate")
    p.add_argument("--only", nargs="*", default=None, help="candidate names (default: all)")
    p.add_argument("--model", type=Path, default=MODEL)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--skills", action="store_true", help="the skill tasks of skill_tasks.py instead")
    p.add_argument("--k", type=int, default=8, help="--skills: samples per prompt")
    p.add_argument("--sampled-prompts", type=int, default=8, help="--skills: prompts sampled k times")
    p.add_argument("--equation-prefix", action="store_true", help="--skills: force 'a + b =' (sums) as the start")
    p.add_argument("--rows", type=Path, default=None, help="--skills: rows of this JSONL file (its task) instead")
    p.add_argument("--results", type=Path, default=None, help="--skills: append each task's scores here (JSONL)")
    p.add_argument("--label", default=None, help="--results: the row's label (default: the --model path)")
    opts = p.parse_args()
    torch.set_num_threads(opts.threads)
    tok = AutoTokenizer.from_pretrained(opts.model, padding_side="left")
    tok.pad_token = tok.pad_token or tok.eos_token
    model = AutoModelForCausalLM.from_pretrained(opts.model, dtype=torch.float32).eval()
    if opts.skills:
        torch.manual_seed(0)
        return main_skills(model, tok, opts)
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
        print(
            f"{name}: n={len(prompts)} max_new={max_new} strict={strict:.2f} last_int={sum(last) / len(last):.2f} "
            f"correct={correct:.2f} tokens={length:.1f} ({seconds:.0f} s)",
            flush=True,
        )
        for (messages, answer), completion in list(zip(prompts, completions))[:3]:
            print(f"    {messages[-1]['content']!r} -> {completion!r} [{answer}]")


if __name__ == "__main__":
    main()
