"""A race's result in words, as a table and as `race.jsonl` rows, with its cost and what it cannot tell.

Every arm's verdict is its paired difference to the baseline (the user's
current estimator) on the window it was judged on: the last rung for arms that
finished, the rung it was dropped at for the others, with a 95 % paired
Student-t interval over seeds (`racing.paired_t_interval`). An interval above 0
reads "learns sooner", below 0 "learns later", across 0 "no difference this
budget can see", with the largest difference the interval still allows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from areal_adv.trainer.race.race_spec import METRIC_WORDS, RaceSpec
from areal_adv.trainer.race.racing import INTERVAL_NAME, PairedInterval, PairTest

TEST_NAME = (
    "racing with one-sided paired t-tests over all ordered pairs of the arms still racing, Holm-adjusted, "
    "alpha split equally over the eliminations; the baseline is never dropped"
)


@dataclass(frozen=True)
class ArmResult:
    """One arm's outcome: where it stopped, its per-seed values there, its difference to the baseline."""

    label: str
    status: str  # "baseline", "finished" or "dropped"
    window: int
    values: dict[int, float]
    difference: PairedInterval | None


@dataclass(frozen=True)
class Rung:
    """One rung: its end, every arm-seed value measured there, the tests after it and the arms dropped."""

    index: int
    end: int
    values: dict[str, dict[int, float]]
    tests: list[PairTest]
    dropped: list[str]


@dataclass(frozen=True)
class Cost:
    """Updates trained against the alternatives, and the seconds the arms' steps took."""

    trained: int
    without_dropping: int
    full: int | None
    step_seconds: float

    def line(self) -> str:
        full = (
            f"; {self.trained / self.full:.1%} of every arm and seed to the full run ({self.full})" if self.full else ""
        )
        return (
            f"compute: {self.trained} updates trained, {self.trained / self.without_dropping:.1%} of running every "
            f"arm and seed through the window ({self.without_dropping}){full}; {self.step_seconds:.0f} s of steps"
        )


def direction(d: PairedInterval) -> str:
    """`sooner`, `later` or `none`: which side of 0 the interval lies on (none without a spread to build it on)."""
    if not d.excludes_zero():
        return "none"
    return "sooner" if d.low > 0 else "later"


def words(arm: ArmResult, baseline: str, metric: str) -> str:
    """The verdict on one arm, in words, with its number, interval and window."""
    d = arm.difference
    if d is None:
        return f"{arm.label}: the baseline"
    what = f"{METRIC_WORDS[metric]} over {arm.window} updates"
    number = f"{d.mean:+.3f} [{d.low:+.3f}, {d.high:+.3f}] {what}"
    dropped = f" (dropped after {arm.window} updates)" if arm.status == "dropped" else ""
    if not d.spread:
        if d.mean == 0.0:
            return f"{arm.label} and {baseline} gave the same {METRIC_WORDS[metric]} on every seed{dropped}"
        return (
            f"{arm.label} vs {baseline}: the same difference, {d.mean:+.3f} {what}, on each of the {d.n} seeds; "
            f"no spread to build an interval on, so no call{dropped}"
        )
    if direction(d) == "sooner":
        return f"{arm.label} learns sooner than {baseline} here: {number}{dropped}"
    if direction(d) == "later":
        return f"{arm.label} learns later than {baseline} here: {number}{dropped}"
    return f"{arm.label} vs {baseline}: no difference this budget can see: ±{d.reach:.3f} ({number}){dropped}"


def cannot_tell(updates: int, seeds: int, from_checkpoint: bool = False) -> str:
    """What a race (or a comparison over the first `updates`) does not measure, said with every result."""
    start = (
        " From a checkpoint every arm starts with fresh optimiser moments and step count, so its window is not "
        "the continuation the run itself would have trained."
        if from_checkpoint
        else ""
    )
    return (
        f"What it cannot tell: it ranks learning over the first {updates} updates, not the final score (an "
        f"arm that starts slower can end level or higher). Each interval is one comparison over these {seeds} "
        "seeds of this config: with several arms, about one in twenty arms that do not differ shows a "
        f"difference by chance, and none of it carries to other tasks, models or lengths.{start}"
    )


def table(results: Sequence[ArmResult], metric: str, baseline: str) -> str:
    """Markdown: per arm its status, window, mean value and paired difference to the baseline."""
    head = (
        f"| arm | status | window (updates) | {METRIC_WORDS[metric]}: mean over seeds | "
        f"− {baseline} [{INTERVAL_NAME}] | verdict |"
    )
    lines = [head, "| --- | --- | --- | --- | --- | --- |"]
    for arm in results:
        d = arm.difference
        mean = sum(arm.values.values()) / len(arm.values)
        cell = "—" if d is None else f"{d.mean:+.3f} [{d.low:+.3f}, {d.high:+.3f}]"
        said = "—" if d is None else {"sooner": "sooner", "later": "later", "none": "no difference seen"}[direction(d)]
        lines.append(f"| {arm.label} | {arm.status} | {arm.window} | {mean:.3f} | {cell} | {said} |")
    return "\n".join(lines)


def report(results: Sequence[ArmResult], spec: RaceSpec, cost: Cost) -> str:
    """The text a race prints and writes to `race.md`: the table, a verdict per arm, the cost and the limits."""
    seeds = ", ".join(map(str, spec.seeds))
    head = (
        f"Race of {len(spec.estimators)} arms against {spec.baseline}, seeds {seeds}, {spec.updates} updates in "
        f"{spec.rungs} rungs ({', '.join(map(str, spec.rung_ends()))}); decision metric: {METRIC_WORDS[spec.metric]}; "
        f"elimination: {TEST_NAME} (alpha {spec.alpha})."
    )
    limits = cannot_tell(spec.updates, len(spec.seeds), spec.start is not None)
    return summary(head, results, spec.metric, spec.baseline, [cost.line(), limits])


def summary(head: str, results: Sequence[ArmResult], metric: str, baseline: str, tail: Sequence[str]) -> str:
    """A heading line, the table, one verdict per arm, then the closing paragraphs."""
    verdicts = "\n".join(f"- {words(arm, baseline, metric)}" for arm in results if arm.difference)
    return "\n\n".join([head, table(results, metric, baseline), verdicts, *tail]) + "\n"


def rows(spec: RaceSpec, rungs: Sequence[Rung], results: Sequence[ArmResult], cost: Cost) -> list[dict[str, Any]]:
    """`race.jsonl`: the declaration, every measured value, each rung's tests, the verdicts, the cost, the limits."""
    out: list[dict[str, Any]] = [
        {"kind": "race", **asdict(spec), "interval": INTERVAL_NAME, "test": TEST_NAME, "rung_ends": spec.rung_ends()}
    ]
    for rung in rungs:
        out += [
            {"kind": "value", "rung": rung.index, "updates": rung.end, "arm": arm, "seed": seed, "value": value}
            for arm, by_seed in rung.values.items()
            for seed, value in sorted(by_seed.items())
        ]
        tests = [asdict(t) for t in rung.tests]
        out.append({"kind": "rung", "rung": rung.index, "updates": rung.end, "tests": tests, "dropped": rung.dropped})
    for arm in results:
        d = asdict(arm.difference) if arm.difference else {}
        out.append(
            {"kind": "verdict", "arm": arm.label, "baseline": spec.baseline, "status": arm.status}
            | {"updates": arm.window, **d, "words": words(arm, spec.baseline, spec.metric)}
        )
    out.append({"kind": "compute", **asdict(cost)})
    out.append({"kind": "limits", "text": cannot_tell(spec.updates, len(spec.seeds), spec.start is not None)})
    return out
