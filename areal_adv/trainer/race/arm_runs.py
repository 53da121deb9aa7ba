"""Training race arms to a rung, through the trainer's own entry point, one process or `--jobs` at a time.

Each launch is `python -m areal_adv.trainer.main --config configs/<arm>.yaml
seed=<s> trial_name=seed<s> train.steps=<rung> train.resume=auto`: the first
launch starts the run, every later one continues it from its newest checkpoint
(the trainer restores it exactly), so an interrupted race, or a killed arm,
goes on where it stopped. Its output goes to `logs/<arm>-seed<s>.log`.
With one job the launches run in this process, one after another (the trainer
seeds everything it uses when it is built); with J jobs, in J worker processes.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path

from areal_adv.trainer.race.arms import Arm
from areal_adv.trainer.race.race_spec import RaceError

#: The trainer's exit status after Ctrl-C (its outputs kept).
INTERRUPTED = 130


@dataclass(frozen=True)
class Launch:
    """One arm and seed trained up to update `until`."""

    arm: Arm
    seed: int
    until: int
    run_dir: Path
    log: Path
    argv: tuple[str, ...]


def plan_launch(arm: Arm, race_dir: Path, seed: int, until: int, seed_fields: Sequence[str]) -> Launch:
    """The trainer's arguments for arm `arm`, seed `seed`, up to update `until`."""
    argv = (
        "--config",
        str(arm.config),
        f"seed={seed}",
        f"trial_name=seed{seed}",
        f"train.steps={until}",
        "train.resume=auto",
        *(f"{name}={seed}" for name in seed_fields),
    )
    return Launch(arm, seed, until, arm.run_dir(race_dir, seed), arm.log(race_dir, seed), argv)


def updates_done(run_dir: Path) -> int:
    """The updates a run has logged (complete rows of its `metrics.jsonl`; 0 before its first)."""
    from areal_adv.trainer.run.run_dir import complete_rows

    path = run_dir / "metrics.jsonl"
    return len(complete_rows(path)) if path.is_file() else 0


def run_launch(argv: Sequence[str], log: Path) -> int:
    """Run the trainer's entry point with `argv`, its output appended to `log`; its exit status."""
    from areal_adv.trainer.main import main

    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a", encoding="utf-8") as fh, redirect_stdout(fh), redirect_stderr(fh):
        print(f"[areal-adv race] {time.strftime('%Y-%m-%d %H:%M:%S')}: train {' '.join(argv)}", flush=True)
        try:
            return main(list(argv))
        except SystemExit as exc:  # argparse inside the entry point
            return int(exc.code or 0)


def _worker_init() -> None:
    from areal_adv.trainer.parallel.launch_env import prefer_passive_waiting

    prefer_passive_waiting()


def _last_line(log: Path) -> str:
    lines = [line for line in log.read_text(encoding="utf-8", errors="replace").splitlines() if line.strip()]
    return lines[-1].strip() if lines else "(empty log)"


def _check(launch: Launch, status: int) -> None:
    if status == INTERRUPTED:
        raise KeyboardInterrupt
    if status != 0:
        raise RaceError(
            f"arm {launch.arm.label}, seed {launch.seed}: the trainer exited with status {status} "
            f"({_last_line(launch.log)}); its log is {launch.log}"
        )


def advance(launches: Sequence[Launch], jobs: int, report: bool = True) -> None:
    """Run every launch whose run has fewer than `until` updates; the first failure ends the race (named)."""
    todo = [launch for launch in launches if updates_done(launch.run_dir) < launch.until]
    if not todo:
        return
    if jobs <= 1:
        for launch in todo:
            _say(launch, report)
            _check(launch, run_launch(launch.argv, launch.log))
        return
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(min(jobs, len(todo)), mp_context=context, initializer=_worker_init) as pool:
        futures = {pool.submit(run_launch, launch.argv, launch.log): launch for launch in todo}
        for launch in todo:
            _say(launch, report)
        for future in as_completed(futures):
            _check(futures[future], future.result())


def _say(launch: Launch, report: bool) -> None:
    if report:
        print(
            f"[areal-adv race] {launch.arm.label} seed {launch.seed}: to update {launch.until} (log {launch.log})",
            file=sys.stderr,
            flush=True,
        )
