"""Tables, verdicts, decision table and figure of bench/suite/estimator_suite.py, built from its result rows only.

Everything here is a function of the rows (and the task table); intervals are
Student-t intervals (no resampling), so the docs block regenerated from the
committed results file is byte for byte the committed one.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

from bench.suite.suite_definitions import TASKS
from bench.suite.suite_distinct import distinct_groups
from bench.suite.suite_stats import Estimate, paired_difference, t_mean

BASELINE = "grpo"
DOC_BEGIN, DOC_END = "<!-- estimator_suite:begin -->", "<!-- estimator_suite:end -->"
COMMAND = ".venv/bin/python -m bench.suite.estimator_suite --report --write-docs"


def by_estimator(rows: list[dict[str, Any]], task: str) -> dict[str, dict[int, dict[str, Any]]]:
    """{estimator: {seed: row}} of one task, in the task's estimator order (the newest row of a seed wins)."""
    found: dict[str, dict[int, dict[str, Any]]] = defaultdict(dict)
    for row in rows:
        if row["task"] == task:
            found[row["estimator"]][row["seed"]] = row
    order = list(TASKS[task].estimators) if task in TASKS else []
    return {name: found[name] for name in sorted(found, key=lambda n: (order.index(n) if n in order else 99, n))}


def fmt(e: Estimate, signed: bool = False) -> str:
    sign = "+" if signed else ""
    if e.n < 2:  # one seed: a value, no interval
        return f"{e.mean:{sign}.3f} (1 seed)"
    return f"{e.mean:{sign}.3f} [{e.low:{sign}.3f}, {e.high:{sign}.3f}]"


def over_seeds(values: list[float]) -> Estimate:
    """`t_mean` of `values`; a single value (one seed, as a pilot has) has no interval: NaN bounds, n 1."""
    if len(values) == 1:
        return Estimate(values[0], float("nan"), float("nan"), 1)
    return t_mean(values)


def paired_over_seeds(values: dict[int, float], baseline: dict[int, float]) -> Estimate:
    """`paired_difference`, or the one seed's difference without an interval (no verdict reads it: MIN_SEEDS)."""
    common = sorted(set(values) & set(baseline))
    if len(common) == 1:
        return over_seeds([values[common[0]] - baseline[common[0]]])
    return paired_difference(values, baseline)


def task_stats(runs: dict[str, dict[int, dict[str, Any]]]) -> dict[str, dict[str, Estimate | None]]:
    """Per estimator: final success, AUC (means with CIs) and their paired differences to GRPO."""
    base = runs.get(BASELINE, {})
    out = {}
    for name, seeds in runs.items():
        final = {s: r["final_success"] for s, r in seeds.items()}
        area = {s: r["auc"] for s, r in seeds.items()}
        paired = name != BASELINE and bool(set(seeds) & set(base))
        out[name] = {
            "final": over_seeds(list(final.values())),
            "auc": over_seeds(list(area.values())),
            "d_final": paired_over_seeds(final, {s: r["final_success"] for s, r in base.items()}) if paired else None,
            "d_auc": paired_over_seeds(area, {s: r["auc"] for s, r in base.items()}) if paired else None,
        }
    return out


def table(task: str, runs: dict[str, dict[int, dict[str, Any]]]) -> str:
    stats = task_stats(runs)
    lines = [
        "| estimator | seeds | final success [95 % t-interval] | AUC [95 % t-interval] | final − GRPO (paired) "
        "[95 % t-interval] | AUC − GRPO (paired) [95 % t-interval] | CPU s / run | wall s / run | load |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, seeds in runs.items():
        s = stats[name]
        cpu, wall = (statistics.fmean(r[k] for r in seeds.values()) for k in ("cpu_s", "wall_s"))
        load = statistics.fmean(r["load1_start"] for r in seeds.values())
        lines.append(
            f"| {name} | {len(seeds)} | {fmt(s['final'])} | {fmt(s['auc'])} | "
            f"{fmt(s['d_final'], True) if s['d_final'] else '—'} | "
            f"{fmt(s['d_auc'], True) if s['d_auc'] else '—'} | {cpu:.1f} | {wall:.0f} | {load:.1f} |"
        )
    return "\n".join(lines)


METRICS = {"final": "final success", "auc": "AUC"}
MIN_SEEDS = 3  # below this an interval over seeds says next to nothing


def verdict(runs: dict[str, dict[int, dict[str, Any]]], metric: str = "final") -> tuple[str, str | None]:
    """(plain-words verdict on `metric`, the estimator that beats GRPO on it or None) from paired differences.

    The best estimator is the one with the largest mean paired difference to
    GRPO. If its 95 % paired Student-t interval excludes 0 it beats GRPO; if every
    other estimator's interval lies below 0, GRPO beats them all; otherwise no
    difference larger than the widest bound of the best estimator's interval is
    supported.
    """
    key, words = f"d_{metric}", METRICS[metric]
    stats = {n: s for n, s in task_stats(runs).items() if s[key] is not None}
    if not stats:
        return "no paired runs against GRPO yet", None
    best = max(stats, key=lambda n: stats[n][key].mean)
    d = stats[best][key]
    if d.n < MIN_SEEDS:
        return f"too few paired seeds for a verdict ({d.n}, need {MIN_SEEDS})", None
    if d.low > 0:
        return (
            f"{best} beats GRPO by {d.mean:+.3f} {words}, 95 % t-interval [{d.low:+.3f}, {d.high:+.3f}] "
            f"({d.n} paired seeds)"
        ), best
    if all(s[key].high < 0 for s in stats.values()):
        return (
            f"GRPO beats every other estimator on {words}; the closest, {best}, by {-d.mean:.3f}, "
            f"95 % t-interval of its difference [{d.low:+.3f}, {d.high:+.3f}]"
        ), None
    width = max(abs(d.low), abs(d.high))
    return (
        f"no difference larger than ±{width:.3f} in {words} between the best estimator ({best}, "
        f"{d.mean:+.3f}, 95 % t-interval [{d.low:+.3f}, {d.high:+.3f}], half-width {d.half_width:.3f}) and GRPO"
    ), None


def choice(runs: dict[str, dict[int, dict[str, Any]]]) -> str:
    """The decision table's entry: the estimator that beats GRPO on final success, else on AUC, else GRPO."""
    return verdict(runs, "final")[1] or verdict(runs, "auc")[1] or BASELINE


def repeats(rows: list[dict[str, Any]], task: str) -> str:
    """A sentence naming the task's estimators whose runs repeat another task's exactly (counted there), or ''."""
    same = [
        f"`{estimator}` trains exactly as on `{first[0]}`"
        for first, group in distinct_groups(rows).items()
        for t, estimator in group[1:]
        if t == task and first[0] != task
    ]
    if not same:
        return ""
    return (
        f" Repeated runs: {'; '.join(same)} (the same runs, GRPO's included, seed for seed): one experiment, "
        "counted once, under the first task."
    )


def report_text(rows: list[dict[str, Any]], tasks: list[str], figure: str | None = None) -> str:
    """Markdown: per task its reason, table and verdict; then the decision table."""
    parts, decisions = [], []
    for task in tasks:
        runs = by_estimator(rows, task)
        if not runs:
            continue
        spec = TASKS[task]
        steps = sorted({r["steps"] for seeds in runs.values() for r in seeds.values()})
        final, area = verdict(runs, "final")[0], verdict(runs, "auc")[0]
        parts.append(
            f"#### `{task}`: {spec.situation}\n\nWhy estimators should differ: {spec.reason}. "
            f"{'/'.join(map(str, steps))} updates, held-out greedy success on 32 prompts.\n\n"
            f"{table(task, runs)}\n\n**Verdict.** Final success: {final}. AUC: {area}.{repeats(rows, task)}\n"
        )
        decisions.append(f"| {spec.situation} | {choice(runs)} | final: {final}; AUC: {area} |")
    parts.insert(0, cost_line(rows))
    if figure:
        parts.insert(0, f"![Held-out success per update, mean over seeds]({figure})\n")
    parts.append(
        "#### Decision table\n\nThe estimator that beats GRPO on final success, else the one that beats it "
        "on AUC, else GRPO (nothing measured better).\n\n| situation | use | measured |\n| --- | --- | --- |\n"
        + "\n".join(decisions)
    )
    return "\n".join(parts)


def cost_line(rows: list[dict[str, Any]]) -> str:
    """The campaign's cost: CPU seconds (one thread per run, so about a quiet core's wall time) and the load."""
    if not rows:
        return "No runs yet.\n"
    cpu, wall = sum(r["cpu_s"] for r in rows), sum(r["wall_s"] for r in rows)
    load = statistics.fmean(r["load1_start"] for r in rows)
    return (
        f"{len(rows)} runs: {cpu:.0f} CPU s in all, {cpu / len(rows):.1f} s per run, so about "
        f"{cpu / 2 / 60:.0f} min on 2 quiet cores (two one-thread workers). They were measured on a "
        f"shared 2-core machine at a mean 1-min load average of {load:.1f}: {wall / len(rows):.0f} s of wall "
        f"time per run, {wall / cpu:.1f} x its CPU time.\n"
    )


def write_figure(rows: list[dict[str, Any]], tasks: list[str], path: Path) -> None:
    """One panel per task: each estimator's mean held-out success curve over its seeds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    shown = [t for t in tasks if by_estimator(rows, t)]
    cols = min(max(len(shown), 1), 3)
    nrows = -(-max(len(shown), 1) // cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(4.4 * cols, 3.5 * nrows), squeeze=False)
    for ax in axes.flat[len(shown) :]:
        ax.axis("off")
    for ax, task in zip(axes.flat, shown):
        for name, seeds in by_estimator(rows, task).items():
            curves = [r["curve"] for r in seeds.values()]
            updates = [p[0] for p in curves[0]]
            mean = np.mean([[p[1] for p in c] for c in curves if len(c) == len(updates)], axis=0)
            ax.plot(
                updates,
                mean,
                label=name,
                lw=2.2 if name == BASELINE else 1.2,
                color="black" if name == BASELINE else None,
            )
        ax.set_title(task)
        ax.set_xlabel("updates")
        ax.set_ylim(-0.02, 1.02)
        ax.legend(fontsize=7)
    for row in axes:
        row[0].set_ylabel("held-out success (mean over seeds)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90, metadata={"Software": None})
    plt.close(fig)


def docs_block(rows: list[dict[str, Any]], tasks: list[str], figure: str) -> str:
    n = len(rows)
    return (
        f"{DOC_BEGIN}\n<!-- generated by `{COMMAND}` from bench/results/estimator_suite.jsonl "
        f"({n} runs); do not edit by hand -->\n\n{report_text(rows, tasks, figure)}\n{DOC_END}"
    )


def write_docs(rows: list[dict[str, Any]], tasks: list[str], doc: Path, figure: Path) -> None:
    """Replace the block of `doc` between DOC_BEGIN and DOC_END with the one the rows give."""
    text = doc.read_text(encoding="utf-8")
    if DOC_BEGIN not in text or DOC_END not in text:
        raise SystemExit(f"--doc: {doc} has no {DOC_BEGIN} ... {DOC_END} block to replace")
    head, rest = text.split(DOC_BEGIN, 1)
    _, tail = rest.split(DOC_END, 1)
    try:
        shown = figure.resolve().relative_to(doc.resolve().parent).as_posix()
    except ValueError:
        shown = figure.as_posix()
    doc.write_text(head + docs_block(rows, tasks, shown) + tail, encoding="utf-8")
