"""A run's learning curves, as a race reads them: train reward per step, held-out accuracy per evaluation.

From our run directories (`metrics.jsonl`), and from TensorBoard event files
(read with the tensorboard package) written by our trainer, verl's `Tracking`,
TRL (transformers' TensorBoard callback) or AReaL's `StatsLogger`. Each engine
names its metrics differently (`ENGINES`); `--train-tag` and `--heldout-tag`
name others.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from areal_adv.trainer.race.race_spec import RaceError

EVENT_FILE = "events.out.tfevents."


@dataclass(frozen=True)
class Tags:
    """An engine's scalar tags: the batch's mean train reward, and held-out accuracy (tags, or a prefix+suffix)."""

    train: tuple[str, ...]
    heldout: tuple[str, ...] = ()
    heldout_pattern: tuple[str, str] | None = None  # (prefix, fragment): verl's val-core/<source>/<var>/mean@N


#: The tags each engine's logger writes (the first present wins).
ENGINES: dict[str, Tags] = {
    "areal-adv": Tags(train=("reward_mean",), heldout=("eval/accuracy",)),
    "verl": Tags(train=("critic/score/mean",), heldout_pattern=("val-core/", "/mean@")),
    "trl": Tags(train=("train/reward",), heldout=("eval/reward",)),
    "areal": Tags(train=("rollout/reward", "ppo_actor/task_reward/avg"), heldout=("eval-rollout/reward",)),
}


@dataclass(frozen=True)
class Series:
    """One run: `train` {step: mean train reward}, `heldout` {updates: held-out accuracy}, where they came from."""

    source: str
    train: dict[int, float]
    heldout: dict[int, float]
    engine: str = "areal-adv"


def area(updates: Sequence[float], values: Sequence[float]) -> float:
    """A curve's trapezoid area divided by its length in updates: its mean height (higher: learned sooner)."""
    if len(updates) != len(values) or len(updates) < 2:
        raise ValueError(
            f"area: need >= 2 points with one value each, got {len(updates)} updates, {len(values)} values"
        )
    x, y = np.asarray(updates, dtype=float), np.asarray(values, dtype=float)
    if np.any(np.diff(x) <= 0):
        raise ValueError(f"area: updates must increase, got {list(updates)}")
    return float(np.sum((y[1:] + y[:-1]) / 2 * np.diff(x)) / (x[-1] - x[0]))


def from_run_dir(run_dir: Path) -> Series:
    """Our run directory's `metrics.jsonl`: `reward_mean` per step, `eval/accuracy` at each `eval/updates`."""
    from areal_adv.trainer.run.run_dir import complete_rows

    rows = complete_rows(run_dir / "metrics.jsonl")
    train = {int(r["step"]): float(r["reward_mean"]) for r in rows if r.get("reward_mean") is not None}
    heldout: dict[int, float] = {}
    for row in rows:
        if row.get("eval/updates") is not None and row.get("eval/accuracy") is not None:
            heldout.setdefault(int(row["eval/updates"]), float(row["eval/accuracy"]))
    return Series(str(run_dir), train, heldout)


def event_folder(path: Path) -> Path:
    """The one folder at or below `path` holding TensorBoard event files; an error naming them if several or none."""
    found = sorted({p.parent for p in path.rglob(f"{EVENT_FILE}*")}) if path.is_dir() else []
    if path.is_file() and path.name.startswith(EVENT_FILE):
        return path.parent
    if len(found) == 1:
        return found[0]
    if not found:
        raise RaceError(f"--compare: {path} holds neither metrics.jsonl nor TensorBoard event files ({EVENT_FILE}*)")
    shown = ", ".join(str(p) for p in found[:4])
    raise RaceError(f"--compare: {path} holds event files in {len(found)} folders ({shown}); name one of them")


def _scalars(folder: Path) -> dict[str, dict[int, float]]:
    """{tag: {step: value}} of every scalar in the folder's event files (a later value of a step wins)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    out: dict[str, dict[int, float]] = {}
    for tag in acc.Tags().get("scalars", []):
        out[tag] = {int(e.step): float(e.value) for e in acc.Scalars(tag)}
    return out


def _pick(tags: dict[str, dict[int, float]], wanted: Sequence[str]) -> str | None:
    return next((t for t in wanted if t in tags), None)


def from_event_files(path: Path, train_tag: str | None = None, heldout_tag: str | None = None) -> Series:
    """A run's curves from its TensorBoard event files; the engine is told by the tags it wrote."""
    folder = event_folder(path)
    tags = _scalars(folder)
    engine = next((name for name, t in ENGINES.items() if _pick(tags, t.train)), None)
    train = train_tag or (_pick(tags, ENGINES[engine].train) if engine else None)
    if train is None or train not in tags:
        known = "; ".join(f"{name}: {', '.join(t.train)}" for name, t in ENGINES.items())
        looked = f"--train-tag {train_tag!r}" if train_tag else known
        raise RaceError(
            f"--compare: {folder} has no train-reward tag (looked for {looked}); name it with --train-tag "
            f"(its tags: {', '.join(sorted(tags)[:12])})"
        )
    heldout = heldout_tag or (_heldout_tag(tags, ENGINES[engine], folder) if engine else None)
    points = tags.get(heldout, {}) if heldout else {}
    if engine == "areal-adv" and "eval/updates" in tags:  # the row's step is before or after its update
        points = {int(tags["eval/updates"][s]): v for s, v in points.items() if s in tags["eval/updates"]}
    return Series(str(folder), tags[train], dict(points), engine or "named by --train-tag")


def _heldout_tag(tags: dict[str, dict[int, float]], spec: Tags, folder: Path) -> str | None:
    if spec.heldout_pattern is None:
        return _pick(tags, spec.heldout)
    prefix, fragment = spec.heldout_pattern
    found = sorted(t for t in tags if t.startswith(prefix) and fragment in t)
    if len(found) > 1:
        raise RaceError(
            f"--compare: {folder} has {len(found)} held-out tags ({', '.join(found)}); pick one with --heldout-tag"
        )
    return found[0] if found else None


def read_series(path: Path, train_tag: str | None = None, heldout_tag: str | None = None) -> Series:
    """Our run directory (its `metrics.jsonl`) when it is one and no tag is named, else its event files."""
    if (path / "metrics.jsonl").is_file() and train_tag is None and heldout_tag is None:
        return from_run_dir(path)
    return from_event_files(path, train_tag, heldout_tag)


def window_value(series: Series, metric: str, steps: Sequence[int], end: int) -> float:
    """The decision metric over a window: the mean train reward of `steps`, or the held-out area over [.., end]."""
    if metric == "train_reward":
        missing = [s for s in steps if s not in series.train]
        if missing:
            raise RaceError(f"{series.source}: no train reward at steps {missing[:6]} of the window")
        return float(np.mean([series.train[s] for s in steps]))
    points = sorted((u, v) for u, v in series.heldout.items() if u <= end)
    if len(points) < 2:
        raise RaceError(
            f"{series.source}: {len(points)} held-out evaluations within the first {end} updates; the held-out "
            "metric needs at least 2 (set eval.every, or use --metric train_reward)"
        )
    return area([u for u, _ in points], [v for _, v in points])
