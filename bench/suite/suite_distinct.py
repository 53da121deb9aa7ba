"""Which (task, estimator) pairs of the suite are distinct experiments, and which repeat another's runs exactly.

Two tasks can share their runs for some estimators: `noisy_process` is
`multiturn` with process scores that only estimators reading them see, so GRPO
and RLOO train identically on both, and `ppo` runs exactly as `turn_gae` on
`multiturn`. Counting such a pair twice would count one experiment twice. A pair
is the same experiment as another when its estimator's runs and GRPO's runs are
identical, seed for seed (train rewards and held-out curves); it is counted once,
under the first task (suite order) and estimator (task order) it appears as.
"""

from __future__ import annotations

from typing import Any

from bench.suite.suite_definitions import TASKS

Pair = tuple[str, str]


def _runs(rows: list[dict[str, Any]], task: str, estimator: str) -> tuple:
    """A hashable picture of a (task, estimator)'s runs: per seed, its train rewards and its curve."""
    found = sorted(
        (r["seed"], tuple(r["train_reward"]), tuple(map(tuple, r["curve"])))
        for r in rows
        if r["task"] == task and r["estimator"] == estimator
    )
    return tuple(found)


def distinct_groups(rows: list[dict[str, Any]]) -> dict[Pair, list[Pair]]:
    """{representative pair: every pair with the same runs}, in suite order; GRPO's own rows are the baselines."""
    groups: dict[tuple, list[Pair]] = {}
    for task, spec in TASKS.items():
        base = _runs(rows, task, "grpo")
        for estimator in spec.estimators:
            if estimator == "grpo":
                continue
            mine = _runs(rows, task, estimator)
            if mine:
                groups.setdefault((mine, base), []).append((task, estimator))
    return {pairs[0]: pairs for pairs in groups.values()}


def distinct_pairs(rows: list[dict[str, Any]]) -> set[Pair]:
    """The pairs that count: one per distinct experiment."""
    return set(distinct_groups(rows))


def label(pair: Pair, groups: dict[Pair, list[Pair]]) -> str:
    """The estimator's name, with the pairs that repeat its runs: `rloo (= noisy_process/rloo)`."""
    same = [f"{t}/{e}" if t != pair[0] else e for t, e in groups.get(pair, [pair])[1:]]
    return pair[1] + (f" (= {', '.join(same)})" if same else "")
