"""Can a diagnostic choose the estimator? The suite's runs measured early, and whether that predicts their AUC.

Usage:
    .venv/bin/python -m bench.suite.suite_diagnostics                   # measure every task x estimator x seeds 1..10
    .venv/bin/python -m bench.suite.suite_diagnostics --tasks sparse --seeds 2
    .venv/bin/python -m bench.suite.suite_diagnostics --report          # the evidence tables from the rows
    .venv/bin/python -m bench.suite.suite_diagnostics --report --write-docs   # + docs/benchmarks.md's block

Each run is a run of bench/suite/estimator_suite.py (the same config, seed and
code), trained for its first 10 % of updates with the trainer's diagnostics on
(`diagnostics.every: 1`, `folds: 4`, `params: all`). Two kinds of measurement:

- `own`: every (task, estimator, seed) run, shadowing GRPO: the run's own
  advantages are `diagnostics/active/*`;
- `shadow`: GRPO's run of each (task, seed), with every preset estimator of the
  task as a shadow on GRPO's batches (estimators that are not presets, or need a
  critic, per-turn rewards or process scores the batch lacks, are not shadows).

A row holds each estimator's metrics averaged over the window's updates, and
the window's train rewards, which must equal the first updates of the committed
suite row of the same run (diagnostics leave training unchanged; a mismatch is
an error). Rows append to `--results` and a rerun skips rows already there, so
the measurement resumes.

The rule, written down before any of these rows were measured (suite_evidence.py
computes it):
- Score of estimator E on (task, seed): the window mean of a metric for E minus
  that for GRPO on the same seed (`own`: E's run against GRPO's run; `shadow`:
  E's shadow against GRPO's own advantages, on the same batches).
- Target: the suite's paired AUC difference, AUC(E) − AUC(GRPO), same seed.
- Orientation, fixed in advance: higher is better for `grad_snr` and
  `reward_rank_corr`; lower is better for `zero_adv_frac`, `noise_proxy` and
  |`length_corr`|; `cos_to_active` has no direction and is reported only.
- Per metric and kind: Spearman's rank correlation between the oriented score
  and the AUC difference across (task, estimator) pairs, seed means, with a 95 %
  bootstrap CI over seeds (seeds resampled jointly for all pairs); and the share
  of the pairs whose AUC-difference CI excludes 0 whose sign the oriented score
  gets right.
- A diagnostic is said to choose the estimator when its correlation's CI lies
  above 0 and it gets the sign of at least 75 % of at least 4 such pairs. Then
  `areal-adv diagnose` may recommend by it; otherwise it prints numbers only.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if __name__ == "__main__":  # before torch: rows reproduce bit for bit only on the same CPU kernels
    from bench.kernels.pinned_kernels import pin_before_torch

    pin_before_torch()

from bench import bench_rows  # noqa: E402
from bench.suite.estimator_suite import RESULTS as SUITE_RESULTS  # noqa: E402
from bench.suite.estimator_suite import config_hash, current_rows, fingerprint  # noqa: E402
from bench.suite.suite_definitions import ESTIMATORS, TASKS, run_config  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "suite_diagnostics.jsonl"
METRICS = ("zero_adv_frac", "noise_proxy", "grad_snr", "cos_to_active", "length_corr", "reward_rank_corr")
WINDOW_SHARE = 0.1  # the first 10 % of a task's updates


def window(task: str) -> int:
    """The task's early window in updates: the first 10 % (at least 2)."""
    return max(2, round(TASKS[task].steps * WINDOW_SHARE))


def shadow_names(task: str) -> list[str]:
    """The task's estimators that are plain presets: the shadows of GRPO's run (the trainer names any it skips)."""
    return [e for e in TASKS[task].estimators if not ESTIMATORS[e].full_run and not ESTIMATORS[e].extra]


def plan(tasks: list[str], seeds: int) -> list[tuple[str, str, str, int]]:
    """(kind, task, estimator, seed): every own run, then GRPO's shadow run of each (task, seed)."""
    jobs = []
    for seed in range(1, seeds + 1):
        for task in tasks:
            jobs += [("own", task, estimator, seed) for estimator in TASKS[task].estimators]
            jobs.append(("shadow", task, "grpo", seed))
    return jobs


def measure(kind: str, task: str, estimator: str, seed: int) -> dict[str, Any]:
    """Train the run's first `window(task)` updates with diagnostics on; the window means of every metric."""
    from areal_adv.api.cli_args import load_config
    from areal_adv.trainer.run.loop import Trainer

    shadows = ["grpo"] if kind == "own" else shadow_names(task)
    config = run_config(task, estimator, seed)
    config["diagnostics"] = {"estimators": shadows, "every": 1, "folds": 4, "params": "all"}
    behaviour = fingerprint(task, estimator)
    start, cpu, load = time.perf_counter(), time.process_time(), bench_rows.load1()
    rows = []
    with tempfile.TemporaryDirectory(prefix="suite_diagnostics_") as tmp:
        trainer = Trainer(load_config({**config, "output": {**config["output"], "dir": tmp}}))
        rows = [trainer.step(step).metrics for step in range(window(task))]
    names = ["active", *shadows]
    means = {name: {m: _mean([r.get(f"diagnostics/{name}/{m}") for r in rows]) for m in METRICS} for name in names}
    return {
        "kind": kind,
        "task": task,
        "estimator": estimator,
        "seed": seed,
        "window": window(task),
        "config_hash": config_hash(task, estimator),
        "fingerprint": behaviour,
        "metrics": means,
        "train_reward": [round(float(r["reward_mean"]), 6) for r in rows],
        "diagnostics_s": round(sum(float(r.get("time/diagnostics") or 0.0) for r in rows), 3),
        "git": bench_rows.git_commit(),
        "wall_s": round(time.perf_counter() - start, 3),
        "cpu_s": round(time.process_time() - cpu, 3),
        "load1_start": round(load, 2),
    }


def _mean(values: list[Any]) -> float | None:
    finite = [float(v) for v in values if v is not None and v == v]
    return sum(finite) / len(finite) if finite else None


def _key(row: dict[str, Any]) -> tuple[str, str, str, int, str]:
    return (row["kind"], row["task"], row["estimator"], row["seed"], row["fingerprint"])


def check_against_suite(row: dict[str, Any], suite: dict[tuple[str, str, int], dict[str, Any]]) -> None:
    """The window's train rewards must be the committed suite row's first updates (training unchanged)."""
    kept = suite.get((row["task"], row["estimator"], row["seed"]))
    if kept is None or kept.get("fingerprint") != row["fingerprint"]:
        return
    if kept["train_reward"][: row["window"]] != row["train_reward"]:
        raise RuntimeError(
            f"{row['task']}/{row['estimator']}/seed{row['seed']}: the diagnosed run's train rewards "
            f"{row['train_reward']} are not the committed suite row's first updates "
            f"{kept['train_reward'][: row['window']]}; refresh the suite first"
        )


def _worker_init() -> None:
    from areal_adv.trainer.parallel.launch_env import prefer_passive_waiting

    prefer_passive_waiting()


def run(jobs: list[tuple[str, str, str, int]], results: Path, workers: int, suite_results: Path) -> int:
    """Measure the jobs without a row in `results`, appending each row as it finishes."""
    suite = {(r["task"], r["estimator"], r["seed"]): r for r in current_rows(bench_rows.read(suite_results))}
    have = {_key(r) for r in bench_rows.read(results)}
    todo = [j for j in jobs if (*j, fingerprint(j[1], j[2])) not in have]
    print(f"[diagnostics] {len(jobs) - len(todo)} of {len(jobs)} measured already; {len(todo)} to run", flush=True)
    import multiprocessing

    failed = 0
    with ProcessPoolExecutor(
        workers, mp_context=multiprocessing.get_context("spawn"), initializer=_worker_init
    ) as pool:
        futures = {pool.submit(measure, *job): job for job in todo}
        for done, future in enumerate(as_completed(futures), 1):
            try:
                row = future.result()
                check_against_suite(row, suite)
            except Exception as exc:  # one broken run must not lose the others; named, and rerun next time
                failed += 1
                print(f"[diagnostics] {futures[future]} failed: {type(exc).__name__}: {exc}", file=sys.stderr)
                continue
            bench_rows.write_row(results, row)
            print(
                f"[diagnostics] {done}/{len(todo)} {row['kind']} {row['task']}/{row['estimator']}/seed{row['seed']}"
                f" ({row['wall_s']:.0f} s)",
                flush=True,
            )
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    parser.add_argument("--seeds", type=int, default=10, help="seeds 1..N")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--suite-results", type=Path, default=SUITE_RESULTS, help="the suite's rows")
    parser.add_argument("--report", action="store_true", help="the evidence from --results; measure nothing")
    parser.add_argument("--write-docs", action="store_true", help="with --report: write docs/benchmarks.md's block")
    opts = parser.parse_args(argv)
    if not opts.report:
        return run(plan(opts.tasks, opts.seeds), opts.results, opts.workers, opts.suite_results)
    from bench.suite.suite_evidence import evidence_text, write_evidence_docs

    rows = bench_rows.read(opts.results)
    suite = current_rows(bench_rows.read(opts.suite_results))
    print(evidence_text(rows, suite))
    if opts.write_docs:
        write_evidence_docs(rows, suite, ROOT / "docs" / "benchmarks.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
