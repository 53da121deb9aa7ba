"""The rollout's sampling alone: SmolLM2-135M, 4 prompts x 4 samples x 16 tokens, as the vs-TRL step samples.

Usage:
    .venv/bin/python -m bench.real_model.bench_decode --model runs/models/SmolLM2-135M-Instruct
    .venv/bin/python -m bench.real_model.bench_decode --model runs/models/SmolLM2-135M-Instruct --profile --results bench/results/decode.jsonl
    .venv/bin/python -m bench.real_model.bench_decode --report                # the table of the rows in bench/results/decode.jsonl
    .venv/bin/python -m bench.real_model.bench_decode --report --write-docs   # ... and its block of docs/performance.md

`sample_continuations` (transformers `generate` with the shared-prefix cache) on 16
rows of 46 random prompt tokens, 16 new tokens each (no stop token among them), in
three configurations: float32 with 1 and with 2 threads, and bfloat16 autocast with
2 threads. Each configuration gets one warm-up call, then `--reps` rounds time each
configuration once, in an order that rotates every round, so a change of the
machine's load falls on all three alike; the ratios (2 threads / 1, bf16 / float32)
are medians of the per-round ratios. `--profile` adds torch.profiler's table of one
float32 2-thread call (self CPU time by operator).

With `--results FILE` the run appends one JSON row to FILE: the command, commit, UTC
date, the load before and after (load averages and /proc/pressure/cpu), every call's
time, the ratios and the profile's leading operators (bench/bench_rows.py).
`--report` rebuilds the tables from the rows; `--write-docs` writes them between the
`bench_decode` markers of docs/performance.md.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch: idle OpenMP threads sleep

from bench import bench_rows  # noqa: E402

RESULTS = bench_rows.RESULTS / "decode.jsonl"
DOC_BLOCK = "bench_decode"
REPORT_COMMAND = ".venv/bin/python -m bench.real_model.bench_decode --report --write-docs"
#: (name, autocast, threads) in the order of the first round
CONFIGS = (("float32, 1 thread", False, 1), ("float32, 2 threads", False, 2), ("bf16 autocast, 2 threads", True, 2))
#: ratios of two configurations that differ in one thing: (name, numerator, denominator)
RATIOS = (
    ("2 threads / 1 thread (float32)", "float32, 2 threads", "float32, 1 thread"),
    ("bf16 / float32 (2 threads)", "bf16 autocast, 2 threads", "float32, 2 threads"),
)
ROWS, NEW_TOKENS, PROMPT_TOKENS = 16, 16, 46


def contexts(
    n_prompts: int = 4, n_samples: int = 4, length: int = PROMPT_TOKENS, vocab: int = 40000
) -> list[list[int]]:
    import torch

    gen = torch.Generator().manual_seed(0)
    high = min(40000, vocab)
    prompts = [[int(t) for t in torch.randint(10, high, (length,), generator=gen)] for _ in range(n_prompts)]
    return [p for p in prompts for _ in range(n_samples)]


def sample(model: Any, rows: list[list[int]], autocast: bool) -> tuple[float, list[Any]]:
    """One timed `sample_continuations` call of NEW_TOKENS tokens a row (bf16 autocast or not): seconds, continuations."""
    import torch

    from areal_adv.trainer.lm.sampling import sample_continuations

    scope = torch.autocast("cpu", dtype=torch.bfloat16) if autocast else contextlib.nullcontext()
    began = time.perf_counter()
    with scope:
        out = sample_continuations(
            model,
            rows,
            [NEW_TOKENS] * len(rows),
            frozenset(),
            temperature=1.0,
            pad_id=0,
            generator=torch.Generator().manual_seed(1),
        )
    return time.perf_counter() - began, out


def timed(model: Any, rows: list[list[int]], autocast: bool) -> float:
    seconds, out = sample(model, rows, autocast)
    assert all(len(c.token_ids) == NEW_TOKENS for c in out)
    return seconds


def measure(model: Any, rows: list[list[int]], reps: int) -> dict[str, list[float]]:
    """Every configuration's call times: a warm-up each, then `reps` rounds in a rotating order."""
    import torch

    for _, autocast, threads in CONFIGS:
        torch.set_num_threads(threads)
        timed(model, rows, autocast)
    times: dict[str, list[float]] = {name: [] for name, _, _ in CONFIGS}
    for r in range(reps):
        for name, autocast, threads in CONFIGS[r % len(CONFIGS) :] + CONFIGS[: r % len(CONFIGS)]:
            torch.set_num_threads(threads)
            times[name].append(timed(model, rows, autocast))
            print(f"round {r} {name:26s} {times[name][-1]:.3f} s", flush=True)
    return times


def ratios(times: dict[str, list[float]]) -> dict[str, list[float]]:
    """Each pair of RATIOS, round by round."""
    return {name: [a / b for a, b in zip(times[top], times[bottom])] for name, top, bottom in RATIOS}


def profile_ops(model: Any, rows: list[list[int]], top: int = 8) -> dict[str, Any]:
    """torch.profiler over one float32 2-thread call: the operators with the most self CPU time."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.set_num_threads(2)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        timed(model, rows, False)
    events = prof.key_averages()
    print(events.table(sort_by="self_cpu_time_total", row_limit=top))
    total = sum(e.self_cpu_time_total for e in events)
    ranked = sorted(events, key=lambda e: e.self_cpu_time_total, reverse=True)
    wanted = ranked[:top] + [e for e in ranked[top:] if e.key in ("aten::cumsum", "aten::exponential_")]
    return {
        "self_cpu_ms": total / 1e3,
        "ops": [
            {
                "op": e.key,
                "calls": e.count,
                "self_cpu_ms": e.self_cpu_time_total / 1e3,
                "share": e.self_cpu_time_total / total,
            }
            for e in wanted
        ],
    }


def run(args: argparse.Namespace) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    origin = bench_rows.provenance("bench.real_model.bench_decode")  # the code as the run starts
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32, attn_implementation="sdpa")
    rows = contexts(vocab=model.config.vocab_size)
    times, before, after = bench_rows.under_load(lambda: measure(model, rows, args.reps))
    per_round = ratios(times)
    bench_rows.print_rounds(times, per_round, 26)
    profiled = profile_ops(model, rows) if args.profile else None
    if args.results is not None:
        row = {
            "bench": "decode",
            **origin,
            "model": Path(args.model).name,
            "work": {"rows": len(rows), "prompt_tokens": PROMPT_TOKENS, "new_tokens": NEW_TOKENS},
            "reps": args.reps,
            "load": {"before": before, "after": after},
            "times_s": times,
            "ratios": per_round,
            "profile": profiled,
        }
        bench_rows.append(args.results, row)


def report_text(rows: list[dict[str, Any]], results: Path) -> str:
    """The docs block: one line per run (medians of its calls and rounds) and the newest run's profile."""
    head = [name for name, _, _ in CONFIGS]
    lines = [
        bench_rows.generated_note(REPORT_COMMAND, results, len(rows)),
        "",
        "| run (date, commit) | model | load before -> after | "
        + " | ".join(f"{h} (s)" for h in head)
        + " | "
        + " | ".join(name for name, _, _ in RATIOS)
        + " |",
        "| --- " * (3 + len(head) + len(RATIOS)) + "|",
    ]
    for row in rows:
        cells = [bench_rows.commit_cell(row), row["model"], bench_rows.load_span(row)]
        cells += [bench_rows.spread(row["times_s"][h], 2) for h in head]
        cells += [bench_rows.spread(row["ratios"][name]) for name, _, _ in RATIOS]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    lines.append(
        "Each cell: the median of the run's calls (of its rounds, for a ratio), then the range; "
        f"{rows[-1]['work']['rows']} rows x {rows[-1]['work']['new_tokens']} new tokens after "
        f"{rows[-1]['work']['prompt_tokens']} prompt tokens."
    )
    profiled = [r for r in rows if r.get("profile")]
    if profiled:
        row = profiled[-1]
        prof = row["profile"]
        lines += [
            "",
            f"Profile of one float32 2-thread call ({bench_rows.commit_cell(row)}): "
            f"{prof['self_cpu_ms']:.0f} ms of self CPU time, by operator:",
            "",
            "| operator | calls | ms per call | share of the CPU time |",
            "| --- | --- | --- | --- |",
        ]
        for op in prof["ops"]:
            lines.append(
                f"| `{op['op']}` | {op['calls']} | {op['self_cpu_ms'] / op['calls']:.3f} | {100 * op['share']:.1f} % |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="the converted SmolLM2-135M-Instruct folder")
    parser.add_argument("--reps", type=int, default=3, help="timed rounds (each configuration once per round)")
    parser.add_argument("--profile", action="store_true")
    bench_rows.report_arguments(parser, RESULTS)
    args = parser.parse_args(argv)
    if args.report:
        return bench_rows.report(args, report_text, DOC_BLOCK, RESULTS)
    if not args.model:
        parser.error("--model is required (or --report)")
    run(args)


if __name__ == "__main__":
    main()
