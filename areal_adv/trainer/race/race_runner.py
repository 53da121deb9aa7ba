"""A race from start to verdict: arms trained rung by rung, the worse dropped between rungs, then judged.

Every decision is a function of the arms' metrics files, so running the same
command again after an interruption recomputes the same drops and trains only
what is missing.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from areal_adv.trainer.race.arm_runs import advance, plan_launch, updates_done
from areal_adv.trainer.race.arms import Arm, arm_label, write_arm_configs
from areal_adv.trainer.race.race_spec import RaceSpec, write_or_check
from areal_adv.trainer.race.racing import eliminated, paired_difference, rung_tests
from areal_adv.trainer.race.series import Series, from_run_dir, window_value
from areal_adv.trainer.race.verdicts import ArmResult, Cost, Rung


@dataclass(frozen=True)
class RaceOutcome:
    """What a race measured: its rungs, each arm's result, the cost, and the arms' curves (for the plot)."""

    spec: RaceSpec
    rungs: list[Rung]
    results: list[ArmResult]
    cost: Cost
    curves: dict[str, dict[int, Series]]


def measure(arms: list[Arm], race_dir: Path, spec: RaceSpec, end: int) -> dict[str, dict[int, float]]:
    """Each arm's decision metric per seed over updates [0, end)."""
    return {
        arm.label: {
            seed: window_value(from_run_dir(arm.run_dir(race_dir, seed)), spec.metric, range(end), end)
            for seed in spec.seeds
        }
        for arm in arms
    }


def run_race(spec: RaceSpec, race_dir: Path, jobs: int = 1, report: bool = True) -> RaceOutcome:
    """Train (or continue) the race in `race_dir` and judge it."""
    write_or_check(spec, race_dir)
    arms = write_arm_configs(spec, race_dir)
    baseline = arm_label(spec.baseline)
    racing, rungs = list(arms), []
    ends = spec.rung_ends()
    for index, end in enumerate(ends, 1):
        launches = [plan_launch(a, race_dir, s, end, spec.seed_fields) for s in spec.seeds for a in racing]
        advance(launches, jobs, report)
        values = measure(racing, race_dir, spec, end)
        tests = rung_tests(values, spec.look_alpha) if index < len(ends) else []
        dropped = eliminated(tests, baseline)
        rungs.append(Rung(index, end, values, tests, dropped))
        racing = [a for a in racing if a.label not in dropped]
    results = judge(arms, rungs, baseline)
    curves = {a.label: {s: from_run_dir(a.run_dir(race_dir, s)) for s in spec.seeds} for a in arms}
    return RaceOutcome(spec, rungs, results, cost_of(spec, arms, results, race_dir), curves)


def judge(arms: list[Arm], rungs: list[Rung], baseline: str) -> list[ArmResult]:
    """Each arm against the baseline on the last rung it ran: the baseline first, then in the race's order."""
    results = []
    for arm in sorted(arms, key=lambda a: a.label != baseline):
        rung = next(r for r in reversed(rungs) if arm.label in r.values)
        status = "baseline" if arm.label == baseline else "dropped" if rung is not rungs[-1] else "finished"
        values = rung.values[arm.label]
        difference = None if arm.label == baseline else paired_difference(values, rung.values[baseline])
        results.append(ArmResult(arm.label, status, rung.end, values, difference))
    return results


def cost_of(spec: RaceSpec, arms: list[Arm], results: list[ArmResult], race_dir: Path) -> Cost:
    """Updates the race trained (each arm up to its last rung) against every arm and seed to the end or in full."""
    from areal_adv.trainer.run.run_dir import complete_rows

    ends = {r.label: r.window for r in results}
    trained, seconds = 0, 0.0
    for arm in arms:
        for seed in spec.seeds:
            run_dir = arm.run_dir(race_dir, seed)
            trained += min(updates_done(run_dir), ends[arm.label])
            rows = complete_rows(run_dir / "metrics.jsonl")[: ends[arm.label]]
            seconds += sum(float(r.get("time/step") or 0.0) for r in rows)
    n = len(arms) * len(spec.seeds)
    full = n * spec.full_updates if spec.full_updates else None
    return Cost(trained, n * spec.updates, full, seconds)
