"""A PNG of the training curves (matplotlib, headless Agg backend).

RL curves are noisy step to step, so each metric is drawn twice: the raw
values as a faint line and a debiased exponential moving average over them
(TensorBoard's smoothing: `s_t = w*s_{t-1} + (1-w)*x_t`, divided by
`1 - w^n` so the start is not pulled towards 0). Every panel names its y axis;
KL and entropy, whose scales differ by orders of magnitude, get a panel each.
Panels whose metrics a run does not have (e.g. value loss under GRPO) are left
out, and so are panels with nothing to show: every metric flat (the response
length of a single-token task, whitened advantages); a note under the figure
gives their values. In a panel with two metrics the second is dashed; where reward and
success rate are the same number at every step (a 0/1 reward) one line is
drawn for both, so neither hides the other.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.figure import Figure

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


#: Line styles by position in a panel, so two metrics differ by more than colour.
_STYLES = ("-", "--", ":")


def _draw(
    ax: Any, steps: list[int], raw: list[float | None], label: str, color: str, style: str, smoothing: float
) -> None:
    ys = [math.nan if v is None else float(v) for v in raw]
    if smoothing > 0:
        ax.plot(steps, ys, color=color, alpha=0.25, linewidth=0.8, linestyle=style)
        ax.plot(steps, ema(raw, smoothing), color=color, linewidth=1.5, label=label, linestyle=style)
    else:
        ax.plot(steps, ys, color=color, linewidth=1.1, label=label, linestyle=style)


#: A series that moves less than this fraction of its panel's scale has nothing to show.
FLAT = 1e-4


def constant_value(values: Sequence[float | None], scale: float | None = None) -> float | None:
    """The level of a series that stays within `FLAT * scale` (None: it moves, or has no values).

    `scale` is the largest magnitude in the series' panel (default: in the series),
    so whitened advantages (mean 0 up to rounding, std 1 to four digits) count as
    flat while a KL rising from 0 to 1e-5 does not. A level within the tolerance
    of 0 is returned as 0.
    """
    present = [float(v) for v in values if v is not None and math.isfinite(v)]
    if not present:
        return None
    scale = max(abs(v) for v in present) if scale is None else scale
    tolerance = FLAT * scale
    if max(present) - min(present) > tolerance:
        return None
    level = sum(present) / len(present)
    return 0.0 if abs(level) <= tolerance else level


def _panel_lines(records: Sequence[dict[str, Any]], keys: Sequence[str]) -> list[tuple[str, list[str]]]:
    """(label, keys drawn by that line): metrics equal at every step share one line."""
    lines: list[tuple[str, list[str]]] = []
    for key in keys:
        series = _series(records, key)
        if not any(v is not None for v in series):
            continue
        for _, group in lines:
            if _series(records, group[0]) == series:
                group.append(key)
                break
        else:
            lines.append((key, [key]))
    return [(group[0] if len(group) == 1 else f"{group[0]} (= {', '.join(group[1:])})", group) for _, group in lines]


def plan_panels(
    records: Sequence[dict[str, Any]],
) -> tuple[list[tuple[str, str, list[tuple[str, list[str]]]]], dict[str, float]]:
    """(panels to draw as (title, y label, lines), the constant metrics left out with their values).

    The reward panel is always drawn; any other panel whose metrics are all constant is left out.
    """
    panels, constants = [], {}
    for index, (name, label, keys) in enumerate(PANELS):
        lines = _panel_lines(records, keys)
        if not lines:
            continue
        keys_drawn = [key for _, group in lines for key in group]
        scale = max(
            (abs(v) for key in keys_drawn for v in _series(records, key) if v is not None and math.isfinite(v)),
            default=0.0,
        )
        values = {key: constant_value(_series(records, key), scale) for key in keys_drawn}
        if index > 0 and all(v is not None for v in values.values()):
            constants.update(values)
            continue
        panels.append((name, label, lines))
    return panels, constants


def _pyplot() -> Any:
    """matplotlib's pyplot on the headless Agg backend, imported at the first plot.

    Importing it costs about 0.4 s of CPU, which a run with `output.plot: false`
    and every worker rank that never plots would otherwise pay at start.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def build_figure(records: Sequence[dict[str, Any]], title: str = "", smoothing: float = 0.9) -> Figure:
    """The figure: one panel per group of metrics present (and not constant) in `records`."""
    steps = [int(r["step"]) for r in records]
    panels, constants = plan_panels(records)
    rows = max(1, math.ceil(len(panels) / _COLUMNS))
    plt = _pyplot()
    fig, axes = plt.subplots(
        rows, _COLUMNS, figsize=(11, 3.1 * rows + (0.3 if constants else 0)), dpi=80, squeeze=False
    )
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, (name, label, lines) in zip(axes.flat, panels):
        for i, (line_label, keys) in enumerate(lines):
            _draw(
                ax,
                steps,
                _series(records, keys[0]),
                line_label,
                colors[i % len(colors)],
                _STYLES[i % len(_STYLES)],
                smoothing,
            )
        ax.set_title(name, fontsize=10)
        ax.set_ylabel(label, fontsize=9)
        ax.set_xlabel("step", fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    for ax in list(axes.flat)[len(panels) :]:
        ax.set_visible(False)
    if title:
        note = f" (EMA {smoothing:g} over raw)" if smoothing > 0 else ""
        fig.suptitle(title + note, fontsize=11)
    if constants:
        text = ", ".join(f"{k} = {v:.3g}" for k, v in constants.items())
        fig.text(0.01, 0.005, f"flat over the run, not drawn: {text}", fontsize=8, color="0.35")
    fig.tight_layout(rect=(0, 0.03 if constants else 0, 1, 1))
    return fig


def plot_curves(records: Sequence[dict[str, Any]], path: Path, title: str = "", smoothing: float = 0.9) -> Path:
    """Write `build_figure(records)` to a PNG at `path`."""
    fig = build_figure(records, title, smoothing)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    _pyplot().close(fig)
    return path
