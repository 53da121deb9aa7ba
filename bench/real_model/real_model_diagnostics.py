"""The real model from a sparse start: does the suite's MaxRL result carry over, and did the diagnostics say so early?

Usage:
    .venv/bin/python -m bench.real_model.real_model_diagnostics --collect              # window means from the runs' metrics
    .venv/bin/python -m bench.real_model.real_model_diagnostics --report               # the verdicts, from the rows
    .venv/bin/python -m bench.real_model.real_model_diagnostics --report --write-docs  # + docs/benchmarks.md's block

The runs are `bench/real_model/compare_estimators.py --task sums_2digit` (SmolLM2-135M,
sums with terms of up to 2 digits, 2.9 % of the untrained model's samples
right, so most 8-sample groups start all-zero), 30 updates, GRPO, MaxRL and
RLOO on seeds 1-3 (paired: the same initial weights and prompts per seed), each
with the other two as shadows (`diagnostics.estimators`, `params: last_layer`,
`folds: 4`, `first_steps: 10`). `--collect` reads each run's metrics.jsonl and
appends one row per (estimator, seed): every `diagnostics/<name>/<metric>`
averaged over the window's updates, and the window's train reward.

The rule, written down after GRPO's seed-1 run and before any MaxRL or RLOO run
had finished:
- Target: the held-out format-fixed accuracy's AUC (evaluations at updates 0,
  10, 20 and 30; `suite_stats.auc`), paired by seed: AUC(E) − AUC(GRPO) for E
  in MaxRL and RLOO; mean over the 3 seeds with a 95 % t-interval (2 degrees of
  freedom, t = 4.303). The same for the accuracy after the last update and for
  the forced-format probe after training (`--probe-results`).
- Verdict on the suite's MaxRL result: it carries over when MaxRL − GRPO's
  AUC interval lies above 0, is reversed when it lies below 0, and is not
  resolved otherwise (the interval's width says how much was resolvable).
- The window: the first 10 updates (a third of the run; the suite's 10 % would
  be 3 updates of 4 groups each, too few to average a gradient ratio over).
- Scores, as in the suite (bench/suite/suite_diagnostics.py): per seed, the window
  mean of a metric for E minus that for GRPO, on E's own run against GRPO's
  (`own`) and as shadows on GRPO's run (`shadow`), oriented as the suite's
  (higher is better for grad_snr and reward_rank_corr; lower for
  zero_adv_frac, noise_proxy and |length_corr|; cos_to_active only reported).
- A diagnostic "said so early" for E when the AUC difference is resolved and
  the oriented score's seed mean has its sign, with the same sign in at least
  2 of the 3 seeds. For an unresolved difference there is nothing to predict,
  and the table says so.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from areal_adv.trainer.race.racing import paired_t_interval
from bench import bench_rows
from bench.suite import suite_evidence
from bench.suite.suite_evidence import ORIENTATION
from bench.suite.suite_stats import auc

ROOT = Path(__file__).resolve().parents[2]

TASK = "sums_2digit"
ESTIMATORS = ("grpo", "maxrl", "rloo")
WINDOW = 10
RUNS = ROOT / "runs" / "compare" / TASK
RESULTS = ROOT / "bench" / "results" / "sums_2digit_diagnostics.jsonl"
RUN_ROWS = ROOT / "bench" / "results" / "estimators.jsonl"
PROBE_ROWS = ROOT / "bench" / "results" / "sums_2digit_probe.jsonl"
DOC = ROOT / "docs" / "benchmarks.md"
BLOCK = "real_model_diagnostics"
REPORT_COMMAND = ".venv/bin/python -m bench.real_model.real_model_diagnostics --report --write-docs"


def window_row(metrics_path: Path, estimator: str, seed: int, window: int = WINDOW) -> dict[str, Any]:
    """One run's diagnostics averaged over its first `window` updates (each metric over the steps that logged it)."""
    rows = [json.loads(line) for line in metrics_path.read_text().splitlines() if line.strip()]
    early = [r for r in rows if r["step"] < window]
    if len(early) < window:
        raise SystemExit(f"{metrics_path}: {len(early)} steps below {window}, expected {window}")
    sums: dict[str, list[float]] = {}
    for r in early:
        for key, value in r.items():
            if key.startswith("diagnostics/") and isinstance(value, (int, float)) and math.isfinite(value):
                sums.setdefault(key, []).append(float(value))
    metrics: dict[str, dict[str, float]] = {}
    for key, values in sums.items():
        _, name, metric = key.split("/")
        metrics.setdefault(name, {})[metric] = sum(values) / len(values)
    if "active" not in metrics:
        raise SystemExit(f"{metrics_path}: no diagnostics/active/* in the first {window} steps")
    return {
        "task": TASK,
        "estimator": estimator,
        "seed": seed,
        "window": window,
        "steps_measured": sum(any(k.startswith("diagnostics/active/") for k in r) for r in early),
        "window_train_reward": sum(r["reward_mean"] for r in early) / len(early),
        "metrics": metrics,
        **bench_rows.provenance("bench.real_model.real_model_diagnostics"),
    }


def collect(runs: Path, results: Path, run_rows: Path) -> None:
    """Append a row for each finished run (one with its compare_estimators row) that has none yet."""
    have = {(r["estimator"], r["seed"]) for r in bench_rows.read(results)}
    finished = {(r["estimator"], r["seed"]) for r in bench_rows.read(run_rows) if r.get("tag") == TASK}
    for estimator in ESTIMATORS:
        for run in sorted(p for p in (runs / estimator).glob("seed*") if p.is_dir()):
            seed = int(run.name.removeprefix("seed"))
            path = run / "metrics.jsonl"
            if (estimator, seed) in have or (estimator, seed) not in finished or not path.exists():
                continue
            bench_rows.append(results, window_row(path, estimator, seed))
            print(f"{estimator} seed {seed}: window row appended to {bench_rows.shown(results)}")


def t_interval(values: list[float]) -> tuple[float, float, float]:
    """Mean and 95 % Student-t interval of `values` (NaN bounds for fewer than 2): the race's own interval."""
    if len(values) < 2:
        return sum(values) / len(values), float("nan"), float("nan")
    d = paired_t_interval(values)
    return d.mean, d.low, d.high


def outcomes(
    run_rows: list[dict[str, Any]], probe_rows: list[dict[str, Any]]
) -> dict[str, dict[str, dict[int, float]]]:
    """{measure: {estimator: {seed: value}}}: held-out AUC, the last accuracy, and the forced-format probe."""
    out: dict[str, dict[str, dict[int, float]]] = {"AUC": {}, "last accuracy": {}, "forced-format probe": {}}
    for row in run_rows:
        if row.get("tag") != TASK or row["estimator"] not in ESTIMATORS:
            continue
        curve = row["curve"]
        out["AUC"].setdefault(row["estimator"], {})[row["seed"]] = auc(
            [p["updates"] for p in curve], [p["accuracy"] for p in curve]
        )
        out["last accuracy"].setdefault(row["estimator"], {})[row["seed"]] = curve[-1]["accuracy"]
    for row in probe_rows:
        parts = str(row.get("label", "")).split("/")
        if len(parts) == 3 and parts[0] == TASK and parts[1] in ESTIMATORS:
            out["forced-format probe"].setdefault(parts[1], {})[int(parts[2].removeprefix("seed"))] = row["prefix"]
    return out


def paired(values: dict[str, dict[int, float]], estimator: str) -> list[tuple[int, float]]:
    """(seed, E − GRPO) over the seeds both have."""
    mine, base = values.get(estimator, {}), values.get("grpo", {})
    return [(s, mine[s] - base[s]) for s in sorted(set(mine) & set(base))]


def verdict(low: float, high: float) -> str:
    if math.isnan(low):
        return "too few seeds"
    return "above 0" if low > 0 else "below 0" if high < 0 else "not resolved"


def scores(rows: list[dict[str, Any]], kind: str, metric: str, estimator: str) -> dict[int, float]:
    """{seed: oriented score} of E, as the suite scores it (`suite_evidence.scores`): E's window mean minus GRPO's.

    Every run is an `own` row (its active advantages against GRPO's run); GRPO's runs are also the `shadow` rows
    (E's shadow against GRPO's own advantages on the same batches).
    """
    kinds = [{**r, "kind": "own"} for r in rows] + [{**r, "kind": "shadow"} for r in rows if r["estimator"] == "grpo"]
    found = suite_evidence.scores(kinds, kind, metric).get((TASK, estimator), {})
    return {seed: value + 0.0 for seed, value in found.items()}  # + 0.0: no negative zero in the table


def outcome_table(values: dict[str, dict[str, dict[int, float]]]) -> tuple[str, dict[tuple[str, str], str]]:
    """The paired differences to GRPO per measure and estimator, and their verdicts."""
    lines = [
        "| measure | estimator | per seed (1, 2, 3) | GRPO per seed | E − GRPO [95 % t-interval] | interval |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    verdicts = {}
    for measure, per in values.items():
        for estimator in ESTIMATORS[1:]:
            pairs = paired(per, estimator)
            if not pairs:
                continue
            mean, low, high = t_interval([d for _, d in pairs])
            verdicts[(measure, estimator)] = verdict(low, high)
            mine = ", ".join(f"{per[estimator][s]:.3f}" for s, _ in pairs)
            base = ", ".join(f"{per['grpo'][s]:.3f}" for s, _ in pairs)
            lines.append(
                f"| {measure} | {estimator} | {mine} | {base} | {mean:+.3f} [{low:+.3f}, {high:+.3f}] "
                f"| {verdicts[(measure, estimator)]} |"
            )
    return "\n".join(lines), verdicts


def early_table(rows: list[dict[str, Any]], target: dict[str, dict[int, float]]) -> tuple[str, list[str]]:
    """Each diagnostic's oriented score per seed, and whether it had the sign of a resolved AUC difference."""
    lines = [
        "| diagnostic | measured on | estimator | oriented score per seed | mean | AUC − GRPO per seed | said so early? |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    said = []
    for metric, orientation in ORIENTATION.items():
        for kind in ("own", "shadow"):
            for estimator in ESTIMATORS[1:]:
                score = scores(rows, kind, metric, estimator)
                diffs = dict(paired(target, estimator))
                seeds = sorted(set(score) & set(diffs))
                if not seeds:
                    continue
                mean = sum(score[s] for s in seeds) / len(seeds)
                _, low, high = t_interval([diffs[s] for s in seeds])
                answer = _said(orientation, verdict(low, high), [score[s] for s in seeds], [diffs[s] for s in seeds])
                if answer == "yes":
                    said.append(f"{metric} ({kind} runs, {estimator})")
                lines.append(
                    f"| {suite_evidence.direction(metric)} | {kind} runs | {estimator} | "
                    + ", ".join(f"{score[s]:+.3g}" for s in seeds)
                    + f" | {mean:+.3g} | "
                    + ", ".join(f"{diffs[s]:+.3f}" for s in seeds)
                    + f" | {answer} |"
                )
    return "\n".join(lines), said


def _said(orientation: int | None, resolved: str, score: list[float], diffs: list[float]) -> str:
    """The rule: a resolved difference, the score's mean of its sign, and the same sign in >= 2 of 3 seeds."""
    if orientation is None:
        return "— (no direction)"
    if resolved not in ("above 0", "below 0"):
        return "nothing to predict (not resolved)"
    sign = 1 if resolved == "above 0" else -1
    mean = sum(score) / len(score)
    agree = sum(1 for s in score if s * sign > 0)
    return "yes" if mean * sign > 0 and agree >= 2 else "no"


def report_text(rows: list[dict[str, Any]], run_rows: list[dict[str, Any]], probe_rows: list[dict[str, Any]]) -> str:
    """The docs block: the outcomes against GRPO, the early diagnostics, and the two verdicts."""
    values = outcomes(run_rows, probe_rows)
    outcome, verdicts = outcome_table(values)
    early, said = early_table(rows, values["AUC"])
    maxrl = verdicts.get(("AUC", "maxrl"), "not measured")
    carries = {
        "above 0": "**carries over**: MaxRL's held-out AUC is above GRPO's, the interval above 0",
        "below 0": "**is reversed**: MaxRL's held-out AUC is below GRPO's, the interval below 0",
        "not resolved": "**is not resolved** here: the interval of MaxRL − GRPO's AUC contains 0",
    }.get(maxrl, f"cannot be read yet ({maxrl})")
    resolved = [e for e in ESTIMATORS[1:] if verdicts.get(("AUC", e)) in ("above 0", "below 0")]
    if said:
        early_verdict = "Had the sign of a resolved AUC difference over the first 10 updates: " + ", ".join(said) + "."
    elif resolved:
        early_verdict = "No diagnostic had the sign of the resolved AUC difference(s) over the first 10 updates."
    else:
        early_verdict = (
            "No AUC difference to GRPO was resolved, so there was nothing for a diagnostic to say early; the "
            "scores above are what the diagnostics measured."
        )
    seeds = sorted({r["seed"] for r in rows})
    return "\n".join(
        [
            bench_rows.generated_note(REPORT_COMMAND, RESULTS, len(rows)),
            "",
            f"Runs: {sum(r.get('tag') == TASK for r in run_rows)} rows of tag `{TASK}` in "
            f"{bench_rows.shown(RUN_ROWS)}; diagnostics rows: seeds "
            f'{seeds}; probe rows: {bench_rows.shown(PROBE_ROWS)} (the forced start "a + b =").',
            "",
            outcome,
            "",
            f"**The suite's MaxRL result on the real model** {carries}.",
            "",
            early,
            "",
            f"**Early diagnostics.** {early_verdict}",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--collect", action="store_true", help="append the finished runs' window rows")
    p.add_argument("--runs", type=Path, default=RUNS, help="the campaign's run folder (<estimator>/seed<N>/)")
    p.add_argument("--results", type=Path, default=RESULTS)
    p.add_argument("--run-rows", type=Path, default=RUN_ROWS, help="compare_estimators.py's rows (tag sums_2digit)")
    p.add_argument("--probe-results", type=Path, default=PROBE_ROWS)
    p.add_argument("--report", action="store_true", help="print the verdicts")
    p.add_argument("--write-docs", action="store_true", help="with --report: write docs/benchmarks.md's block")
    p.add_argument("--doc", type=Path, default=DOC)
    opts = p.parse_args(argv)
    if opts.collect:
        collect(opts.runs, opts.results, opts.run_rows)
    if opts.report:
        rows = bench_rows.read(opts.results)
        if not rows:
            raise SystemExit(f"--results {bench_rows.shown(opts.results)}: no rows")
        probe = bench_rows.read(opts.probe_results) if opts.probe_results.exists() else []
        text = report_text(rows, bench_rows.read(opts.run_rows), probe)
        print(text)
        if opts.write_docs:
            bench_rows.write_block(opts.doc, BLOCK, text)
    if not (opts.collect or opts.report):
        p.error("nothing to do: give --collect and/or --report")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
