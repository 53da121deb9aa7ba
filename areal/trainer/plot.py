"""A PNG of the training curves (matplotlib, headless Agg backend).

RL curves are noisy step to step, so each metric is drawn twice: the raw
values as a faint line and a debiased exponential moving average over them
(TensorBoard's smoothing: `s_t = w*s_{t-1} + (1-w)*x_t`, divided by
`1 - w^n` so the start is not pulled towards 0). Every panel names its y axis;
KL and entropy, whose scales differ by orders of magnitude, get a panel each.
Panels whose metrics a run does not have (e.g. value loss under GRPO) are left out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

#: (title, y-axis label, metrics) per panel.
PANELS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("reward", "mean reward / success rate", ("reward_mean", "success_rate")),
    ("advantage", "advantage (generated tokens)", ("adv_mean", "adv_std")),
    ("KL to the reference", "KL (nats / token)", ("kl",)),
    ("entropy", "entropy (nats / token)", ("entropy",)),
    ("policy loss", "clipped PPO loss", ("policy_loss",)),
    ("value loss", "clipped value loss", ("value_loss",)),
    ("response length", "generated tokens / episode", ("response_tokens",)),
)
_COLUMNS = 3


def ema(values: Sequence[float | None], weight: float) -> list[float]:
    """Debiased EMA of `values`; missing or non-finite values are skipped (NaN in the output).

    A plain loop over the steps of one run: a few thousand points, once per
    plot, and matplotlib (the only plotting dependency) has no smoothing.
    """
    if not 0.0 <= weight < 1.0:
        raise ValueError(f"ema: weight={weight!r}, expected a number in [0, 1)")
    out: list[float] = []
    acc = norm = 0.0
    for value in values:
        if value is None or not math.isfinite(value):
            out.append(math.nan)
            continue
        acc = weight * acc + (1.0 - weight) * value
        norm = weight * norm + (1.0 - weight)
        out.append(acc / norm)
    return out


def _series(records: Sequence[dict[str, Any]], key: str) -> list[float | None]:
    return [r.get(key) if isinstance(r.get(key), (int, float)) else None for r in records]


def _draw(ax: Any, steps: list[int], raw: list[float | None], key: str, color: str, smoothing: float) -> None:
    ys = [math.nan if v is None else float(v) for v in raw]
    if smoothing > 0:
        ax.plot(steps, ys, color=color, alpha=0.25, linewidth=0.8)
        ax.plot(steps, ema(raw, smoothing), color=color, linewidth=1.5, label=key)
    else:
        ax.plot(steps, ys, color=color, linewidth=1.1, label=key)


def build_figure(records: Sequence[dict[str, Any]], title: str = "", smoothing: float = 0.9) -> Figure:
    """The figure: one panel per group of metrics present in `records`."""
    steps = [int(r["step"]) for r in records]
    panels = [(name, label, [k for k in keys if any(v is not None for v in _series(records, k))])
              for name, label, keys in PANELS]
    panels = [p for p in panels if p[2]]
    rows = max(1, math.ceil(len(panels) / _COLUMNS))
    fig, axes = plt.subplots(rows, _COLUMNS, figsize=(11, 3.1 * rows), dpi=80, squeeze=False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, (name, label, keys) in zip(axes.flat, panels):
        for i, key in enumerate(keys):
            _draw(ax, steps, _series(records, key), key, colors[i % len(colors)], smoothing)
        ax.set_title(name, fontsize=10)
        ax.set_ylabel(label, fontsize=9)
        ax.set_xlabel("step", fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    if title:
        note = f" (EMA {smoothing:g} over raw)" if smoothing > 0 else ""
        fig.suptitle(title + note, fontsize=11)
    fig.tight_layout()
    return fig


def plot_curves(records: Sequence[dict[str, Any]], path: Path, title: str = "", smoothing: float = 0.9) -> Path:
    """Write `build_figure(records)` to a PNG at `path`."""
    fig = build_figure(records, title, smoothing)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
