"""Step time of bf16 mixed precision against float32, alternating in one trainer.

One `Trainer` on the real-model example (`examples/real_model/grpo_smollm2.yaml`,
evaluation off): steps alternate between `model.mixed_precision` null and
bf16 (the engine's autocast is switched between steps; weights and AdamW state
are float32 either way), so both see the same machine load. What autocast
touches is the training forward/backward (`time/update`), the no-grad log-prob
passes and the rollout's sampling (`time/rollout`). Writes one JSON line per step and a
summary line (median update-time ratio bf16 / fp32, and the CPU pressure).

    .venv/bin/python -m bench.real_model.bench_mixed_precision --model runs/models/SmolLM2-135M-Instruct --pairs 4
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from areal_adv.api.cli_args import load_config
from areal_adv.trainer.run.loop import Trainer
from bench.bench_rows import pressure_text as pressure  # the first line of /proc/pressure/cpu
from bench.bench_rows import write_row

ROOT = Path(__file__).resolve().parents[2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="the converted SmolLM2-135M-Instruct folder")
    parser.add_argument("--pairs", type=int, default=4, help="fp32/bf16 step pairs (after one warm-up step)")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "mixed_precision.jsonl"))
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    cfg = load_config(
        ROOT / "examples" / "real_model" / "grpo_smollm2.yaml",
        [
            f"model.path={args.model}",
            "eval.every=null",
            "train.save_every=0",
            "output.plot=false",
            "output.progress_bar=false",
            f"output.dir={ROOT / 'runs' / 'bench'}",
            f"experiment_name=mixed_precision_{int(time.time())}",
            *args.overrides,
        ],
    )
    trainer = Trainer(cfg)
    trainer.step(0)  # warm-up: kernels, allocator, AdamW state
    rows, start = [], pressure()
    out = Path(args.out)  # written row by row: an interrupted run keeps what it measured
    for step in range(1, 2 * args.pairs + 1):
        mode = "bf16" if step % 2 == 0 else None
        trainer.engine.mixed_precision = mode
        metrics = trainer.step(step).metrics
        rows.append(
            {
                "step": step,
                "mixed_precision": mode or "fp32",
                "update_s": metrics["time/update"],
                "rollout_s": metrics["time/rollout"],
                "peak_rss_gib": metrics["memory/peak_rss_gib"],
            }
        )
        _write(out, rows[-1])
    pairs = [(rows[i]["update_s"], rows[i + 1]["update_s"]) for i in range(0, len(rows), 2)]
    _write(
        out,
        {
            "summary": "bf16 / fp32 time/update, median over alternating pairs",
            "ratio_median": statistics.median(b / f for f, b in pairs),
            "pairs": pairs,
            "cpu_pressure_before": start,
            "cpu_pressure_after": pressure(),
            "overrides": args.overrides,
        },
    )


def _write(out: Path, row: dict) -> None:
    print(json.dumps(row), flush=True)
    write_row(out, row)


if __name__ == "__main__":
    main()
