"""The estimators compared on one real-model run: GRPO, Dr. GRPO, RLOO, REINFORCE++-baseline, GDPO, ...

Usage:
    .venv/bin/python -m bench.real_model.compare_estimators                        # sums: all 5 estimators x seeds 1 2
    .venv/bin/python -m bench.real_model.compare_estimators --estimators grpo --seeds 1 2   # a part
    .venv/bin/python -m bench.real_model.compare_estimators --report-only          # table + plot from the results file
    .venv/bin/python -m bench.real_model.compare_estimators --task spell_backward   # the skill task (grpo rloo dr_grpo ...)
    .venv/bin/python -m bench.real_model.compare_estimators --task char_count       # counting a letter (grpo rloo dr_grpo maxrl)
    .venv/bin/python -m bench.real_model.compare_estimators --task sums_1_2digit --steps 50   # 1-2-digit sums, format-fixed
    .venv/bin/python -m bench.real_model.compare_estimators --task sums_2digit --steps 30     # 2-digit sums: a sparse start
    .venv/bin/python -m bench.real_model.compare_estimators --estimators grpo --seeds 1 --verify-prefix 10   # a row's first updates

`--task` picks the run (TASKS): `sums` is `examples/real_model/grpo_smollm2.yaml`
(SmolLM2-135M-Instruct, one-digit sums, two reward components: `correct` and
`number_only`; GDPO normalises the two separately, the others their weighted
sum); `spell_backward` is `examples/real_model/spell_backward.yaml` (reversing a
word, reasoning-gym's `score_answer` as the reward; accuracy `solved`, the
format-fixed accuracy `solved_lenient`); `char_count` is
`examples/real_model/char_count.yaml` (counting a letter in 3-6 dashed letters,
the same reward and accuracy columns); `sums_1_2digit` is
`examples/real_model/sums_1_2digit.yaml` (sums of two 1-2-digit terms, the same
reward; the compared accuracy is the format-fixed `solved_lenient`, since the
model writes "a + b = c" and never the bare number); `sums_2digit` is
`examples/real_model/sums_2digit.yaml` (the same with terms of up to 2 digits,
where 2.9 % of the untrained model's samples are right). Every run is the task's config with the
`actor:` section of the preset `preset:<estimator>` (areal_adv/presets/) on top, so the runs
differ only in the advantage estimator.

Runs advance round-robin in chunks of `--chunk-steps` updates (each chunk
resumes the run from its last checkpoint with `train.resume=auto` and a raised
`train.steps`), so slow and quiet hours of a shared machine fall on every run
alike. Interrupt it at any point and start it again: finished chunks are kept,
each run continues from its newest checkpoint, finished runs are skipped. A
finished run appends one JSON row to `--results` (the curve, per-step times,
response lengths, the load the machine had, the commands); `--report-only`
rebuilds the table and the plot from that file and, with `--doc`, the block of
docs/benchmarks.md between its markers.

`--verify-prefix N` reruns the first N updates of each selected row (the
campaign's `--tag`, `--estimators`, `--seeds`, in a temporary folder, no
checkpoints) and compares its held-out evaluations up to update N with the
row's curve exactly (accuracy and format column); exit status 1 when one
differs. Give it the campaign's own `--task`, `--set` and `--results`. It is a
cheap check that the code still trains as it did when the row was recorded, and
a coarse one: an accuracy over a few dozen prompts can agree by chance.

Equal wall-clock budget: a run's clock is its cumulative step time (the
trainer's per-step `seconds`: rollout, advantages, update; evaluation and
checkpoints excluded, as their cost depends only on how often one measures).
The accuracy at budget B is the held-out accuracy of the last evaluation whose
policy had used at most B seconds; B defaults to the smallest total clock of the
runs in the table, so every run is compared at a point it reached.
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from areal_adv.utils.checkpoint_folders import checkpoint_root, list_checkpoints
from bench import bench_rows

ROOT = Path(__file__).resolve().parents[2]

ESTIMATORS = ("grpo", "dr_grpo", "rloo", "reinforce_plus_plus_baseline", "gdpo", "maxrl")
PRESETS = ROOT / "areal_adv" / "presets"  # the packaged presets (areal_adv.api.presets), read as raw YAML here
MODEL = ROOT / "runs" / "models" / "SmolLM2-135M-Instruct"
RESULTS = ROOT / "bench" / "results" / "estimators.jsonl"
DOC_BLOCK = "compare_estimators"  # the doc's marked block: <!-- compare_estimators:begin --> ... :end -->


@dataclass(frozen=True)
class TaskRun:
    """A real-model run the estimators are put on: its config, accuracy columns, default estimators, tag."""

    config: Path
    metric: str
    format_metric: str
    estimators: tuple[str, ...]
    tag: str
    format_label: str
    doc_block: str = DOC_BLOCK

    @classmethod
    def skill(cls, name: str, format_fixed: bool = False) -> TaskRun:
        """A reasoning-gym skill run (`examples/real_model/<name>.yaml`, its `solved` and `solved_lenient` columns).

        The compared accuracy is the strict `solved`, or with `format_fixed` the
        lenient one (the answer's last integer), the strict one then shown beside it.
        """
        columns = ("eval/reward/solved", "eval/reward/solved_lenient")
        metric, shown = columns[::-1] if format_fixed else columns
        label = (
            "strict accuracy (solved: the bare answer)" if format_fixed else "format-fixed accuracy (solved_lenient)"
        )
        config = ROOT / "examples" / "real_model" / f"{name}.yaml"
        return cls(config, metric, shown, ("grpo", "rloo", "dr_grpo", "maxrl"), name, label, f"{DOC_BLOCK}:{name}")


TASKS = {
    "sums": TaskRun(
        ROOT / "examples" / "real_model" / "grpo_smollm2.yaml",
        "eval/reward/correct",
        "eval/reward/number_only",
        ESTIMATORS[:5],
        "real_model",
        "format (number only)",
    ),
    # one trained component (the two accuracies carry weight 0), so GDPO's per-component normalisation is moot
    "spell_backward": TaskRun.skill("spell_backward"),
    # counting a letter in 3-6 dashed letters; one trained component as in spell_backward
    "char_count": TaskRun.skill("char_count"),
    # sums of two 1-2-digit terms: the untrained model knows about a third of them but writes the equation,
    # never the bare number, so the compared accuracy is the format-fixed one (the last integer is the sum)
    "sums_1_2digit": TaskRun.skill("sums_1_2digit", format_fixed=True),
    # the same sums with terms of up to 2 digits (mostly two 2-digit terms): 2.9 % of the untrained model's
    # samples are right, so most groups start all-zero (the sparse start where MaxRL and GRPO should differ)
    "sums_2digit": TaskRun.skill("sums_2digit", format_fixed=True),
}
#: The tiny random-init model and a few tokens: the CI check that the script still runs end to end.
TINY = (
    "model.path=null",
    "model.attn_implementation=eager",
    "rollout.batch_size=2",
    "rollout.n_samples=2",
    "actor.max_new_tokens=4",
    "eval.n_prompts=2",
    "eval.every=1",
    "train.num_threads=1",
)


@dataclass(frozen=True)
class Run:
    """One estimator x seed of a campaign (`tag`): its run directory and its generated config."""

    tag: str
    estimator: str
    seed: int
    runs_dir: Path

    @property
    def run_dir(self) -> Path:
        return self.runs_dir / self.tag / self.estimator / f"seed{self.seed}"

    @property
    def config(self) -> Path:
        return self.runs_dir / self.tag / "configs" / f"{self.estimator}.yaml"


def preset_actor(estimator: str) -> dict[str, Any]:
    """The algorithm of the estimator's preset: every `actor:` key its file sets, fully resolved.

    Resolved (the preset loaded as a whole, every sub-field filled in) so that
    a key replaces the run's value completely: a plain deep merge of the raw
    file would keep sub-fields the run config set and the preset left out
    (e.g. the run's `reward_norm.eps` under Dr. GRPO's `reward_norm`).
    """
    from omegaconf import OmegaConf

    from areal_adv.api.cli_args import load_config

    path = PRESETS / f"{estimator}.yaml"
    if not path.is_file():
        raise SystemExit(f"--estimators: no preset {path} (have {sorted(p.stem for p in PRESETS.glob('*.yaml'))})")
    raw = (yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("actor")
    if not isinstance(raw, dict):
        raise SystemExit(f"{path}: expected an `actor:` mapping (the algorithm), found {type(raw).__name__}")
    resolved = OmegaConf.to_container(OmegaConf.structured(load_config(path).actor), enum_to_str=True)
    return {key: resolved[key] for key in raw}


def write_config(run: Run, run_config: Path) -> Path:
    """`defaults: [run config]` + the preset's `actor:` (a generated file beside the runs)."""
    body = {
        "defaults": [str(run_config.resolve())],
        "experiment_name": run.estimator,
        "actor": preset_actor(run.estimator),
    }
    run.config.parent.mkdir(parents=True, exist_ok=True)
    text = (
        f"# generated by bench/real_model/compare_estimators.py: {run_config.name} + preset:{run.estimator} "
        f"actor:\n{yaml.safe_dump(body, sort_keys=False)}"
    )
    if not run.config.is_file() or run.config.read_text(encoding="utf-8") != text:
        run.config.write_text(text, encoding="utf-8")
    return run.config


def run_args(run: Run, target: int, chunk: int, extra: Sequence[str]) -> list[str]:
    """The trainer's command line for the chunk that ends at update `target`."""
    return [
        "--config",
        str(run.config),
        f"seed={run.seed}",
        f"trial_name=seed{run.seed}",
        f"output.dir={run.runs_dir / run.tag}",
        f"train.steps={target}",
        "train.resume=auto",
        f"train.save_every={chunk}",
        "train.keep_last=1",
        "output.progress_bar=false",
        *extra,
    ]


def steps_done(run: Run) -> int:
    """Updates the run's newest checkpoint holds (0: not started, or killed before its first save)."""
    found = list_checkpoints(checkpoint_root(run.run_dir)) if run.run_dir.is_dir() else []
    return max((step for step, _ in found), default=0)


class LoadSampler:
    """Samples the 1-minute load average and CPU pressure every `period` s while a chunk runs.

    Our own run adds about `train.num_threads` to the load average; the samples
    say how busy the machine was besides, so rows measured in different hours can
    be judged side by side.
    """

    def __init__(self, period: float = 5.0) -> None:
        self.period, self.samples = period, []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while True:
            self.samples.append((bench_rows.load1(), bench_rows.cpu_pressure()))
            if self._stop.wait(self.period):
                return

    def __enter__(self) -> LoadSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def summary(self) -> dict[str, float | None]:
        loads = [s[0] for s in self.samples]
        psi = [s[1] for s in self.samples if s[1] is not None]
        return {
            "load1_mean": statistics.fmean(loads),
            "load1_max": max(loads),
            "cpu_pressure_some_avg10_mean": statistics.fmean(psi) if psi else None,
        }


def run_chunk(run: Run, args: list[str]) -> dict[str, Any]:
    """One chunk in this process (`areal_adv.trainer.main.main`): wall and CPU time, load, exit status."""
    from areal_adv.trainer.main import main as train_main

    print(f"[compare] {run.estimator} seed {run.seed}: python -m areal_adv.trainer.main {' '.join(args)}", flush=True)
    if steps_done(run) == 0:  # a fresh start (or one killed before its first checkpoint): no earlier chunks count
        chunks_file(run).unlink(missing_ok=True)
    wall, cpu = time.perf_counter(), time.process_time()
    with LoadSampler() as load:
        status = train_main(args)
    gc.collect()  # the trainer's model and optimiser go before the next chunk builds its own
    chunk = {
        "args": args,
        "status": status,
        "wall_s": time.perf_counter() - wall,
        "cpu_s": time.process_time() - cpu,
        "finished_at": now(),
        **load.summary(),
    }
    bench_rows.write_row(chunks_file(run), chunk)
    return chunk


def chunks_file(run: Run) -> Path:
    """Every chunk's timing and load, kept beside the run directory (the trainer owns the directory itself)."""
    return run.run_dir.parent / f"seed{run.seed}.chunks.jsonl"


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def curve(metrics: list[dict[str, Any]], key: str, format_key: str | None) -> list[dict[str, float]]:
    """Each evaluation once (a chunk boundary measures the same policy twice): updates, clock, accuracy."""
    clock, out, seen = 0.0, [], set()
    for row in metrics:
        updates = row.get("eval/updates")
        # an evaluation before step s's update measured the policy after s updates: its clock excludes step s
        if updates is not None and int(updates) == row["step"] and int(updates) not in seen:
            out.append(eval_point(row, clock, key, format_key))
            seen.add(int(updates))
        clock += row["seconds"]
        if updates is not None and int(updates) == row["step"] + 1 and int(updates) not in seen:
            out.append(eval_point(row, clock, key, format_key))
            seen.add(int(updates))
    return out


def eval_point(row: dict[str, Any], clock: float, key: str, format_key: str | None) -> dict[str, float]:
    if key not in row:
        raise SystemExit(
            f"--metric: {key!r} is not in the evaluation row (have {sorted(k for k in row if k.startswith('eval/'))})"
        )
    point = {"updates": int(row["eval/updates"]), "train_seconds": clock, "accuracy": row[key]}
    if format_key and format_key in row:
        point["format"] = row[format_key]
    return point


def eval_samples(path: Path, updates: list[int], k: int = 4) -> dict[str, list[dict[str, Any]]]:
    """The first `k` greedy held-out answers logged at each of `updates` (samples.jsonl), for the doc."""
    out: dict[str, list[dict[str, Any]]] = {str(u): [] for u in updates}
    for row in bench_rows.read(path):
        key = str(row["step"])
        if row["split"] == "eval" and key in out and len(out[key]) < k:
            prompt = row["prompt"][-1]["content"] if isinstance(row["prompt"], list) else row["prompt"]
            out[key].append({"prompt": prompt, "completion": row["completion"], "rewards": row["rewards"]})
    return out


def phase_means(metrics: list[dict[str, Any]]) -> dict[str, float]:
    """The mean of every per-phase timing metric (`time/...`) the trainer logged, over the steps."""
    keys = dict.fromkeys(k for row in metrics for k in row if k.startswith("time/"))
    return {k: statistics.fmean(v) for k in keys if (v := [r[k] for r in metrics if r.get(k) is not None])}


def result_row(run: Run, steps: int, metric: str, format_metric: str | None) -> dict[str, Any]:
    """The finished run as one row: its curve, step times, response lengths, load, commands."""
    metrics = bench_rows.read(run.run_dir / "metrics.jsonl")
    if len(metrics) != steps:
        raise SystemExit(f"{run.run_dir}/metrics.jsonl: {len(metrics)} steps, expected {steps}")
    chunks = bench_rows.read(chunks_file(run))
    seconds = [r["seconds"] for r in metrics]
    lengths = [r["response_tokens"] for r in metrics]
    tail = lengths[-max(1, len(lengths) // 10) :]
    weights = [c["wall_s"] for c in chunks] or [1.0]
    load = sum(c["load1_mean"] * w for c, w in zip(chunks, weights)) / sum(weights) if chunks else None
    return {
        "tag": run.tag,
        "estimator": run.estimator,
        "seed": run.seed,
        "steps": steps,
        "metric": metric,
        "curve": curve(metrics, metric, format_metric),
        "train_seconds": sum(seconds),
        "step_seconds_median": statistics.median(seconds),
        "step_seconds_mean": statistics.fmean(seconds),
        "step_seconds": seconds,
        "response_tokens_mean": statistics.fmean(lengths),
        "response_tokens_last10pct": statistics.fmean(tail),
        "cpu_seconds_per_step": sum(c["cpu_s"] for c in chunks) / steps if chunks else None,
        "load1_mean": load,
        "load1_max": max((c["load1_max"] for c in chunks), default=None),
        "samples": eval_samples(run.run_dir / "samples.jsonl", [0, steps]),
        "time_means": phase_means(metrics),
        "chunks": len(chunks),
        "run_dir": shown(run.run_dir),
        "commands": [" ".join(["python -m areal_adv.trainer.main", *c["args"]]) for c in chunks],
        "git": bench_rows.git_commit(),
        "finished_at": now(),
        "cpus": os.cpu_count(),
    }


def shown(path: Path) -> str:
    """`path` relative to the repository when it lies inside it."""
    return str(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path)


def targets(steps: int, chunk: int) -> list[int]:
    """The updates each round ends at: chunk, 2 chunk, ..., steps (chunk 0: one round, the whole run)."""
    if chunk <= 0 or chunk >= steps:
        return [steps]
    return [*range(chunk, steps, chunk), steps]


def finished(rows: list[dict[str, Any]], run: Run, steps: int) -> bool:
    return any(
        r["tag"] == run.tag and r["estimator"] == run.estimator and r["seed"] == run.seed and r["steps"] == steps
        for r in rows
    )


def train_all(runs: list[Run], opts: argparse.Namespace, extra: list[str]) -> int:
    """Round-robin chunks until every run has `opts.steps` updates; 130 when interrupted, 1 on a failed chunk."""
    started, ran = time.perf_counter(), 0
    for target in targets(opts.steps, opts.chunk_steps):
        for run in runs:
            if finished(bench_rows.read(opts.results), run, opts.steps):
                continue
            if steps_done(run) >= target:  # a chunk the script was stopped after, before its row was written
                if target == opts.steps:
                    record(run, opts)
                continue
            if (
                ran
                and opts.stop_after_hours is not None
                and time.perf_counter() - started > opts.stop_after_hours * 3600
            ):
                print(
                    f"[compare] --stop-after-hours {opts.stop_after_hours}: {ran} chunks done; run the same "
                    "command again to continue"
                )
                return 0
            ran += 1
            chunk = run_chunk(run, run_args(run, target, opts.chunk_steps or opts.steps, extra))
            if chunk["status"] != 0:
                print(
                    f"[compare] {run.estimator} seed {run.seed} stopped with status {chunk['status']}; "
                    "run the same command again to continue from its last checkpoint"
                )
                return chunk["status"]
            if target == opts.steps:
                record(run, opts)
    return 0


def record(run: Run, opts: argparse.Namespace) -> None:
    """Append the finished run's row; then its checkpoint (about 1.6 GB for 135 M parameters) may go."""
    row = result_row(run, opts.steps, opts.metric, opts.format_metric)
    bench_rows.write_row(opts.results, row)
    print(f"[compare] {run.estimator} seed {run.seed}: {describe(row)}", flush=True)
    if not opts.keep_checkpoints:
        for _, folder in list_checkpoints(checkpoint_root(run.run_dir)):
            shutil.rmtree(folder)


def describe(row: dict[str, Any]) -> str:
    first, last = row["curve"][0], row["curve"][-1]
    return (
        f"accuracy {first['accuracy']:.3f} -> {last['accuracy']:.3f} after {last['updates']} updates, "
        f"{row['train_seconds']:.0f} s of steps (median {row['step_seconds_median']:.2f} s/step, "
        f"load {row['load1_mean']:.1f}), response {row['response_tokens_mean']:.1f} tokens"
    )


def answers(row: dict[str, Any]) -> str:
    """`; greedy answers before: "..." -> after N updates: "..."` for the first logged held-out prompts."""
    before, after = (row.get("samples") or {}).get("0", []), (row.get("samples") or {}).get(str(row["steps"]), [])
    pairs = [
        f"{b['prompt']} {b['completion']!r} -> {a['completion']!r}"
        for b, a in zip(before, after)
        if b["prompt"] == a["prompt"]
    ]
    return f"; greedy answers before -> after: {'; '.join(pairs)}" if pairs else ""


def latest_rows(rows: list[dict[str, Any]], tag: str) -> list[dict[str, Any]]:
    """The newest row of each (estimator, seed) of the campaign, in the order of ESTIMATORS."""
    latest: dict[tuple[str, int], dict[str, Any]] = {}
    for row in rows:
        if row["tag"] == tag:
            latest[(row["estimator"], row["seed"])] = row
    order = {name: i for i, name in enumerate(ESTIMATORS)}  # the table's row order
    return [latest[k] for k in sorted(latest, key=lambda k: (order.get(k[0], len(order)), k[0], k[1]))]


def at_budget(row: dict[str, Any], budget: float) -> dict[str, float]:
    """The last evaluation whose policy used at most `budget` seconds of steps."""
    within = [p for p in row["curve"] if p["train_seconds"] <= budget + 1e-9]
    return within[-1] if within else row["curve"][0]


def table(rows: list[dict[str, Any]], budget: float, format_label: str) -> str:
    """Markdown: one line per estimator (seeds pooled: the mean, then each seed) and one per run's command."""
    lines = [
        f"| estimator | seeds | accuracy before | accuracy at {budget:.0f} s of steps (updates) | "
        f"accuracy after the last update | {format_label} after | mean response tokens | "
        "median step time (s) | CPU s / step | load (1-min avg) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    by_estimator: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_estimator.setdefault(row["estimator"], []).append(row)
    for name, group in by_estimator.items():
        budgeted = [at_budget(r, budget) for r in group]
        cells = [
            name,
            " ".join(str(r["seed"]) for r in group),
            pooled([r["curve"][0]["accuracy"] for r in group]),
            pooled([p["accuracy"] for p in budgeted]) + " (" + ", ".join(str(p["updates"]) for p in budgeted) + ")",
            pooled([r["curve"][-1]["accuracy"] for r in group]),
            pooled([r["curve"][-1].get("format", float("nan")) for r in group]),
            f"{statistics.fmean(r['response_tokens_mean'] for r in group):.1f}",
            f"{statistics.fmean(r['step_seconds_median'] for r in group):.2f}",
            "/".join(f"{r['cpu_seconds_per_step']:.1f}" for r in group if r["cpu_seconds_per_step"] is not None),
            "/".join(f"{r['load1_mean']:.1f}" for r in group if r["load1_mean"] is not None),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def pooled(values: list[float]) -> str:
    """`mean (seed values)`: the seeds' mean and each seed's own value."""
    return f"{statistics.fmean(values):.3f} ({', '.join(f'{v:.3f}' for v in values)})"


def plot(rows: list[dict[str, Any]], budget: float, path: Path) -> None:
    """Held-out accuracy against updates and against seconds of steps, every run overlaid (one colour each)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (by_updates, by_clock) = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
    colours = {name: f"C{i}" for i, name in enumerate(dict.fromkeys(r["estimator"] for r in rows))}
    styles = ("-", "--", ":", "-.")
    seeds = sorted({r["seed"] for r in rows})
    for row in rows:
        xs = [p["updates"] for p in row["curve"]]
        ts = [p["train_seconds"] / 60 for p in row["curve"]]
        ys = [p["accuracy"] for p in row["curve"]]
        style = dict(
            color=colours[row["estimator"]],
            linestyle=styles[seeds.index(row["seed"]) % len(styles)],
            marker=".",
            label=f"{row['estimator']} seed {row['seed']}",
        )
        by_updates.plot(xs, ys, **style)
        by_clock.plot(ts, ys, **style)
    by_clock.axvline(budget / 60, color="grey", linewidth=0.8)
    by_updates.set(xlabel="updates", ylabel=f"held-out greedy accuracy ({rows[0]['metric']})")
    by_clock.set(xlabel="minutes of steps (rollout + update; evaluation excluded)")
    for ax in (by_updates, by_clock):
        ax.grid(alpha=0.3)
    by_clock.legend(fontsize=7, ncol=2)
    fig.suptitle(f"{rows[0]['tag']}: held-out accuracy (grey line: the {budget:.0f} s budget of the table)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def verify_prefix(opts: argparse.Namespace, extra: list[str]) -> int:
    """Rerun each selected row's first `opts.verify_prefix` updates; 1 when an evaluation differs from its curve."""
    n = opts.verify_prefix
    rows = [
        r
        for r in latest_rows(bench_rows.read(opts.results), opts.tag)
        if r["estimator"] in opts.estimators and r["seed"] in opts.seeds
    ]
    if not rows:
        raise SystemExit(
            f"--verify-prefix: no row of tag {opts.tag!r} for {opts.estimators} x seeds {opts.seeds} "
            f"in {shown(opts.results)}"
        )
    if n < 2:
        raise SystemExit(f"--verify-prefix: got {n}, expected at least 2 updates")
    same = 0
    with tempfile.TemporaryDirectory(prefix="verify_prefix_") as tmp:
        for row in rows:
            run = Run(opts.tag, row["estimator"], row["seed"], Path(tmp))
            write_config(run, opts.config)
            chunk = run_chunk(run, run_args(run, n, 0, extra))
            if chunk["status"] != 0:
                print(f"[compare] {run.estimator} seed {run.seed} stopped with status {chunk['status']}")
                return chunk["status"]
            have = {
                p["updates"]: p
                for p in curve(bench_rows.read(run.run_dir / "metrics.jsonl"), opts.metric, opts.format_metric)
            }
            want = {p["updates"]: p for p in row["curve"] if p["updates"] <= n}
            common = sorted(set(want) & set(have))
            if not [u for u in common if u > 0]:
                raise SystemExit(
                    f"--verify-prefix {n}: the row evaluated at {sorted(want)} within the first {n} updates, the rerun "
                    f"at {sorted(have)}; choose N at an evaluation after update 0"
                )
            diffs = [
                f"update {u}: {key} {want[u].get(key)} recorded, {have[u].get(key)} now"
                for u in common
                for key in ("accuracy", "format")
                if want[u].get(key) != have[u].get(key)
            ]
            label = f"{row['estimator']} seed {row['seed']} (recorded at commit {row.get('git')})"
            if diffs:
                print(f"[compare] {label}: DIFFERS: " + "; ".join(diffs), flush=True)
            else:
                same += 1
                print(f"[compare] {label}: the evaluations at updates {common} reproduced exactly", flush=True)
    print(f"[compare] {same} of {len(rows)} rows reproduced their first {n} updates' evaluations")
    return 0 if same == len(rows) else 1


def update_doc(doc: Path, text: str, block: str = DOC_BLOCK) -> None:
    """Replace the block between `<!-- {block}:begin -->` and its end in `doc` (the rest is written by hand)."""
    begin, end = f"<!-- {block}:begin -->", f"<!-- {block}:end -->"
    page = doc.read_text(encoding="utf-8")
    if begin not in page or end not in page:
        raise SystemExit(f"--doc {doc}: the markers {begin} and {end} are missing")
    head, rest = page.split(begin, 1)
    _, tail = rest.split(end, 1)
    doc.write_text(f"{head}{begin}\n{text}\n{end}{tail}", encoding="utf-8")


def report(opts: argparse.Namespace) -> int:
    """Print (and optionally write into the doc) the table, the per-run lines and the plot of the campaign."""
    rows = latest_rows(bench_rows.read(opts.results), opts.tag)
    if not rows:
        print(f"[compare] no finished run of tag {opts.tag!r} in {opts.results}")
        return 0
    budget = opts.budget_s if opts.budget_s is not None else min(r["train_seconds"] for r in rows)
    runs = "\n".join(
        f"- `{r['estimator']}` seed {r['seed']} ({r['finished_at']}, commit {r['git']}): {describe(r)}{answers(r)}"
        for r in rows
    )
    text = (
        f"{table(rows, budget, opts.format_label)}\n\nBudget: {budget:.0f} s of steps"
        f"{' (the smallest total of the runs)' if opts.budget_s is None else ''}; "
        f"accuracy = `{rows[0]['metric']}` on the held-out set, greedy.\n\n{runs}"
    )
    if opts.probe_results is not None:
        text += "\n\n" + skill_test(opts, rows)
    print(text)
    if opts.plot:
        plot(rows, budget, opts.plot)
        print(f"[compare] plot {opts.plot}")
    if opts.doc:
        update_doc(opts.doc, text, opts.doc_block or TASKS[opts.task].doc_block)
        print(f"[compare] table written into {opts.doc}")
    return 0


def skill_test(opts: argparse.Namespace, rows: list[dict[str, Any]]) -> str:
    """The probe's forced-start table (bench/real_model/probe_table.py) for the campaign's runs, with its source."""
    from bench.real_model.probe_table import probe_table

    probes = bench_rows.read(opts.probe_results) if opts.probe_results.is_file() else []
    try:
        table_text = probe_table(probes, opts.tag, [(r["estimator"], r["seed"]) for r in rows])
    except ValueError as err:
        raise SystemExit(f"--probe-results {shown(opts.probe_results)}: {err}") from None
    return (
        f"Skill test: greedy accuracy on the same held-out rows with the answer's start forced "
        f"(`examples/real_model/probe.py --skills --results`, rows of `{shown(opts.probe_results)}`); the changes are "
        f"paired over the held-out prompts.\n\n{table_text}"
    )


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--task",
        choices=sorted(TASKS),
        default="sums",
        help="the run; sets the defaults of --config --metric --format-metric --estimators --tag --plot",
    )
    p.add_argument("--estimators", nargs="+", default=None, help="presets (areal-adv presets; default: the task's)")
    p.add_argument("--seeds", nargs="+", type=int, default=[1, 2])
    p.add_argument("--steps", type=int, default=None, help="updates per run (default: the run config's train.steps)")
    p.add_argument("--chunk-steps", type=int, default=25, help="updates per round-robin chunk (0: whole runs)")
    p.add_argument("--config", type=Path, default=None, help="the run every estimator is put on (default: the task's)")
    p.add_argument("--model", type=Path, default=MODEL, help="model.path (examples/real_model/install.sh makes it)")
    p.add_argument("--tiny", action="store_true", help="tiny random-init model, a few tokens (the CI check)")
    p.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="more trainer overrides, for every run")
    p.add_argument("--tag", default=None, help="campaign name: run directories and result rows (default: the task's)")
    p.add_argument("--runs-dir", type=Path, default=ROOT / "runs" / "compare")
    p.add_argument("--results", type=Path, default=RESULTS, help="finished runs are appended here (JSONL)")
    p.add_argument("--metric", default=None, help="the held-out accuracy column (default: the task's)")
    p.add_argument("--format-metric", default=None, help="the column shown beside it (default: the task's)")
    p.add_argument("--budget-s", type=float, default=None, help="budget in seconds of steps (default: smallest run)")
    p.add_argument(
        "--stop-after-hours",
        type=float,
        default=None,
        help="start no new chunk after this long (at least one runs): a part of the campaign",
    )
    p.add_argument("--keep-checkpoints", action="store_true", help="keep a finished run's last checkpoint")
    p.add_argument("--report-only", action="store_true", help="only the table and plot from --results")
    p.add_argument(
        "--verify-prefix",
        type=int,
        default=None,
        metavar="N",
        help="rerun the selected rows' first N updates and compare their evaluations with the rows (exit 1: differ)",
    )
    p.add_argument("--plot", type=Path, default=None, help="default: docs/img/estimators_<tag>.png")
    p.add_argument("--doc", type=Path, default=None, help="write the table into this page's marked block")
    p.add_argument(
        "--doc-block", default=None, help="the marked block --doc writes (default: the task's; another campaign's)"
    )
    p.add_argument(
        "--probe-results",
        type=Path,
        default=None,
        help="probe.py --results rows: add the forced-start skill test of the runs' last checkpoints",
    )
    opts = p.parse_args(argv)
    task = TASKS[opts.task]
    given = opts.format_metric
    for key in ("config", "metric", "format_metric", "tag"):
        if getattr(opts, key) is None:
            setattr(opts, key, getattr(task, key))
    if opts.estimators is None:  # the task's list, less a preset this checkout does not have yet
        opts.estimators = [name for name in task.estimators if (PRESETS / f"{name}.yaml").is_file()]
        if missing := sorted(set(task.estimators) - set(opts.estimators)):
            print(
                f"[compare] --task {opts.task}: no preset for {missing} in {shown(PRESETS)}; running {opts.estimators}",
                flush=True,
            )
    opts.format_label = f"`{given}`" if given not in (None, task.format_metric) else task.format_label
    opts.plot = opts.plot or ROOT / "docs" / "img" / f"estimators_{opts.tag}.png"
    return opts


def config_steps(config: Path, extra: list[str]) -> int:
    from areal_adv.api.cli_args import load_config

    return int(load_config(config, extra).train.steps)


def main(argv: Sequence[str] | None = None) -> int:
    opts = parse_args(argv)
    if opts.report_only:
        return report(opts)
    if not opts.tiny and not (opts.model / "config.json").is_file():
        raise SystemExit(f"--model {opts.model}: no converted checkpoint; run examples/real_model/install.sh")
    # the campaigns compare estimators in float32, as their recorded rows were run; --set may change it
    extra = [*(TINY if opts.tiny else [f"model.path={opts.model}"]), "model.mixed_precision=null", *opts.set]
    if opts.verify_prefix is not None:
        return verify_prefix(opts, extra)
    opts.steps = opts.steps or config_steps(opts.config, extra)
    if opts.chunk_steps == 1 or opts.chunk_steps < 0:
        # a 1-update first chunk would be its own last step: the trainer then skips the evaluation before it
        raise SystemExit(f"--chunk-steps: got {opts.chunk_steps}, expected 0 (whole runs) or at least 2")
    # seed by seed, every estimator in turn: a slow hour of the shared machine falls on all estimators alike
    runs = [Run(opts.tag, name, seed, opts.runs_dir) for seed in opts.seeds for name in opts.estimators]
    for run in runs:
        write_config(run, opts.config)
    status = train_all(runs, opts, extra)
    report(opts)
    return status


if __name__ == "__main__":
    sys.exit(main())
