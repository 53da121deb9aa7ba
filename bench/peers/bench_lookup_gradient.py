"""The tied lookup table's gradient, sparse against dense: the update of the vs-TRL step, alternating in one process.

Usage:
    .venv/bin/python -m bench.peers.bench_lookup_gradient --model runs/models/SmolLM2-135M-Instruct
    .venv/bin/python -m bench.peers.bench_lookup_gradient --model runs/models/SmolLM2-135M-Instruct --pairs 8 --results bench/results/lookup_gradient.jsonl
    .venv/bin/python -m bench.peers.bench_lookup_gradient --report                # the table of bench/results/lookup_gradient.jsonl
    .venv/bin/python -m bench.peers.bench_lookup_gradient --report --write-docs   # ... and its block of docs/performance.md

One `Trainer` on `bench_vs_trl.py`'s work (SmolLM2-135M-Instruct, float32, 4 prompts
x 4 completions, 16 new tokens, one update per step). After a warm-up step, the
steps alternate between the engine's sparse lookup backward
(`areal_adv.trainer.parallel.embedding_gradient`, the default for tied
embeddings in one process) and torch's dense one (`nn.Embedding.sparse` switched
off for that step), dense first in even pairs and sparse first in odd ones, so
a change of the machine's load falls on both alike. Printed: `time/update` of
each step, the medians, and the median of the per-pair ratios sparse / dense,
with the load before and after.

With `--results FILE` the run appends one JSON row to FILE: the command, commit, UTC
date, the load before and after (load averages and /proc/pressure/cpu), every step's
`time/update` and the per-pair ratios (bench/bench_rows.py). `--report` rebuilds the
table from the rows; `--write-docs` writes it between the `bench_lookup_gradient`
markers of docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch, as bench_vs_trl's workers run

from bench import bench_rows
from bench.peers.bench_vs_trl import DEFAULT_MODEL, ours_config, prompt_rows

ROOT = Path(__file__).resolve().parents[2]

RESULTS = bench_rows.RESULTS / "lookup_gradient.jsonl"
DOC_BLOCK = "bench_lookup_gradient"
REPORT_COMMAND = ".venv/bin/python -m bench.peers.bench_lookup_gradient --report --write-docs"


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """`time/update` of each step, sparse and dense alternating, and the load before and after."""
    from areal_adv.api.cli_args import load_config
    from areal_adv.trainer.parallel.embedding_gradient import tied_embedding
    from areal_adv.trainer.run.loop import Trainer

    with tempfile.TemporaryDirectory(prefix="bench_lookup_") as tmp:
        data = Path(tmp) / "prompts.jsonl"
        data.write_text("".join(json.dumps(r) + "\n" for r in prompt_rows()), encoding="utf-8")
        steps = 1 + 2 * args.pairs
        trainer = Trainer(load_config(ours_config(args.model, data, Path(tmp) / "runs", steps, args.threads)))
        lookup = tied_embedding(trainer.engine.model)
        if lookup is None or not trainer.engine.sparse_lookup_gradient:
            raise SystemExit(f"--model {args.model}: no tied lookup table trained sparsely here; nothing to compare")
        times, before, after = bench_rows.under_load(lambda: _alternate(trainer, lookup, args.pairs))
    ratios = [s / d for s, d in zip(times["sparse"], times["dense"])]
    return {"load": {"before": before, "after": after}, "update_s": times, "ratios": ratios}


def _alternate(trainer: Any, lookup: Any, pairs: int) -> dict[str, list[float]]:
    """A warm-up step, then `pairs` pairs of updates, sparse and dense lookup backward (the order swapped each pair)."""
    trainer.step(0)  # warm-up
    times: dict[str, list[float]] = {"sparse": [], "dense": []}
    step = 1
    for pair in range(pairs):
        for sparse in (False, True) if pair % 2 == 0 else (True, False):
            lookup.sparse = sparse
            seconds = trainer.step(step).metrics["time/update"]
            times["sparse" if sparse else "dense"].append(seconds)
            step += 1
            print(f"pair {pair} {'sparse' if sparse else 'dense '}: update {seconds:.3f} s", flush=True)
    lookup.sparse = True
    return times


def run(args: argparse.Namespace) -> None:
    origin = bench_rows.provenance("bench.peers.bench_lookup_gradient")  # the code as the run starts
    measured = measure(args)
    times, ratios = measured["update_s"], measured["ratios"]
    print(
        f"update medians: dense {statistics.median(times['dense']):.3f} s, sparse {statistics.median(times['sparse']):.3f}"
        f" s; sparse / dense {statistics.median(ratios):.3f} (median of {len(ratios)} pairs, "
        f"range {min(ratios):.3f}-{max(ratios):.3f})"
    )
    if args.results is not None:
        row = {
            "bench": "lookup_gradient",
            **origin,
            "model": Path(args.model).name,
            "pairs": args.pairs,
            "threads": args.threads,
            **measured,
        }
        bench_rows.append(args.results, row)


def report_text(rows: list[dict[str, Any]], results: Path) -> str:
    """The docs block: one line per run."""
    lines = [
        bench_rows.generated_note(REPORT_COMMAND, results, len(rows)),
        "",
        "| run (date, commit) | model | threads | load before -> after | pairs | `time/update` dense (s) | "
        "`time/update` sparse (s) | sparse / dense, per pair |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        cells = [
            bench_rows.commit_cell(row),
            row["model"],
            str(row["threads"]),
            bench_rows.load_span(row),
            str(row["pairs"]),
            bench_rows.spread(row["update_s"]["dense"]),
            bench_rows.spread(row["update_s"]["sparse"]),
            "**" + bench_rows.spread(row["ratios"]) + "**",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "Each cell: the median, then the range."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=str(DEFAULT_MODEL))
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--threads", type=int, default=2)
    bench_rows.report_arguments(parser, RESULTS)
    args = parser.parse_args(argv)
    if args.report:
        return bench_rows.report(args, report_text, DOC_BLOCK, RESULTS)
    run(args)


if __name__ == "__main__":
    main()
