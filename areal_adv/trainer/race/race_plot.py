"""`race.png`: each arm's decision metric as the window grows, and each arm's paired difference to the baseline.

Left: for every update u, the mean over seeds of the decision metric over the
window [0, u) (the mean train reward so far), or of the held-out accuracy at
each evaluation; an arm's line ends where it was dropped; dashed lines mark the
rungs. Right: each arm's difference to the baseline with its 95 % paired
Student-t interval, on the window it was judged on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from areal_adv.trainer.race.race_spec import METRIC_WORDS
from areal_adv.trainer.race.racing import INTERVAL_NAME
from areal_adv.trainer.race.series import Series
from areal_adv.trainer.race.verdicts import ArmResult

Curves = Mapping[str, Mapping[int, Series]]  # {arm: {seed: its curves}}


def _curve(curves: Curves, label: str, metric: str, end: int) -> tuple[list[int], list[float]]:
    """(x, mean over seeds of y) of one arm up to update `end` (train steps counted from the run's first)."""
    runs = list(curves[label].values())
    if metric == "train_reward":
        steps = [sorted(run.train)[:end] for run in runs]
        xs = list(range(1, end + 1))
        ys = [np.mean([np.mean([run.train[s] for s in own[:x]]) for run, own in zip(runs, steps)]) for x in xs]
        return xs, [float(y) for y in ys]
    points = sorted(set.intersection(*(set(u for u in run.heldout if u <= end) for run in runs)))
    return points, [float(np.mean([run.heldout[u] for run in runs])) for u in points]


def write_plot(
    results: Sequence[ArmResult], curves: Curves, metric: str, baseline: str, rung_ends: Sequence[int], path: Path
) -> None:
    """Draw a race's (or a comparison's) curves and differences into `path`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for arm in results:
        xs, ys = _curve(curves, arm.label, metric, arm.window)
        style: dict[str, Any] = {"lw": 2.2, "color": "black"} if arm.status == "baseline" else {"lw": 1.3}
        left.plot(xs, ys, label=f"{arm.label} ({arm.status})", **style)
    for end in rung_ends:
        left.axvline(end, color="grey", ls="--", lw=0.8)
    left.set_xlabel("updates (window end)" if metric == "train_reward" else "updates")
    left.set_ylabel(METRIC_WORDS[metric] + ", mean over seeds")
    left.legend(fontsize=7)
    _differences(right, [a for a in results if a.difference is not None], baseline)
    seeds = sorted({s for arm in curves.values() for s in arm})
    fig.suptitle(f"against {baseline}: seeds {', '.join(map(str, seeds))}", fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90, metadata={"Software": None})
    plt.close(fig)


def _differences(ax: Any, arms: list[ArmResult], baseline: str) -> None:
    ys = np.arange(len(arms))
    for y, arm in zip(ys, arms):
        d = arm.difference
        if d is not None:
            ax.errorbar(d.mean, y, xerr=[[d.mean - d.low], [d.high - d.mean]], fmt="o", capsize=3)
    ax.axvline(0.0, color="black", lw=0.8)
    ax.set_yticks(ys, [f"{a.label} ({a.window} upd.)" for a in arms])
    ax.set_xlabel(f"difference to {baseline} [{INTERVAL_NAME}]")
