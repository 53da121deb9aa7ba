"""`areal-adv race`: race estimators on a config (or from a run's checkpoint), or compare finished runs.

    areal-adv race CONFIG --estimators grpo maxrl rloo [--updates N] [--seeds S|A-B|A,B] [--rungs R]
                   [--from RUN_DIR[:STEP]] [--jobs J] [--set KEY=VALUE ...] [--race-dir DIR]
    areal-adv race --compare RUN [RUN ...] [--baseline E] [--updates N] [--metric ...]

The first estimator is the baseline (your current one) unless `--baseline`
names another. The race writes `race.yaml` (its declaration), `configs/`,
`arms/<estimator>/seed<s>/` (ordinary run directories), `logs/`, and, when
judged, `race.jsonl`, `race.md` and `race.png` into `--race-dir`. Run the same
command again to continue an interrupted race.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from areal_adv.api.cli_args import ConfigError, load_config
from areal_adv.trainer.race.race_spec import METRICS, RaceError, RaceSpec, parse_seeds

DEFAULT_RACE_ROOT = Path("runs") / "race"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="areal-adv race",
        description="train candidate estimators for a short window on paired seeds, drop the clearly worse "
        "between rungs, and say which learns sooner than your current one (or compare finished runs)",
    )
    p.add_argument("config", nargs="?", help="the run to race on (YAML or preset:NAME); default with --from: its run")
    p.add_argument("--estimators", nargs="+", default=None, help="presets, config files or estimator names")
    p.add_argument("--baseline", default=None, help="the estimator you use now (default: the first named)")
    p.add_argument("--updates", type=int, default=None, help="the window (default: a quarter of train.steps)")
    p.add_argument("--seeds", default="5", help="S (seeds 1..S), A-B or A,B,C (default 5)")
    p.add_argument("--rungs", type=int, default=2, help="elimination points: the window in R equal rungs (default 2)")
    p.add_argument("--metric", default="auto", choices=("auto", *METRICS), help="auto: heldout when eval is set")
    p.add_argument("--alpha", type=float, default=0.05, help="family-wise error of the drops (default 0.05)")
    p.add_argument("--from", dest="start", default=None, help="RUN_DIR[:STEP]: start every arm from its checkpoint")
    p.add_argument("--jobs", type=int, default=1, help="arms trained in parallel processes (default 1)")
    p.add_argument(
        "--set", dest="overrides", nargs="+", default=[], help="KEY=VALUE for every arm, after its algorithm"
    )
    p.add_argument("--seed-fields", nargs="+", default=[], help="config fields that take each seed too")
    p.add_argument("--full-updates", type=int, default=None, help="a full run's updates (default: train.steps)")
    p.add_argument("--race-dir", type=Path, default=None, help="default: runs/race/<experiment_name>")
    p.add_argument("--compare", nargs="+", default=None, metavar="RUN", help="ESTIMATOR:SEED=PATH or PATH, paired")
    p.add_argument("--train-tag", default=None, help="--compare: the TensorBoard tag of the mean train reward")
    p.add_argument("--heldout-tag", default=None, help="--compare: the TensorBoard tag of held-out accuracy")
    return p


def parse_start(text: str) -> Path:
    """`RUN_DIR` or `RUN_DIR:STEP` -> the checkpoint folder (the newest without a step)."""
    from areal_adv.trainer.run.export import find_checkpoint

    run_dir, _, step = text.rpartition(":") if text.rpartition(":")[2].isdigit() else (text, "", "")
    return find_checkpoint(Path(run_dir), int(step) if step else None).resolve()


def build_spec(args: argparse.Namespace) -> tuple[RaceSpec, Path]:
    """The race the arguments declare, and its directory."""
    start = parse_start(args.start) if args.start else None
    config = args.config or (str(start.parent.parent / "config.yaml") if start else None)
    if config is None or not args.estimators:
        raise RaceError("areal-adv race: give CONFIG (or --from RUN_DIR) and --estimators, or --compare RUN ...")
    try:
        cfg = load_config(config, args.overrides)
    except ConfigError as exc:
        raise RaceError(f"CONFIG {config}: {exc}") from None
    start_step = int(start.name.removeprefix("step_")) if start else 0
    updates = args.updates or max(1, cfg.train.steps // 4)
    metric = args.metric if args.metric != "auto" else ("heldout" if cfg.eval.every is not None else "train_reward")
    spec = RaceSpec(
        config=str(Path(config).resolve()) if Path(config).exists() else config,
        estimators=tuple(args.estimators),
        baseline=args.baseline or args.estimators[0],
        seeds=parse_seeds(args.seeds),
        updates=updates,
        rungs=args.rungs,
        metric=metric,
        alpha=args.alpha,
        overrides=tuple(args.overrides),
        seed_fields=tuple(args.seed_fields),
        start=str(start) if start else None,
        full_updates=args.full_updates or max(cfg.train.steps - start_step, updates),
    )
    race_dir = args.race_dir or Path(cfg.output.dir) / "race" / cfg.experiment_name
    return spec, race_dir


def write_outputs(race_dir: Path, rows: Sequence[dict[str, Any]], text: str) -> None:
    """`race.jsonl` (replaced whole, atomically) and `race.md`."""
    race_dir.mkdir(parents=True, exist_ok=True)
    tmp = race_dir / "race.jsonl.tmp"
    tmp.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    os.replace(tmp, race_dir / "race.jsonl")
    (race_dir / "race.md").write_text(text, encoding="utf-8")


def race(args: argparse.Namespace) -> int:
    from areal_adv.trainer.race.race_plot import write_plot
    from areal_adv.trainer.race.race_runner import run_race
    from areal_adv.trainer.race.verdicts import report, rows

    spec, race_dir = build_spec(args)
    outcome = run_race(spec, race_dir, jobs=args.jobs)
    text = report(outcome.results, spec, outcome.cost)
    write_outputs(race_dir, rows(spec, outcome.rungs, outcome.results, outcome.cost), text)
    baseline = outcome.results[0].label
    write_plot(outcome.results, outcome.curves, spec.metric, baseline, spec.rung_ends(), race_dir / "race.png")
    print(text + f"\nwritten: {race_dir / 'race.jsonl'}, {race_dir / 'race.md'}, {race_dir / 'race.png'}")
    return 0


def compare(args: argparse.Namespace) -> int:
    from areal_adv.trainer.race.compare_runs import compare as judge
    from areal_adv.trainer.race.compare_runs import group, parse_run
    from areal_adv.trainer.race.race_plot import write_plot
    from areal_adv.trainer.race.verdicts import INTERVAL_NAME, cannot_tell, summary

    runs = [parse_run(text) for text in args.compare]
    curves = group(runs, args.train_tag, args.heldout_tag)
    baseline = args.baseline or runs[0].arm
    metric = "train_reward" if args.metric == "auto" else args.metric
    results, window = judge(curves, baseline, metric, args.updates)
    seeds = sorted({s for by_seed in curves.values() for s in by_seed})
    head = f"Comparison of {len(curves)} estimators against {baseline} over {window} updates, paired by seed ({INTERVAL_NAME})."
    text = summary(head, results, metric, baseline, [cannot_tell(window, len(seeds))])
    race_dir = args.race_dir or DEFAULT_RACE_ROOT / "compare"
    verdict_rows = [{"kind": "verdict", "arm": r.label, "baseline": baseline, "updates": r.window} for r in results]
    sources = [{"kind": "run", "arm": r.arm, "seed": r.seed, "path": str(r.path)} for r in runs]
    write_outputs(race_dir, [*sources, *_with_differences(verdict_rows, results, metric, baseline)], text)
    write_plot(results, curves, metric, baseline, [window], race_dir / "race.png")
    print(text + f"\nwritten: {race_dir / 'race.jsonl'}, {race_dir / 'race.md'}, {race_dir / 'race.png'}")
    return 0


def _with_differences(rows: list[dict[str, Any]], results: Sequence[Any], metric: str, baseline: str) -> list[dict]:
    from dataclasses import asdict

    from areal_adv.trainer.race.verdicts import words

    return [
        {**row, **(asdict(r.difference) if r.difference else {}), "words": words(r, baseline, metric)}
        for row, r in zip(rows, results)
    ]


def main(argv: Sequence[str]) -> int:
    """`areal-adv race ...`; exit 0 judged, 1 a one-line error, 130 interrupted (run it again to continue)."""
    from areal_adv.utils.checkpoint_folders import CheckpointError

    args = parser().parse_args(list(argv))
    if args.jobs < 1:
        print(f"error: --jobs: expected an integer >= 1, got {args.jobs}", file=sys.stderr)
        return 1
    try:
        return compare(args) if args.compare else race(args)
    except (RaceError, ConfigError, CheckpointError) as exc:
        print(f"error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted: run the same command again to continue the race", file=sys.stderr)
        return 130
