"""Which advantage estimator should I use? Small tasks built so that credit-assignment methods differ.

Usage:
    .venv/bin/python -m bench.suite.estimator_suite                      # every task x its estimators x seeds 1..10
    .venv/bin/python -m bench.suite.estimator_suite --tasks sparse --estimators grpo rloo --seeds 3
    .venv/bin/python -m bench.suite.estimator_suite --report             # the tables from the results file
    .venv/bin/python -m bench.suite.estimator_suite --report --write-docs   # + the figure and docs/benchmarks.md's block
    .venv/bin/python -m bench.suite.estimator_suite --verify --tasks sparse --seeds 3   # rerun rows, compare exactly
    .venv/bin/python -m bench.suite.estimator_suite --check-current      # rows this code no longer reproduces
    .venv/bin/python -m bench.suite.estimator_suite --refresh            # rerun missing and stale rows, rewrite the docs

Each task trains the tiny random-init Llama (hidden 64, 2 layers) with a word
tokenizer for a fixed number of updates, evaluating held-out greedy success
along the way. An estimator is the algorithm part (`actor:` keys, `critic:`,
`rollout.prm`) of its preset or example file; everything else (task, model,
batch, learning rate, schedule) is the task's, so runs of one task differ only
in the estimator. The KL reward is off in every run (`actor.kl_ctl=0`), so it
does not confound the comparison. The seed fixes the initial weights, the
prompts and the sampling noise: the same seed gives every estimator the same
start and the same prompt stream (the runs are paired), and a row reproduces
exactly. Runs go to worker processes (`--workers`, one thread each, the
project's thread policy for a tiny model); each finished run appends one JSON
row to `--results`, and rows already there (same task, estimator, seed and
config hash) are skipped, so an interrupted campaign continues where it stopped.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if __name__ == "__main__":  # before torch: rows reproduce bit for bit only on the same CPU kernels
    from bench.kernels.pinned_kernels import pin_before_torch

    pin_before_torch()

from bench import bench_rows  # noqa: E402
from bench.suite.suite_definitions import ESTIMATORS, TASKS, run_config  # noqa: E402
from bench.suite.suite_fingerprint import behaviour_fingerprint  # noqa: E402
from bench.suite.suite_report import report_text, write_docs, write_figure  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "estimator_suite.jsonl"
#: What a rerun must reproduce exactly (timings and load naturally differ).
EXACT_FIELDS = (
    "task",
    "estimator",
    "seed",
    "steps",
    "config_hash",
    "fingerprint",
    "final_success",
    "auc",
    "curve",
    "train_reward",
)
#: The one command that brings the committed rows, tables and figure up to date with the code.
REFRESH_COMMAND = ".venv/bin/python -m bench.suite.estimator_suite --refresh"


@dataclass(frozen=True)
class Job:
    task: str
    estimator: str
    seed: int
    steps: int | None = None  # None: the task's own
    eval_every: int | None = None

    def config(self) -> dict[str, Any]:
        return run_config(self.task, self.estimator, self.seed, steps=self.steps, eval_every=self.eval_every)

    def key(self) -> tuple[str, str, int, str]:
        return (
            self.task,
            self.estimator,
            self.seed,
            config_hash(self.task, self.estimator, self.steps, self.eval_every),
        )


@functools.cache
def config_hash(task: str, estimator: str, steps: int | None = None, eval_every: int | None = None) -> str:
    """sha256 (12 hex digits) of the run's config with seed 0: the same for every seed, changed by any edit."""
    config = run_config(task, estimator, 0, steps=steps, eval_every=eval_every)
    shown = _fallback_group_size_as_one({k: v for k, v in config.items() if k != "output"})
    return hashlib.sha256(_former_plugin_paths(json.dumps(shown, sort_keys=True)).encode("utf-8")).hexdigest()[:12]


def _former_plugin_paths(text: str) -> str:
    """`text` with the task plugins named by their former module path, `bench.suite_tasks.…`.

    The plugins moved to `bench.suite.suite_tasks` when bench/ became a package; a run is the same
    either way, so hashing the former name keeps the rows measured before the move current.
    """
    return text.replace('"bench.suite.suite_tasks.', '"bench.suite_tasks.')


def _fallback_group_size_as_one(value: Any) -> Any:
    """`value` with every normalisation's `group_size: null` hashed as 1, the size it stands for.

    A normalisation's unset `group_size` (null) cuts a batch without group
    metadata into groups of one, as the former default 1 did, so a run is the
    same either way; hashing null as 1 keeps the rows measured under the former
    default current.
    """
    if isinstance(value, dict):
        out = {k: _fallback_group_size_as_one(v) for k, v in value.items()}
        if "mean_level" in out and out.get("group_size", 1) is None:
            out["group_size"] = 1
        return out
    if isinstance(value, list):
        return [_fallback_group_size_as_one(v) for v in value]
    return value


def current_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows run with today's definition of their task and estimator at the task's own schedule.

    Rows of an edited task or estimator, and pilot rows with `--steps`, have another config hash and drop out.
    """
    return [
        r
        for r in rows
        if r["task"] in TASKS
        and r["estimator"] in ESTIMATORS
        and r["config_hash"] == config_hash(r["task"], r["estimator"])
    ]


@functools.cache
def fingerprint(task: str, estimator: str) -> str:
    """This code's behaviour fingerprint of (task, estimator), computed once per process (suite_fingerprint)."""
    return behaviour_fingerprint(task, estimator)


def stale_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows whose recorded fingerprint differs from this code's (rows without one are stale too)."""
    return [r for r in rows if r.get("fingerprint") != fingerprint(r["task"], r["estimator"])]


def curve_of(metrics: list[dict[str, Any]]) -> list[list[float]]:
    """[[updates, held-out success], ...] from the trainer's metrics rows, each evaluation once."""
    points: dict[int, float] = {}
    for row in metrics:
        if row.get("eval/updates") is not None:
            points.setdefault(int(row["eval/updates"]), float(row["eval/accuracy"]))
    return [[u, points[u]] for u in sorted(points)]


def run_job(job: Job) -> dict[str, Any]:
    """Train one (task, estimator, seed) in this process and return its result row."""
    from areal_adv.api.cli_args import load_config
    from areal_adv.trainer.run.loop import Trainer
    from bench.suite.suite_stats import auc

    behaviour = fingerprint(job.task, job.estimator)  # before the clocks start: once per process and pair
    start_load, wall, cpu = bench_rows.load1(), time.perf_counter(), time.process_time()
    config = job.config()
    with tempfile.TemporaryDirectory(prefix="estimator_suite_") as tmp:
        mapping = {**config, "output": {**config["output"], "dir": tmp}}
        cfg = load_config(mapping)
        result = Trainer(cfg).run()
        metrics = bench_rows.read(result.metrics_path)
    curve = curve_of(metrics)
    steps = len(metrics)
    return {
        "task": job.task,
        "estimator": job.estimator,
        "seed": job.seed,
        "steps": steps,
        "final_success": curve[-1][1],
        "auc": auc([p[0] for p in curve], [p[1] for p in curve]),
        "curve": curve,
        "train_reward": [round(float(r["reward_mean"]), 6) for r in metrics],
        "config_hash": job.key()[3],
        "fingerprint": behaviour,
        "eval_every": config["eval"]["every"],
        "git": bench_rows.git_commit(),
        "wall_s": round(time.perf_counter() - wall, 3),
        "cpu_s": round(time.process_time() - cpu, 3),
        "load1_start": round(start_load, 2),
        "load1_end": round(bench_rows.load1(), 2),
    }


def _worker_init() -> None:
    """One thread per worker (a tiny model gains nothing from more), passive OpenMP waits (the trainer's policy)."""
    from areal_adv.trainer.parallel.launch_env import prefer_passive_waiting

    prefer_passive_waiting()


def plan_jobs(opts: argparse.Namespace) -> list[Job]:
    """Seed-major order, so a campaign stopped part-way still has every estimator on its first seeds."""
    jobs = []
    for seed in range(1, opts.seeds + 1):
        for task in opts.tasks:
            for estimator in opts.estimators or TASKS[task].estimators:
                if estimator not in TASKS[task].estimators and not opts.estimators:
                    continue
                jobs.append(Job(task, estimator, seed, opts.steps, opts.eval_every))
    return jobs


def train(jobs: list[Job], results: Path, workers: int) -> int:
    """Run the jobs whose rows are missing from `results`, appending each row as it finishes."""
    from tqdm import tqdm

    drop_stale(results, jobs)
    done = {(r["task"], r["estimator"], r["seed"], r["config_hash"]) for r in bench_rows.read(results)}
    todo = [j for j in jobs if j.key() not in done]
    print(f"[suite] {len(jobs) - len(todo)} of {len(jobs)} runs already in {results}; {len(todo)} to run", flush=True)
    if not todo:
        return 0
    results.parent.mkdir(parents=True, exist_ok=True)
    bar = tqdm(total=len(todo), desc="estimator suite", unit="run", dynamic_ncols=True)
    failed: list[Job] = []
    if workers <= 1:
        _worker_init()
        for job in todo:
            _append(results, run_job(job), bar)
    else:
        import multiprocessing

        with ProcessPoolExecutor(
            workers, mp_context=multiprocessing.get_context("spawn"), initializer=_worker_init
        ) as pool:
            futures = {pool.submit(run_job, job): job for job in todo}
            for future in as_completed(futures):
                try:
                    _append(results, future.result(), bar)
                except Exception as exc:  # one broken run must not lose the others; it is named, and rerun next time
                    failed.append(futures[future])
                    print(f"[suite] {futures[future]} failed: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
    bar.close()
    if failed:
        print(
            f"[suite] {len(failed)} runs failed (see above); run the same command again to retry them", file=sys.stderr
        )
    return 1 if failed else 0


def drop_stale(results: Path, jobs: list[Job]) -> None:
    """Remove from `results` the rows of the jobs' (task, estimator) pairs that this code no longer reproduces.

    A row whose fingerprint differs from this code's describes code that no
    longer exists; it is dropped (git keeps its history) so the campaign reruns
    it, and a results file never mixes two behaviours of the trainer.
    """
    rows = bench_rows.read(results)
    pairs = {(j.task, j.estimator) for j in jobs}
    stale = {id(r) for r in stale_rows([r for r in rows if (r["task"], r["estimator"]) in pairs])}
    if not stale:
        return
    kept = [r for r in rows if id(r) not in stale]
    bench_rows.write_rows(results, kept)
    print(f"[suite] dropped {len(stale)} rows of {results} that this code no longer reproduces", flush=True)


def _append(results: Path, row: dict[str, Any], bar: Any) -> None:
    bench_rows.write_row(results, row)
    bar.set_postfix_str(
        f"{row['task']}/{row['estimator']}/seed{row['seed']}: final {row['final_success']:.2f} ({row['wall_s']:.0f} s)"
    )
    bar.update(1)


def verify(jobs: list[Job], results: Path) -> int:
    """Rerun every job that has a row in `results` and compare the fields in EXACT_FIELDS; 1 on any mismatch."""
    rows = {(r["task"], r["estimator"], r["seed"], r["config_hash"]): r for r in bench_rows.read(results)}
    checked = [j for j in jobs if j.key() in rows]
    if not checked:
        print(f"[suite] --verify: none of the {len(jobs)} selected runs has a row in {results}", file=sys.stderr)
        return 1
    _worker_init()
    bad = 0
    for job in checked:
        again, kept = run_job(job), rows[job.key()]
        diff = [k for k in EXACT_FIELDS if again[k] != kept.get(k)]
        bad += bool(diff)
        print(
            f"[suite] {job.task}/{job.estimator}/seed{job.seed}: "
            + ("reproduced exactly" if not diff else f"DIFFERS in {diff}"),
            flush=True,
        )
    print(f"[suite] --verify: {len(checked) - bad} of {len(checked)} rows reproduced exactly")
    return 1 if bad else 0


def check_current(results: Path, jobs: list[Job]) -> int:
    """1 when a current row of the jobs' (task, estimator) pairs has a fingerprint other than this code's.

    Names each stale pair with both fingerprints, and the one command that
    refreshes the campaign.
    """
    pairs = {(j.task, j.estimator) for j in jobs}
    rows = [r for r in current_rows(bench_rows.read(results)) if (r["task"], r["estimator"]) in pairs]
    stale = stale_rows(rows)
    named = sorted({(r["task"], r["estimator"], r.get("fingerprint")) for r in stale}, key=str)
    for task, estimator, recorded in named:
        print(
            f"[suite] {task}/{estimator}: rows record fingerprint {recorded}, this code gives "
            f"{fingerprint(task, estimator)}",
            flush=True,
        )
    if stale:
        print(f"[suite] {len(stale)} of {len(rows)} rows are stale; refresh them with: {REFRESH_COMMAND}")
        return 1
    print(f"[suite] all {len(rows)} rows match this code's behaviour fingerprints")
    return 0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), help=f"of {list(TASKS)}")
    parser.add_argument(
        "--estimators", nargs="+", default=None, help="default: each task's own list (TASKS[...].estimators)"
    )
    parser.add_argument("--seeds", type=int, default=10, help="seeds 1..N")
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--workers", type=int, default=2, help="worker processes (one thread each)")
    parser.add_argument("--steps", type=int, default=None, help="override every task's updates (tests, pilots)")
    parser.add_argument("--eval-every", type=int, default=None, help="override every task's evaluation period")
    parser.add_argument("--report", action="store_true", help="print the tables from --results; train nothing")
    parser.add_argument(
        "--write-docs",
        action="store_true",
        help="with --report: write the figure and the block of --doc between its markers",
    )
    parser.add_argument("--doc", type=Path, default=ROOT / "docs" / "benchmarks.md")
    parser.add_argument("--figure", type=Path, default=ROOT / "docs" / "img" / "estimator_suite.png")
    parser.add_argument("--verify", action="store_true", help="rerun the selected rows and compare them exactly")
    parser.add_argument(
        "--refresh",
        action="store_true",
        help="the whole campaign brought up to date: rerun every missing or stale row, then write the docs block",
    )
    parser.add_argument(
        "--check-current",
        action="store_true",
        help="recompute each (task, estimator)'s behaviour fingerprint and name the rows this code no longer "
        "reproduces; train nothing",
    )
    opts = parser.parse_args(argv)
    for task in opts.tasks:
        if task not in TASKS:
            parser.error(f"--tasks: unknown task {task!r}, expected some of {list(TASKS)}")
    for name in opts.estimators or ():
        if name not in ESTIMATORS:
            parser.error(f"--estimators: unknown estimator {name!r}, expected some of {sorted(ESTIMATORS)}")
    if opts.seeds < 1 or opts.workers < 1:
        parser.error(f"--seeds and --workers: expected integers >= 1, got {opts.seeds} and {opts.workers}")
    return opts


def main(argv: list[str] | None = None) -> int:
    from bench.kernels.pinned_kernels import capability_note

    note = capability_note()
    if note:
        print(f"[suite] note: {note}", flush=True)
    opts = parse_args(argv)
    jobs = plan_jobs(opts)
    if opts.verify:
        return verify(jobs, opts.results)
    if opts.check_current:
        return check_current(opts.results, jobs)
    if opts.refresh:
        status = train(jobs, opts.results, opts.workers)
        if status:
            return status
        opts.report = opts.write_docs = True
    if not opts.report:
        return train(jobs, opts.results, opts.workers)
    wanted = {job.key() for job in jobs}
    rows = [
        r for r in bench_rows.read(opts.results) if (r["task"], r["estimator"], r["seed"], r["config_hash"]) in wanted
    ]
    print(report_text(rows, opts.tasks))
    if opts.write_docs:  # every task, every current row: the block the committed results file gives
        rows = current_rows(bench_rows.read(opts.results))
        write_figure(rows, list(TASKS), opts.figure)
        write_docs(rows, list(TASKS), opts.doc, opts.figure)
        print(f"[suite] wrote {opts.figure} and the block of {opts.doc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
