"""Learning when the rollout samples from the bfloat16 copy: the report of `bench/real_model/rollout_copy_campaign.sh`.

The campaign trains GRPO on the 1-2-digit sums (`examples/real_model/sums_1_2digit.yaml`,
30 updates, one thread per run) in three arms, each seed paired across them (same
initial weights, prompts and sampling seed):

* `f32`: sampling from the float32 weights it trains (the reference);
* `bf16copy`: sampling from the bfloat16 copy, AReaL's decoupled correction
  (`actor.use_decoupled_loss`, `behav_imp_weight_cap: 5`);
* `bf16copy_nocorr`: sampling from the copy, the ratio taken against the copy's
  log-probs as if they were the trained policy's (no correction).

How the verdict is read (fixed before the copy's runs finished):

* **Primary: the forced-format probe.** Each run's last checkpoint answers the
  100 held-out sums with the question's "a + b =" forced (`probe.py --skills
  --equation-prefix`). An arm's change from `f32` is the mean over prompts of
  (arm − f32), each averaged over the seeds, with a 95 % bootstrap CI over the
  prompts. Learning counts as unchanged when that CI contains 0; the CI's width
  says how large a difference the test could have seen.
* **Secondary: the held-out curve.** Lenient greedy accuracy on the same 100 rows
  after 0, 10, 20 and 30 updates; its area (mean height, `suite_stats.auc`) per
  seed, and the arm's paired difference to `f32` on each seed, read against the
  spread of `f32`'s own two seeds. Two seeds give no interval worth the name, so
  this is shown, not tested.
* **The mismatch**, per arm: the mean over steps of `rollout_mismatch/kl` and
  `k3_kl`, the largest behaviour weight of the run, the mean share of tokens above
  the cap, and the PPO clip fraction (the share of tokens the clip touched).

    bench/real_model/rollout_copy_campaign.sh 1 & bench/real_model/rollout_copy_campaign.sh 2     # the runs and the probes
    .venv/bin/python -m bench.real_model.rollout_copy_report --collect   # per-step metrics of the runs -> a results file
    .venv/bin/python -m bench.real_model.rollout_copy_report --write-docs   # the block in docs/performance.md
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path
from typing import Any

from bench import bench_rows
from bench.real_model.probe_table import paired_change
from bench.suite.suite_stats import auc

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results"
RUNS = RESULTS / "rollout_copy_learning.jsonl"
PROBES = RESULTS / "rollout_copy_probe.jsonl"
STEPS = RESULTS / "rollout_copy_steps.jsonl"
BLOCK = "rollout_copy_learning"
ARMS = {
    "f32": "float32 sampling",
    "bf16copy": "bf16 copy, decoupled correction (cap 5)",
    "bf16copy_nocorr": "bf16 copy, no correction",
}
REFERENCE = "f32"
#: the per-step metrics `--collect` keeps of each run
STEP_KEYS = (
    "rollout_mismatch/kl",
    "rollout_mismatch/k3_kl",
    "rollout_mismatch/imp_weight_max",
    "rollout_mismatch/capped_frac",
    "clip_frac",
    "time/rollout",
    "time/reference",
    "time/update",
)


def arm_of(tag: str) -> str:
    return tag.removeprefix("rollout_copy_")


def latest_runs(rows: list[dict[str, Any]]) -> dict[tuple[str, int], dict[str, Any]]:
    """The newest finished row of each (arm, seed)."""
    return {(arm_of(r["tag"]), int(r["seed"])): r for r in rows if arm_of(r["tag"]) in ARMS}


def collect(runs: dict[tuple[str, int], dict[str, Any]], out: Path) -> int:
    """Append the per-step metrics of every finished run not yet in `out` (from its run folder's metrics.jsonl)."""
    have = {(r["arm"], r["seed"]) for r in bench_rows.read(out)}
    added = 0
    for (arm, seed), row in sorted(runs.items()):
        metrics = ROOT / row["run_dir"] / "metrics.jsonl"
        if (arm, seed) in have or not metrics.is_file():
            continue
        steps = bench_rows.read(metrics)
        kept = {key: [s.get(key) for s in steps] for key in STEP_KEYS if any(key in s for s in steps)}
        bench_rows.write_row(out, {"arm": arm, "seed": seed, "git": row.get("git"), "steps": kept})
        added += 1
    return added


def curve_auc(row: dict[str, Any]) -> float:
    points = row["curve"]
    return auc([p["updates"] for p in points], [p["accuracy"] for p in points])


def learning_table(runs: dict[tuple[str, int], dict[str, Any]], probes: dict[str, dict[str, Any]]) -> str:
    lines = [
        "| arm | seed | held-out accuracy at 0 / 10 / 20 / 30 updates | area | area − float32 (same seed) | "
        "forced-format probe | probe − float32, seeds pooled [95 % CI over prompts] |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    ref_hits = [probes[f"rollout_copy_{REFERENCE}/grpo/seed{s}"]["prefix_hits"] for a, s in runs if a == REFERENCE]
    for arm, label in ARMS.items():
        seeds = sorted(s for a, s in runs if a == arm)
        hits = []
        for seed in seeds:
            row = runs[(arm, seed)]
            area = curve_auc(row)
            ref = runs.get((REFERENCE, seed))
            versus = f"{area - curve_auc(ref):+.3f}" if ref and arm != REFERENCE else "-"
            probe = probes.get(f"rollout_copy_{arm}/grpo/seed{seed}")
            if probe:
                hits.append(probe["prefix_hits"])
            points = " / ".join(f"{p['accuracy']:.2f}" for p in row["curve"])
            shown = f"{probe['prefix']:.2f}" if probe else "not probed"
            pooled = "-"
            if seed == seeds[-1] and arm != REFERENCE and len(hits) == len(ref_hits) == len(seeds):
                pooled = paired_change(hits, ref_hits)
            lines.append(f"| {label} | {seed} | {points} | {area:.3f} | {versus} | {shown} | {pooled} |")
    return "\n".join(lines)


def mismatch_table(steps: list[dict[str, Any]], runs: dict[tuple[str, int], dict[str, Any]]) -> str:
    lines = [
        "| arm | seed | k1 KL (mean of steps) | k3 KL (mean) | largest behaviour weight | share above the cap "
        "(mean) | PPO clip fraction (mean) | median s per step: rollout / log-prob pass / update |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]

    def mean(values: list[float | None], fmt: str = ".5f") -> str:
        kept = [v for v in values if v is not None]
        return format(statistics.fmean(kept), fmt) if kept else "-"

    for row in sorted(steps, key=lambda r: (list(ARMS).index(r["arm"]), r["seed"])):
        if (row["arm"], row["seed"]) not in runs:
            continue
        s = row["steps"]
        largest = [v for v in s.get("rollout_mismatch/imp_weight_max", []) if v is not None]
        capped = s.get("rollout_mismatch/capped_frac")
        weights = [
            mean(s.get("rollout_mismatch/kl", [])),
            mean(s.get("rollout_mismatch/k3_kl", [])),
            f"{max(largest):.3f}" if largest else "-",
            mean(capped, ".4f") if capped is not None else "-",
        ]
        times = [
            f"{statistics.median(v for v in s[k] if v is not None):.2f}" if k in s else "-"
            for k in ("time/rollout", "time/reference", "time/update")
        ]
        cells = [ARMS[row["arm"]], str(row["seed"]), *weights, mean(s.get("clip_frac", []), ".4f"), " / ".join(times)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def report() -> str:
    runs = latest_runs(bench_rows.read(RUNS))
    probes = {r["label"]: r for r in bench_rows.read(PROBES)}
    commits = sorted({str(r.get("git")) for r in runs.values()})
    return (
        f"<!-- generated by `.venv/bin/python -m bench.real_model.rollout_copy_report --write-docs` from "
        f"{RUNS.relative_to(ROOT)}, {PROBES.relative_to(ROOT)} and {STEPS.relative_to(ROOT)}; do not edit by hand -->\n\n"
        f"{learning_table(runs, probes)}\n\n"
        f"Held-out accuracy: `eval/reward/solved_lenient` (greedy, 100 rows); area: its mean height over the 30 "
        f"updates. Runs at commits {', '.join(commits)}.\n\n"
        f"{mismatch_table(bench_rows.read(STEPS), runs)}\n"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--collect", action="store_true", help=f"append finished runs' per-step metrics to {STEPS}")
    parser.add_argument("--write-docs", action="store_true", help=f"write the report into {bench_rows.PERFORMANCE_DOC}")
    opts = parser.parse_args(argv)
    if opts.collect:
        print(f"[rollout-copy] {collect(latest_runs(bench_rows.read(RUNS)), STEPS)} runs added to {STEPS}")
    text = report()
    print(text)
    if opts.write_docs:
        bench_rows.write_block(bench_rows.PERFORMANCE_DOC, BLOCK, text.strip("\n"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
