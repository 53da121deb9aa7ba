"""bench/suite/suite_evidence.py: the rank correlation, the oriented scores, the rule, and the docs block from the rows."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]

from bench.suite.suite_evidence import DOC_BEGIN, DOC_END, Evidence, docs_block, evidence, scores, spearman  # noqa: E402


def test_spearman_is_pearson_on_average_ranks():
    x = np.array([1.0, 2.0, 3.0, 4.0])
    assert spearman(x, x**3) == pytest.approx(1.0) and spearman(x, -x) == pytest.approx(-1.0)
    y = np.array([1.0, 1.0, 2.0, 3.0])  # a tie: ranks 0.5, 0.5, 2, 3
    ranks = np.array([0.5, 0.5, 2.0, 3.0])
    assert spearman(x, y) == pytest.approx(np.corrcoef(np.arange(4.0), ranks)[0, 1])
    assert spearman(x, np.ones(4)) == 0.0


def _own(task: str, estimator: str, seed: int, **metrics: float) -> dict:
    return {"kind": "own", "task": task, "estimator": estimator, "seed": seed, "metrics": {"active": metrics}}


def test_scores_are_oriented_differences_to_grpo_on_the_same_seed():
    rows = [
        _own("t", "grpo", 1, zero_adv_frac=0.5, grad_snr=1.0, length_corr=-0.2),
        _own("t", "rloo", 1, zero_adv_frac=0.3, grad_snr=1.5, length_corr=0.1),
        _own("t", "rloo", 2, zero_adv_frac=0.3, grad_snr=1.5, length_corr=0.1),  # no GRPO row for seed 2
    ]
    assert scores(rows, "own", "zero_adv_frac") == {("t", "rloo"): {1: pytest.approx(0.2)}}  # lower is better
    assert scores(rows, "own", "grad_snr") == {("t", "rloo"): {1: pytest.approx(0.5)}}
    assert scores(rows, "own", "length_corr") == {("t", "rloo"): {1: pytest.approx(0.1)}}  # |0.1| < |-0.2|
    shadow = {
        "kind": "shadow",
        "task": "t",
        "estimator": "grpo",
        "seed": 1,
        "metrics": {"active": {"grad_snr": 1.0}, "grpo": {"grad_snr": 1.0}, "maxrl": {"grad_snr": 0.25}},
    }
    assert scores([shadow], "shadow", "grad_snr") == {("t", "maxrl"): {1: pytest.approx(-0.75)}}


def test_the_rule_needs_a_positive_ci_and_three_quarters_of_the_clear_signs():
    seeds = range(1, 11)
    target = {
        ("t", e): {s: d + 0.001 * (s % 3) for s in seeds}
        for e, d in (("a", 0.1), ("b", -0.1), ("c", 0.05), ("d", -0.05), ("e", 0.2))
    }
    good = {p: {s: 10 * v for s, v in by_seed.items()} for p, by_seed in target.items()}
    found = evidence(good, target, "grad_snr", "own")
    assert found is not None and found.rho == pytest.approx(1.0) and found.low > 0.9
    assert (found.right, found.significant) == (5, 5) and found.chooses()
    bad = {p: {s: -v for s, v in by_seed.items()} for p, by_seed in good.items()}
    found = evidence(bad, target, "grad_snr", "own")
    assert found is not None and found.rho == pytest.approx(-1.0) and found.right == 0 and not found.chooses()
    assert not evidence(good, target, "cos_to_active", "own").chooses()  # no direction: reported only
    few = Evidence("grad_snr", "own", 5, 0.9, 0.5, 1.0, right=3, significant=3)
    assert not few.chooses()  # fewer than 4 clear differences


def test_the_docs_block_is_what_the_committed_rows_give():
    from bench.suite.estimator_suite import current_rows

    def read(name: str) -> list[dict]:
        path = ROOT / "bench" / "results" / name
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    doc = (ROOT / "docs" / "benchmarks.md").read_text()
    committed = DOC_BEGIN + doc.split(DOC_BEGIN, 1)[1].split(DOC_END, 1)[0] + DOC_END
    assert committed == docs_block(read("suite_diagnostics.jsonl"), current_rows(read("estimator_suite.jsonl")))
