"""Can a short race choose the estimator? The suite's tasks raced on new seeds, judged against the full runs.

Usage:
    .venv/bin/python -m bench.suite.race_evidence                        # 5 tasks x seeds 11-15 and 16-20, resumable
    .venv/bin/python -m bench.suite.race_evidence --tasks sparse --blocks 11-15
    .venv/bin/python -m bench.suite.race_evidence --smollm2              # the SmolLM2 race (examples/real_model/install.sh)
    .venv/bin/python -m bench.suite.race_evidence --report               # the measures, from the rows
    .venv/bin/python -m bench.suite.race_evidence --report --write-docs  # + docs/benchmarks.md's block

The reading rule is docs/benchmarks.md, "Can a short race choose the estimator?",
committed (39e1d24) before any race row existed; bench/suite/race_report.py applies it.
Each race is `areal-adv race` on the task's suite config (written to
`runs/race_evidence/configs/<task>.yaml` from bench/suite/suite_definitions.py, so an
arm's first updates are the suite run's), the task's estimators (a preset by
name, an example by its path, the suite's GRPO with additive process rewards as
a generated algorithm file), GRPO the baseline, a quarter of the task's updates
in 2 rungs, `--set actor.kl_ctl=0` and, on the multi-turn tasks, `--seed-fields
task.kwargs.seed`. Its race directory is `runs/race_evidence/<task>/seeds<A>-<B>/`
(an interrupted race continues); a finished race appends one row to
`bench/results/race_evidence.jsonl`: the verdicts, every arm-seed value at each
rung, each arm's window train rewards (checked against the suite rows in the
report), the held-out window area (recorded, not judged), the compute, CPU and
wall seconds and the load.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
if __name__ == "__main__":  # before torch: the suite's rows were measured on these CPU kernels
    from bench.kernels.pinned_kernels import pin_before_torch

    pin_before_torch()

from bench import bench_rows  # noqa: E402
from bench.suite.suite_definitions import ESTIMATORS, TASKS, algorithm, run_config  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "race_evidence.jsonl"
RUNS = ROOT / "runs" / "race_evidence"
BLOCKS = ((11, 15), (16, 20))
SHARE, RUNGS = 0.25, 2
SMOLLM2 = {
    "config": "examples/real_model/sums_2digit.yaml",
    "estimators": ["grpo", "maxrl", "rloo"],
    "updates": 7,
    "seeds": "4-8",
    # keep_last=1 as the full runs had it: 15 arm-seeds of 2.2 GB checkpoints; it changes no update
    "set": ["model.path=runs/models/SmolLM2-135M-Instruct", "eval.every=null", "train.keep_last=1"],
}


def updates_of(task: str) -> int:
    """The race's window: a quarter of the task's updates, rounded down."""
    return int(TASKS[task].steps * SHARE)


def estimator_argument(name: str, folder: Path, task: str) -> str:
    """How `areal-adv race` names a suite estimator: a preset by name, an example by path, else a written file.

    The suite's own variants (GRPO with additive process rewards) become a
    config file of their name: the algorithm, on the task it runs on (a config
    file must load alone, and process rewards need a task that scores them).
    """
    source = ESTIMATORS[name]
    if source.extra:
        path = folder / f"{name}.yaml"
        part = algorithm(name)
        body = {"task": TASKS[task].task, "actor": part["actor"], "critic": part["critic"], "rollout": part["rollout"]}
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(body, sort_keys=False), encoding="utf-8")
        return str(path)
    return str(source.path) if source.full_run else name


def task_config(task: str) -> Path:
    """The task's suite run (GRPO, seed 0: the race sets seeds and algorithms) as a config file."""
    path = RUNS / "configs" / f"{task}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    config = run_config(task, "grpo", 0)
    config["experiment_name"] = task
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return path


def race_argv(task: str, block: tuple[int, int]) -> tuple[list[str], Path]:
    """The `areal-adv race` arguments of one race, and its race directory."""
    race_dir = RUNS / task / f"seeds{block[0]}-{block[1]}"
    names = [estimator_argument(e, RUNS / "estimators", task) for e in TASKS[task].estimators]
    argv = [str(task_config(task)), "--estimators", *names, "--updates", str(updates_of(task))]
    argv += ["--rungs", str(RUNGS), "--seeds", f"{block[0]}-{block[1]}", "--metric", "train_reward"]
    argv += ["--set", "actor.kl_ctl=0", "--race-dir", str(race_dir), "--full-updates", str(TASKS[task].steps)]
    if TASKS[task].task["implementation"].endswith("make_echo"):
        argv += ["--seed-fields", "task.kwargs.seed"]
    return argv, race_dir


def arm_windows(race_dir: Path, verdicts: list[dict[str, Any]]) -> tuple[dict, dict]:
    """Per arm and seed: the train rewards over the arm's window, and the held-out area over it (not judged)."""
    from areal_adv.trainer.race.race_spec import RaceError
    from areal_adv.trainer.race.series import from_run_dir, window_value

    rewards: dict[str, dict[int, list[float]]] = {}
    heldout: dict[str, dict[int, float | None]] = {}
    for v in verdicts:
        for run in sorted((race_dir / "arms" / v["arm"]).glob("seed*")):
            seed, series = int(run.name.removeprefix("seed")), from_run_dir(run)
            rewards.setdefault(v["arm"], {})[seed] = [round(series.train[s], 6) for s in range(v["updates"])]
            try:
                area = window_value(series, "heldout", [], v["updates"])
            except RaceError:  # fewer than 2 evaluations in the window
                area = None
            heldout.setdefault(v["arm"], {})[seed] = area
    return rewards, heldout


def run_race_row(label: str, argv: list[str], race_dir: Path, extra: dict[str, Any]) -> dict[str, Any]:
    """Run (or continue) one race through the command line's own entry point; its evidence row."""
    from areal_adv.trainer.race.race_command import main as race_main

    started = bench_rows.provenance("bench.suite.race_evidence", sys.argv[1:])
    load_start, wall, cpu = bench_rows.load1(), time.perf_counter(), time.process_time()
    status = race_main(argv)
    if status != 0:
        raise SystemExit(f"[race evidence] {label}: areal-adv race exited with {status}; rerun to continue")
    rows = [json.loads(line) for line in (race_dir / "race.jsonl").read_text(encoding="utf-8").splitlines()]
    verdicts = [r for r in rows if r["kind"] == "verdict"]
    rewards, heldout = arm_windows(race_dir, verdicts)
    return {
        "race": label,
        **extra,
        "argv": ["areal-adv", "race", *argv],
        "verdicts": verdicts,
        "values": [r for r in rows if r["kind"] == "value"],
        "rungs": [{k: r[k] for k in ("rung", "updates", "dropped")} for r in rows if r["kind"] == "rung"],
        "compute": next(r for r in rows if r["kind"] == "compute"),
        "train_rewards": rewards,
        "heldout_area": heldout,
        "wall_s": round(time.perf_counter() - wall, 1),
        "cpu_s": round(time.process_time() - cpu, 1),
        "load1_start": round(load_start, 2),
        "load1_end": round(bench_rows.load1(), 2),
        **started,
    }


def suite_races(tasks: list[str], blocks: list[tuple[int, int]], results: Path) -> None:
    """Every (task, seed block) race without a row in `results`, one after another, each appended when judged."""
    done = {(r["task"], tuple(r["seeds"])) for r in bench_rows.read(results) if r.get("race") == "suite"}
    for block in blocks:
        for task in tasks:
            if (task, block) in done:
                continue
            argv, race_dir = race_argv(task, block)
            print(f"[race evidence] {task} seeds {block[0]}-{block[1]}: {' '.join(argv)}", flush=True)
            extra = {"task": task, "seeds": list(block), "updates": updates_of(task), "full_updates": TASKS[task].steps}
            bench_rows.append(results, run_race_row("suite", argv, race_dir, extra))


def smollm2_race(results: Path) -> None:
    """The SmolLM2 race of the rule (once; its race directory resumes)."""
    if any(r.get("race") == "smollm2" for r in bench_rows.read(results)):
        print("[race evidence] the SmolLM2 race has its row already")
        return
    race_dir = RUNS / "smollm2"
    argv = [SMOLLM2["config"], "--estimators", *SMOLLM2["estimators"], "--updates", str(SMOLLM2["updates"])]
    argv += ["--rungs", str(RUNGS), "--seeds", SMOLLM2["seeds"], "--metric", "train_reward"]
    argv += ["--set", *SMOLLM2["set"], "--race-dir", str(race_dir)]
    bench_rows.append(results, run_race_row("smollm2", argv, race_dir, {"task": "sums_2digit", "seeds": [4, 8]}))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    parser.add_argument("--blocks", nargs="+", default=[f"{a}-{b}" for a, b in BLOCKS], help="seed blocks A-B")
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--smollm2", action="store_true", help="the SmolLM2 race instead of the suite's")
    parser.add_argument("--report", action="store_true", help="the measures from --results; train nothing")
    parser.add_argument("--write-docs", action="store_true", help="with --report: write docs/benchmarks.md's block")
    opts = parser.parse_args(argv)
    if opts.report:
        from bench.suite.race_report import report

        return report(opts.results, write_docs=opts.write_docs)
    if opts.smollm2:
        smollm2_race(opts.results)
        return 0
    blocks = [tuple(int(x) for x in b.split("-")) for b in opts.blocks]
    suite_races(opts.tasks, blocks, opts.results)  # type: ignore[arg-type]
    return 0


if __name__ == "__main__":
    sys.exit(main())
