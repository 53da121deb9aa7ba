"""The tied lookup table's gradient, sparse against dense: the update of the vs-TRL step, alternating in one process.

Usage:
    .venv/bin/python bench/bench_lookup_gradient.py --model runs/models/SmolLM2-135M-Instruct
    .venv/bin/python bench/bench_lookup_gradient.py --model runs/models/SmolLM2-135M-Instruct --pairs 8

One `Trainer` on `bench_vs_trl.py`'s work (SmolLM2-135M-Instruct, float32, 4 prompts
x 4 completions, 16 new tokens, one update per step). After a warm-up step, the
steps alternate between the engine's sparse lookup backward
(`areal_adv.trainer.parallel.embedding_gradient`, the default for tied
embeddings in one process) and torch's dense one (`nn.Embedding.sparse` switched
off for that step), dense first in even pairs and sparse first in odd ones, so
a change of the machine's load falls on both alike. Printed: `time/update` of
each step, the medians, and the median of the per-pair ratios sparse / dense,
with the CPU pressure before and after. Results and the command go in
docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch, as bench_vs_trl's workers run

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from bench_threads import pressure  # noqa: E402  (the first line of /proc/pressure/cpu)
from bench_vs_trl import DEFAULT_MODEL, _ours_config, prompt_rows  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=str(DEFAULT_MODEL))
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    from areal_adv.api.cli_args import load_config
    from areal_adv.trainer.parallel.embedding_gradient import tied_embedding
    from areal_adv.trainer.run.loop import Trainer

    with tempfile.TemporaryDirectory(prefix="bench_lookup_") as tmp:
        data = Path(tmp) / "prompts.jsonl"
        data.write_text("".join(json.dumps(r) + "\n" for r in prompt_rows()), encoding="utf-8")
        steps = 1 + 2 * args.pairs
        trainer = Trainer(load_config(_ours_config(args.model, data, Path(tmp) / "runs", steps, args.threads)))
        lookup = tied_embedding(trainer.engine.model)
        if lookup is None or not trainer.engine.sparse_lookup_gradient:
            raise SystemExit(f"--model {args.model}: no tied lookup table trained sparsely here; nothing to compare")
        print(f"cpu pressure before: {pressure()}")
        trainer.step(0)  # warm-up
        times: dict[bool, list[float]] = {True: [], False: []}
        step = 1
        for pair in range(args.pairs):
            for sparse in (False, True) if pair % 2 == 0 else (True, False):
                lookup.sparse = sparse
                seconds = trainer.step(step).metrics["time/update"]
                times[sparse].append(seconds)
                step += 1
                print(f"pair {pair} {'sparse' if sparse else 'dense '}: update {seconds:.3f} s", flush=True)
        lookup.sparse = True
        print(f"cpu pressure after:  {pressure()}")
    ratios = [s / d for s, d in zip(times[True], times[False])]
    print(
        f"update medians: dense {statistics.median(times[False]):.3f} s, sparse {statistics.median(times[True]):.3f} s;"
        f" sparse / dense {statistics.median(ratios):.3f} (median of {len(ratios)} pairs, "
        f"range {min(ratios):.3f}-{max(ratios):.3f})"
    )


if __name__ == "__main__":
    main()
