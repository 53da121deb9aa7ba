"""`areal-adv race --compare RUN ...`: a race's verdict from runs made elsewhere, paired by seed and step.

A RUN is `ARM:SEED=PATH`, or a PATH whose arm and seed can be read: our run
directory (its `config.yaml` names `experiment_name` and `seed`), or a path
ending in `<arm>/seed<N>` (how a race lays its arms out). PATH is our run
directory or a folder of TensorBoard event files (`series`). Runs are paired by
seed (every arm needs at least 2 seeds in common with the baseline) and by step
(the window is the first N steps that every run logged; a run missing one of
them cannot be paired, and the error names it).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from areal_adv.trainer.race.race_spec import RaceError
from areal_adv.trainer.race.racing import paired_difference
from areal_adv.trainer.race.series import Series, read_series, window_value
from areal_adv.trainer.race.verdicts import ArmResult

_NAMED = re.compile(r"^(?P<arm>[^:=/]+):(?P<seed>\d+)=(?P<path>.+)$")
_SEED_DIR = re.compile(r"^seed(\d+)$")


@dataclass(frozen=True)
class NamedRun:
    """One run of a comparison: its arm, seed and where its metrics are."""

    arm: str
    seed: int
    path: Path


def _from_config(path: Path) -> tuple[str, int] | None:
    import yaml

    config = path / "config.yaml"
    if not config.is_file():
        return None
    data = yaml.safe_load(config.read_text(encoding="utf-8")) or {}
    if isinstance(data.get("experiment_name"), str) and isinstance(data.get("seed"), int):
        return data["experiment_name"], data["seed"]
    return None


def _from_layout(path: Path) -> tuple[str, int] | None:
    parts = path.resolve().parts
    for i in range(len(parts) - 1, 0, -1):
        match = _SEED_DIR.match(parts[i])
        if match:
            return parts[i - 1], int(match.group(1))
    return None


def parse_run(text: str) -> NamedRun:
    """`ARM:SEED=PATH`, or PATH with its arm and seed read from its config or its `<arm>/seed<N>` folders."""
    match = _NAMED.match(text)
    if match:
        return NamedRun(match.group("arm"), int(match.group("seed")), Path(match.group("path")))
    path = Path(text)
    if not path.exists():
        raise RaceError(f"--compare: {path} does not exist")
    found = _from_config(path) or _from_layout(path)
    if found is None:
        raise RaceError(
            f"--compare: cannot tell the estimator and seed of {path} (no config.yaml with experiment_name and "
            "seed, and no <estimator>/seed<N> folders in its path); name them as ESTIMATOR:SEED=PATH"
        )
    return NamedRun(found[0], found[1], path)


def group(runs: Sequence[NamedRun], train_tag: str | None, heldout_tag: str | None) -> dict[str, dict[int, Series]]:
    """{arm: {seed: series}} in the order the arms were first named; a repeated (arm, seed) is an error."""
    out: dict[str, dict[int, Series]] = {}
    for run in runs:
        seeds = out.setdefault(run.arm, {})
        if run.seed in seeds:
            raise RaceError(
                f"--compare: {run.arm} seed {run.seed} is given twice ({seeds[run.seed].source} and {run.path})"
            )
        seeds[run.seed] = read_series(run.path, train_tag, heldout_tag)
    return out


def check_pairable(curves: dict[str, dict[int, Series]], baseline: str) -> None:
    """Every arm shares at least 2 seeds with the baseline; an error naming the seeds each has otherwise."""
    if baseline not in curves:
        raise RaceError(f"--baseline: no run of {baseline!r} among --compare's arms {list(curves)}")
    if len(curves) < 2:
        raise RaceError(f"--compare: runs of one arm only ({baseline}); name runs of at least two estimators")
    for arm, seeds in curves.items():
        if arm == baseline:
            continue
        common = sorted(set(seeds) & set(curves[baseline]))
        if len(common) < 2:
            raise RaceError(
                f"--compare: {arm} and {baseline} cannot be paired by seed: {arm} has seeds {sorted(seeds)}, "
                f"{baseline} has {sorted(curves[baseline])} (at least 2 shared seeds needed)"
            )


def window_steps(curves: dict[str, dict[int, Series]], updates: int | None) -> list[int]:
    """The first `updates` train steps every run logged (all shared steps without `updates`)."""
    runs = [s for seeds in curves.values() for s in seeds.values()]
    shared = sorted(set.intersection(*(set(r.train) for r in runs)))
    wanted = updates if updates is not None else len(shared)
    if wanted < 1 or len(shared) < wanted:
        spans = "; ".join(f"{r.source}: steps {min(r.train, default='-')}..{max(r.train, default='-')}" for r in runs)
        raise RaceError(
            f"--compare: the runs share {len(shared)} logged steps, fewer than the window of {wanted}; they "
            f"cannot be paired by step ({spans})"
        )
    first = shared[:wanted]
    for run in runs:  # steps inside the window that only some runs logged: those runs cannot be paired step by step
        extra = [s for s in run.train if first[0] <= s <= first[-1] and s not in first]
        if extra:
            raise RaceError(
                f"--compare: {run.source} logs steps {sorted(extra)[:6]} inside the window that another run lacks; "
                "runs are paired step by step, so compare runs that log the same steps"
            )
    return first


def compare(
    curves: dict[str, dict[int, Series]], baseline: str, metric: str, updates: int | None
) -> tuple[list[ArmResult], int]:
    """Each arm against the baseline over the shared window: (results, the window's length in updates)."""
    check_pairable(curves, baseline)
    if metric == "train_reward":
        steps = window_steps(curves, updates)
        end = len(steps)
    else:
        steps, curves = [], _shared_evaluations(curves)
        end = updates or max(next(iter(next(iter(curves.values())).values())).heldout)
    values = {
        arm: {s: window_value(run, metric, steps, end) for s, run in seeds.items()} for arm, seeds in curves.items()
    }
    results = []
    for arm in sorted(curves, key=lambda a: a != baseline):
        difference = None if arm == baseline else paired_difference(values[arm], values[baseline])
        status = "baseline" if arm == baseline else "finished"
        results.append(ArmResult(arm, status, end, values[arm], difference))
    return results, end


def _shared_evaluations(curves: dict[str, dict[int, Series]]) -> dict[str, dict[int, Series]]:
    """The curves with only the held-out evaluations every run has (so areas are over the same points)."""
    runs = [s for seeds in curves.values() for s in seeds.values()]
    shared = set.intersection(*(set(r.heldout) for r in runs))
    if len(shared) < 2:
        raise RaceError(
            "--compare: the runs share fewer than 2 held-out evaluations (same steps); use --metric train_reward"
        )
    return {
        arm: {
            s: replace(run, heldout={u: v for u, v in run.heldout.items() if u in shared}) for s, run in seeds.items()
        }
        for arm, seeds in curves.items()
    }
