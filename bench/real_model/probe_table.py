"""The skill test of a real-model campaign: held-out accuracy with the answer's start forced, before and after.

A run can raise its accuracy by learning the format the prompt asks for,
without learning the skill. `examples/real_model/probe.py --skills --results
FILE --label L` scores a checkpoint with the start of the answer forced into
the completion (for sums, the question's own "a + b =") and keeps each
held-out row's hit (1 or 0). This module turns those rows into a table: the
untrained model (label `untrained`) and each run's last checkpoint (label
`<tag>/<estimator>/seed<seed>`), with the change from the untrained model and
from GRPO as paired differences over the same held-out rows.

The confidence intervals resample the held-out prompts (95 % percentile
bootstrap, fixed RNG seed, so the table is rebuilt identically). They measure
how much the figure depends on which prompts were held out; with 2 seeds per
estimator, the spread between seeds is shown beside them, not folded in.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from bench.suite.suite_stats import bootstrap_mean

UNTRAINED = "untrained"


def run_label(tag: str, estimator: str, seed: int) -> str:
    """The probe label of a campaign run's last checkpoint."""
    return f"{tag}/{estimator}/seed{seed}"


def latest_by_label(rows: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The newest probe row of each label (a re-probe replaces the earlier one)."""
    out: dict[str, dict[str, Any]] = {}
    for row in rows:
        out[row["label"]] = row
    return out


def paired_change(after: Sequence[Sequence[int]], before: Sequence[Sequence[int]]) -> str:
    """`+0.123 [0.050, 0.190]`: the mean over prompts of (after - before), each averaged over its seeds."""
    if any(len(h) != len(after[0]) for h in (*after, *before)):
        raise ValueError("probe table: the probes were run on different numbers of held-out rows")
    n = len(after[0])
    diffs = [statistics.fmean(h[i] for h in after) - statistics.fmean(h[i] for h in before) for i in range(n)]
    est = bootstrap_mean(diffs)
    return f"{est.mean:+.3f} [{est.low:+.3f}, {est.high:+.3f}]"


def probe_table(probes: Sequence[dict[str, Any]], tag: str, runs: Sequence[tuple[str, int]]) -> str:
    """Markdown: forced-start accuracy of the untrained model and of each estimator's runs, with paired changes.

    `runs` are the campaign's (estimator, seed) pairs in table order. A run
    without a probe row is left out; without an `untrained` row there is no
    table (the changes need it).
    """
    latest = latest_by_label(probes)
    if UNTRAINED not in latest:
        return f"(no `{UNTRAINED}` probe row: the forced-start table needs the untrained model's score)"
    base = latest[UNTRAINED]
    by_estimator: dict[str, list[dict[str, Any]]] = {}
    for estimator, seed in runs:
        row = latest.get(run_label(tag, estimator, seed))
        if row is not None:
            by_estimator.setdefault(estimator, []).append({**row, "seed": seed})
    for row in (r for group in by_estimator.values() for r in group):
        if row.get("rows") != base.get("rows"):
            raise ValueError(
                f"probe table: {row['label']} was probed on the rows of {row.get('rows')}, "
                f"the untrained model on {base.get('rows')}: paired differences need the same prompts"
            )
    reference = by_estimator.get("grpo")
    lines = [
        "| checkpoint | seeds | forced-start accuracy: mean (each seed) | change from untrained [95 % CI] | "
        "change from grpo [95 % CI] |",
        "| --- | --- | --- | --- | --- |",
        f"| untrained | - | {base['prefix']:.3f} | - | - |",
    ]
    for estimator, group in by_estimator.items():
        hits = [r["prefix_hits"] for r in group]
        versus = (
            paired_change(hits, [r["prefix_hits"] for r in reference]) if reference and estimator != "grpo" else "-"
        )
        each = ", ".join(f"{r['prefix']:.3f}" for r in group)
        lines.append(
            f"| {estimator} | {' '.join(str(r['seed']) for r in group)} | "
            f"{statistics.fmean(r['prefix'] for r in group):.3f} ({each}) | "
            f"{paired_change(hits, [base['prefix_hits']])} | {versus} |"
        )
    return "\n".join(lines)
