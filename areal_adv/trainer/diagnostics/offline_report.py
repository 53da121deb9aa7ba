"""What `areal-adv diagnose` prints: the summary, the per-step table and the lines on what was left out.

Plain text from the rows `offline.diagnose_rows` returns (one per saved step and
estimator: `step`, `estimator`, `checkpoint_step`, `stale_weights` and the metrics), so
a test reads the same words a user does. Torch-free: the command imports it before it
parses its arguments.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from areal_adv.trainer.diagnostics.metric_names import GRADIENT_METRICS, METRICS

__all__ = ["EVIDENCE", "no_recommendation_note", "step_ranges", "summary", "table", "weights_note", "weights_title"]

#: Where the evidence on recommending an estimator from diagnostics is written down.
EVIDENCE = 'docs/benchmarks.md, "Can a diagnostic choose the estimator?"'
#: How the lines name the gradient metrics.
_GRADIENTS = ", ".join(GRADIENT_METRICS)


def step_ranges(steps: Sequence[int]) -> str:
    """Steps as runs of consecutive numbers: [0, 1, 2, 5, 7, 8] -> '0-2, 5, 7-8' (30 steps in a few characters)."""
    parts: list[str] = []
    ordered = sorted(set(steps))
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ", ".join(parts)


def weights_note(used: Mapping[int, int | None], checkpoints: Sequence[int], weights: str) -> str | None:
    """One line on the weights of the gradient metrics, when any step is not at the weights that sampled it.

    `used` maps each measured step to the step of the checkpoint its gradients came from (None: none).
    """
    empty = [s for s, c in used.items() if c is None]
    stale = [s for s, c in used.items() if c is not None and c != s]
    have = "no checkpoints"
    if checkpoints:
        have = f"checkpoint{'s' if len(checkpoints) > 1 else ''} at step{'s' if len(checkpoints) > 1 else ''} "
        have += step_ranges(checkpoints)
    if empty and weights == "sampled":
        return (
            f"{_GRADIENTS}: empty at {len(empty)} of {len(used)} steps ({step_ranges(empty)}), "
            f"whose sampling weights no checkpoint holds ({have}; checkpoints/step_N holds step N's); "
            "--weights nearest measures them at the nearest checkpoint's weights, marked stale"
        )
    if empty:
        return f"{_GRADIENTS}: not measured, the run has {have} (train.save_every=N keeps some)"
    if stale:
        return (
            f"{_GRADIENTS}: at {len(stale)} of {len(used)} steps ({step_ranges(stale)}) from the nearest "
            "checkpoint's weights, not those that sampled the batch (stale_weights in the rows, hollow in the plot)"
        )
    return None


def weights_title(rows: Sequence[Mapping[str, Any]]) -> str:
    """What the figure says about the weights of its gradient panels: filled points exact, hollow ones stale."""
    steps = {r["step"]: r.get("checkpoint_step") for r in rows}
    exact = [s for s, c in steps.items() if c == s]
    stale = [s for s, c in steps.items() if c is not None and c != s]
    head = _GRADIENTS
    if not exact and not stale:
        return f"{head}: not measured (no checkpoint holds the weights that sampled a saved step)"
    parts = [f"at the weights that sampled the batch (steps {step_ranges(exact)})"] if exact else []
    if stale:
        parts.append(f"hollow: at a nearest checkpoint's weights, not the sampling ones (steps {step_ranges(stale)})")
    return f"{head}: " + "; ".join(parts)


def _fmt(value: Any) -> str:
    """A cell: a float to 4 significant digits (`n/a` when not finite), `-` for an empty one."""
    if isinstance(value, float):
        return "n/a" if not math.isfinite(value) else f"{value:.4g}"
    return "-" if value is None else str(value)


def _columns(header: Sequence[str], body: Sequence[Sequence[str]]) -> str:
    """Left-aligned columns, each as wide as its widest cell."""
    widths = [max(len(x) for x in col) for col in zip(header, *body)]
    return "\n".join("  ".join(x.ljust(w) for x, w in zip(line, widths)).rstrip() for line in [header, *body])


def table(rows: Sequence[Mapping[str, Any]]) -> str:
    """The rows as a plain text table: step, estimator, the checkpoint its gradients used and the six metrics.

    A stale checkpoint (not the step's own) is marked `*`; `-` is a cell left empty.
    """
    header = ["step", "estimator", "ckpt", *METRICS]
    body = []
    for r in rows:
        ckpt = _fmt(r.get("checkpoint_step")) + ("*" if r.get("stale_weights") else "")
        body.append([_fmt(r.get("step")), str(r["estimator"]), ckpt, *(_fmt(r.get(m)) for m in METRICS)])
    return _columns(header, body)


def _mean(rows: Sequence[Mapping[str, Any]], metric: str) -> str:
    """The mean of `metric` over the rows that have a finite value, or `-`."""
    values = [float(r[metric]) for r in rows if r.get(metric) is not None and math.isfinite(float(r[metric]))]
    return _fmt(sum(values) / len(values)) if values else "-"


def summary(rows: Sequence[Mapping[str, Any]]) -> str:
    """Per estimator, the mean of each metric over the steps that have it: a few lines before anything else.

    The first line says over how many steps, and how many of the gradient metrics' steps used stale weights.
    """
    estimators = list(dict.fromkeys(str(r["estimator"]) for r in rows))
    steps = sorted({r["step"] for r in rows})
    graded = sorted({r["step"] for r in rows if r.get("checkpoint_step") is not None})
    stale = sorted({r["step"] for r in rows if r.get("stale_weights")})
    where = f"{len(graded)} of them" if graded else "none"
    if stale:
        where += f", {len(stale)} at stale weights"
    first = f"mean over {len(steps)} steps ({step_ranges(steps)}); {' and '.join(GRADIENT_METRICS)} over {where}:"
    body = [[name, *(_mean([r for r in rows if r["estimator"] == name], m) for m in METRICS)] for name in estimators]
    return "\n".join([first, _columns(["estimator", *METRICS], body)])


def no_recommendation_note() -> str:
    """What `diagnose` says about choosing an estimator, and where the evidence is.

    Tested on the estimator suite (every run's first 10 % of updates against its final
    learning curve, with a rule fixed before measuring), no diagnostic predicted which
    estimator learns sooner well enough to pass it, so the command recommends nothing and
    says why, rather than leave a reader to draw that conclusion from the numbers.
    """
    return (
        "no recommendation: on the estimator suite's tasks none of these diagnostics, measured early, "
        f"predicted which estimator learns sooner ({EVIDENCE}); read them as what each estimator does "
        "to these batches"
    )
