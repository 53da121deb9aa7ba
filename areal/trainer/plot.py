"""A PNG of the training curves (matplotlib, headless Agg backend)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

_PANELS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("reward", ("reward_mean", "success_rate")),
    ("advantage", ("adv_mean", "adv_std")),
    ("KL / entropy", ("kl", "entropy")),
    ("loss", ("policy_loss", "value_loss")),
)


def plot_curves(records: Sequence[dict[str, Any]], path: Path, title: str = "") -> Path:
    """Write a 2×2 grid of per-step curves; missing metrics are simply skipped."""
    fig, axes = plt.subplots(2, 2, figsize=(8, 5.5), dpi=80, sharex=True)
    steps = [r["step"] for r in records]
    for ax, (name, keys) in zip(axes.flat, _PANELS):
        for key, style in zip(keys, ("-", "--")):
            ys = [r.get(key) for r in records]
            if any(y is not None for y in ys):
                ax.plot(steps, [float("nan") if y is None else y for y in ys], style, label=key, linewidth=1.1)
        ax.set_title(name, fontsize=10)
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=8)
    for ax in axes[1]:
        ax.set_xlabel("step")
    if title:
        fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
