"""Whether early diagnostics predict the suite's AUC differences: the statistics and the docs block.

Pure functions of the rows of bench/suite/suite_diagnostics.py and bench/suite/estimator_suite.py;
the rule they apply is written in suite_diagnostics.py's docstring (fixed before
the rows were measured). An AUC difference is clear when its 95 % paired
Student-t interval over the suite's seeds excludes 0. The correlation's interval
is a percentile bootstrap resampling seeds jointly for every (task, estimator)
pair; it is computed under `RESAMPLING_SEEDS` RNG seeds, and a verdict is given
only where all of them agree (the table shows how far the lower bound moves), so
no verdict hinges on a resampling seed. Pairs whose runs repeat another pair's
exactly (bench/suite/suite_distinct.py) count once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench.suite.suite_distinct import distinct_pairs
from bench.suite.suite_stats import BOOTSTRAP_SEED, paired_difference

DOC_BEGIN, DOC_END = "<!-- suite_diagnostics:begin -->", "<!-- suite_diagnostics:end -->"
KINDS = ("own", "shadow")
#: +1: higher is better; -1: lower is better; None: no direction (reported only). length_corr is taken as |x|.
ORIENTATION: dict[str, int | None] = {
    "grad_snr": 1,
    "reward_rank_corr": 1,
    "zero_adv_frac": -1,
    "noise_proxy": -1,
    "length_corr": -1,
    "cos_to_active": None,
}
MIN_SIGNIFICANT, MIN_SIGN_SHARE = 4, 0.75
RESAMPLES = 2_000
#: The bootstrap's RNG seeds: a verdict is read only when it is the same under every one of them.
RESAMPLING_SEEDS = range(BOOTSTRAP_SEED, BOOTSTRAP_SEED + 50)

Pair = tuple[str, str]  # (task, estimator)


@dataclass(frozen=True)
class Evidence:
    """One (metric, kind): the rank correlation with its CI, and the signs of the clear AUC differences."""

    metric: str
    kind: str
    pairs: int
    rho: float
    low: float
    high: float
    right: int
    significant: int
    lows: tuple[float, ...] = ()  # the interval's lower bound under each of RESAMPLING_SEEDS

    def chooses(self, low: float | None = None) -> bool:
        """The rule: the correlation's CI above 0, the sign of >= 75 % of >= 4 clear differences."""
        if ORIENTATION[self.metric] is None:
            return False
        low = self.low if low is None else low
        return low > 0 and self.significant >= MIN_SIGNIFICANT and self.right >= MIN_SIGN_SHARE * self.significant

    def verdict(self) -> str:
        """`yes` or `no` when every resampling seed gives it; else how many of them say yes."""
        said = [self.chooses(low) for low in self.lows or (self.low,)]
        if all(said) or not any(said):
            return "yes" if said[0] else "no"
        return f"depends on the resampling seed (yes under {sum(said)} of {len(said)})"


def _value(row: dict[str, Any], name: str, metric: str) -> float | None:
    value = row["metrics"].get(name, {}).get(metric)
    if value is None:
        return None
    return abs(value) if metric == "length_corr" else float(value)


def scores(rows: list[dict[str, Any]], kind: str, metric: str) -> dict[Pair, dict[int, float]]:
    """Oriented score of each (task, estimator != grpo) per seed: the estimator's metric minus GRPO's."""
    sign = ORIENTATION[metric] or 1
    out: dict[Pair, dict[int, float]] = {}
    if kind == "own":
        own = {(r["task"], r["estimator"], r["seed"]): r for r in rows if r["kind"] == "own"}
        for (task, estimator, seed), row in own.items():
            base = own.get((task, "grpo", seed))
            if estimator == "grpo" or base is None:
                continue
            name = "grpo" if metric == "cos_to_active" else "active"  # E's gradient against GRPO's, in E's run
            mine, theirs = _value(row, name, metric), _value(base, "active", metric)
            if metric == "cos_to_active":
                theirs = 0.0 if mine is not None else None
            if mine is not None and theirs is not None:
                out.setdefault((task, estimator), {})[seed] = sign * (mine - theirs)
        return out
    for row in (r for r in rows if r["kind"] == "shadow"):
        for name in row["metrics"]:
            if name in ("active", "grpo"):
                continue
            mine, theirs = _value(row, name, metric), _value(row, "active", metric)
            if metric == "cos_to_active":
                theirs = 0.0 if mine is not None else None
            if mine is not None and theirs is not None:
                out.setdefault((row["task"], name), {})[row["seed"]] = sign * (mine - theirs)
    return out


def auc_differences(suite: list[dict[str, Any]]) -> dict[Pair, dict[int, float]]:
    """AUC(E) − AUC(GRPO) per (task, estimator != grpo) and seed, from the suite's rows."""
    auc = {(r["task"], r["estimator"], r["seed"]): r["auc"] for r in suite}
    out: dict[Pair, dict[int, float]] = {}
    for (task, estimator, seed), value in auc.items():
        if estimator != "grpo" and (task, "grpo", seed) in auc:
            out.setdefault((task, estimator), {})[seed] = value - auc[(task, "grpo", seed)]
    return out


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman's rank correlation (average ranks for ties); 0 when either side is constant."""

    def ranks(v: np.ndarray) -> np.ndarray:
        order = np.argsort(v, kind="stable")
        r = np.empty(len(v))
        r[order] = np.arange(len(v), dtype=float)
        _, tie, counts = np.unique(v, return_inverse=True, return_counts=True)
        return (np.bincount(tie, weights=r) / counts)[tie]  # ties share their mean rank

    rx, ry = ranks(x), ranks(y)
    if rx.std() == 0 or ry.std() == 0:
        return 0.0
    return float(np.corrcoef(rx, ry)[0, 1])


def column_spearman(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Spearman's correlation of each column pair of `x` and `y` (pairs x resamples); 0 where a side is constant."""
    from scipy.stats import rankdata

    rx, ry = rankdata(x, axis=0), rankdata(y, axis=0)  # average ranks for ties, as `spearman`
    rx, ry = rx - rx.mean(0), ry - ry.mean(0)
    denominator = np.sqrt((rx**2).sum(0) * (ry**2).sum(0))
    return np.divide((rx * ry).sum(0), denominator, out=np.zeros(x.shape[1]), where=denominator > 0)


def rho_interval(s: np.ndarray, t: np.ndarray, seed: int) -> tuple[float, float]:
    """The 95 % percentile-bootstrap interval of Spearman's rho of the seed means, seeds resampled jointly."""
    n = s.shape[1]
    draws = np.random.default_rng(seed).integers(0, n, size=(RESAMPLES, n))
    boot = column_spearman(s[:, draws].mean(2), t[:, draws].mean(2))
    low, high = np.percentile(boot, [2.5, 97.5])
    return float(low), float(high)


def evidence(
    score: dict[Pair, dict[int, float]],
    target: dict[Pair, dict[int, float]],
    metric: str,
    kind: str,
    keep: set[Pair] | None = None,
) -> Evidence | None:
    """The correlation across pairs of seed means, its bootstrap CI over seeds, and the clear differences' signs.

    `keep`: the pairs that count (one per distinct experiment); None counts every pair.
    """
    pairs = sorted(p for p in score if p in target and (keep is None or p in keep))
    seeds = sorted(set.intersection(*(set(score[p]) & set(target[p]) for p in pairs))) if pairs else []
    if len(pairs) < 3 or len(seeds) < 3:
        return None
    s = np.array([[score[p][k] for k in seeds] for p in pairs])
    t = np.array([[target[p][k] for k in seeds] for p in pairs])
    rho = spearman(s.mean(1), t.mean(1))
    low, high = rho_interval(s, t, BOOTSTRAP_SEED)
    lows = tuple(rho_interval(s, t, seed)[0] for seed in RESAMPLING_SEEDS)
    clear = [
        i for i, p in enumerate(pairs) if paired_difference(target[p], {k: 0.0 for k in target[p]}).excludes_zero()
    ]
    right = sum(np.sign(s[i].mean()) == np.sign(t[i].mean()) for i in clear)
    return Evidence(metric, kind, len(pairs), rho, low, high, int(right), len(clear), lows)


def all_evidence(rows: list[dict[str, Any]], suite: list[dict[str, Any]]) -> list[Evidence]:
    target, keep = auc_differences(suite), distinct_pairs(suite)
    found = (evidence(scores(rows, kind, m), target, m, kind, keep) for kind in KINDS for m in ORIENTATION)
    return [e for e in found if e is not None]


def direction(metric: str) -> str:
    """The metric's table label with the direction fixed in advance: `grad_snr (higher is better)`."""
    o = ORIENTATION[metric]
    label = "abs(length_corr)" if metric == "length_corr" else metric  # a bare | would split a table cell
    return f"{label} (none)" if o is None else f"{label} ({'higher' if o > 0 else 'lower'} is better)"


def evidence_table(found: Sequence[Evidence]) -> str:
    lines = [
        "| diagnostic | measured on | pairs | Spearman ρ with AUC − GRPO [95 % bootstrap CI] | its lower bound "
        f"under {len(RESAMPLING_SEEDS)} resampling seeds | signs right (clear differences) | chooses? |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for e in found:
        signs = "—" if ORIENTATION[e.metric] is None else f"{e.right} of {e.significant}"
        lows = f"{min(e.lows):+.2f} to {max(e.lows):+.2f}" if e.lows else "—"
        lines.append(
            f"| {direction(e.metric)} | {e.kind} runs | {e.pairs} | {e.rho:+.2f} [{e.low:+.2f}, {e.high:+.2f}] "
            f"| {lows} | {signs} | {e.verdict()} |"
        )
    return "\n".join(lines)


def pair_table(rows: list[dict[str, Any]], suite: list[dict[str, Any]], kind: str) -> str:
    """Per (task, estimator): the AUC difference and each diagnostic's oriented score, seed means."""
    target = auc_differences(suite)
    per_metric = {m: scores(rows, kind, m) for m in ORIENTATION}
    head = "| task | estimator | AUC − GRPO [95 % t-interval] | " + " | ".join(
        direction(m).split(" (")[0] for m in ORIENTATION
    )
    lines = [head + " |", "| --- | --- | --- | " + " | ".join("---" for _ in ORIENTATION) + " |"]
    for pair in sorted(target):
        if not any(pair in per_metric[m] for m in ORIENTATION):
            continue
        d = paired_difference(target[pair], {k: 0.0 for k in target[pair]})
        cells = [_cell(per_metric[m].get(pair)) for m in ORIENTATION]
        lines.append(
            f"| {pair[0]} | {pair[1]} | {d.mean:+.3f} [{d.low:+.3f}, {d.high:+.3f}] | " + " | ".join(cells) + " |"
        )
    return "\n".join(lines)


def _cell(values: dict[int, float] | None) -> str:
    return "—" if not values else f"{np.mean(list(values.values())):+.3g}"


def verdict_text(found: Sequence[Evidence]) -> str:
    chosen = [e for e in found if e.verdict() == "yes"]
    undecided = [e for e in found if e.verdict().startswith("depends")]
    hinge = (
        " Under some resampling seeds and not others, so no verdict: "
        + ", ".join(f"{e.metric} ({e.kind} runs, {e.verdict().split('(')[1].rstrip(')')})" for e in undecided)
        + "."
        if undecided
        else ""
    )
    if not chosen:
        return (
            "**Verdict.** No diagnostic meets the rule under every resampling seed: none both ranks the "
            "estimators' AUC differences with a correlation whose CI excludes 0 and gets the sign of at least 75 % "
            f"of the clear differences.{hinge} `areal-adv diagnose` therefore prints the numbers only and "
            "recommends nothing."
        )
    names = ", ".join(f"{e.metric} ({e.kind} runs, ρ {e.rho:+.2f})" for e in chosen)
    return f"**Verdict.** Meets the rule under every resampling seed: {names}.{hinge}"


def evidence_text(rows: list[dict[str, Any]], suite: list[dict[str, Any]]) -> str:
    found = all_evidence(rows, suite)
    cpu = sum(r["cpu_s"] for r in rows)
    diag = sum(r["diagnostics_s"] for r in rows)
    parts = [
        f"{len(rows)} measured runs ({sum(r['kind'] == 'own' for r in rows)} own, "
        f"{sum(r['kind'] == 'shadow' for r in rows)} shadowed GRPO runs), {cpu:.0f} CPU s in all, "
        f"{diag:.0f} s of it in the diagnostics.",
        evidence_table(found),
        verdict_text(found),
        "Per pair, own runs (seed means; each score is oriented so that positive should mean better than GRPO):",
        pair_table(rows, suite, "own"),
        "Per pair, as shadows on GRPO's runs:",
        pair_table(rows, suite, "shadow"),
    ]
    return "\n\n".join(parts)


def write_evidence_docs(rows: list[dict[str, Any]], suite: list[dict[str, Any]], doc: Path) -> None:
    """Replace the block between the markers of `doc` with the evidence built from the rows."""
    text = doc.read_text(encoding="utf-8")
    if DOC_BEGIN not in text or DOC_END not in text:
        raise ValueError(f"{doc}: expected the markers {DOC_BEGIN} and {DOC_END}")
    head, rest = text.split(DOC_BEGIN, 1)
    tail = rest.split(DOC_END, 1)[1]
    doc.write_text(head + docs_block(rows, suite) + tail, encoding="utf-8")


def docs_block(rows: list[dict[str, Any]], suite: list[dict[str, Any]]) -> str:
    note = (
        "<!-- generated by `.venv/bin/python -m bench.suite.suite_diagnostics --report --write-docs` from "
        "bench/results/suite_diagnostics.jsonl and bench/results/estimator_suite.jsonl; do not edit by hand -->"
    )
    return f"{DOC_BEGIN}\n{note}\n\n{evidence_text(rows, suite)}\n{DOC_END}"
