"""bench/suite/estimator_suite.py: its statistics, a tiny end-to-end run (rows, resume, exact rerun, report), the docs block.

The full suite (hundreds of runs) is never run here: the end-to-end test trains
2 tasks x 2 estimators x 1 seed for 3 updates each.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import warm_python
from scipy import stats as scipy_stats

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = "bench.suite.estimator_suite"  # run as python -m SCRIPT

from bench.suite.suite_definitions import TASKS, algorithm, run_config  # noqa: E402
from bench.suite.suite_report import DOC_BEGIN, DOC_END, choice, docs_block, table, verdict  # noqa: E402
from bench.suite.suite_stats import auc, bootstrap_mean, paired_difference, t_mean  # noqa: E402


def test_auc_is_the_mean_height_of_the_curve():
    assert auc([0, 10, 20], [0.0, 1.0, 1.0]) == pytest.approx(0.75)
    assert auc([0, 5, 20], [1.0, 1.0, 1.0]) == 1.0
    assert auc([0, 20], [0.0, 0.0]) == 0.0
    with pytest.raises(ValueError, match="updates must increase"):
        auc([0, 0], [0.0, 1.0])
    with pytest.raises(ValueError, match="need >= 2 points"):
        auc([0], [1.0])


def test_bootstrap_ci_contains_the_true_mean_and_is_deterministic():
    rng = np.random.default_rng(0)
    values = rng.normal(0.3, 0.1, size=200).tolist()
    est = bootstrap_mean(values)
    assert est.low < 0.3 < est.high and est.low < est.mean < est.high
    assert est.half_width == pytest.approx(1.96 * 0.1 / np.sqrt(200), rel=0.25)  # the normal-theory width
    assert bootstrap_mean(values) == est  # a fixed bootstrap seed: the same report every time
    const = bootstrap_mean([0.5] * 10)
    assert (const.low, const.mean, const.high) == (0.5, 0.5, 0.5) and const.excludes_zero()
    assert not bootstrap_mean([-0.1, 0.1, 0.0]).excludes_zero()
    with pytest.raises(ValueError, match="no values"):
        bootstrap_mean([])
    with pytest.raises(ValueError, match="non-finite"):
        bootstrap_mean([0.1, float("nan")])


def test_intervals_over_seeds_are_student_t_intervals():
    values = [0.61, 0.72, 0.55, 0.68, 0.70]
    est = t_mean(values)
    half = scipy_stats.t.ppf(0.975, 4) * np.std(values, ddof=1) / np.sqrt(5)
    assert (est.low, est.high) == pytest.approx((np.mean(values) - half, np.mean(values) + half))
    const = t_mean([1.0] * 10)
    assert (const.low, const.mean, const.high) == (1.0, 1.0, 1.0)
    with pytest.raises(ValueError, match="need at least 2 seeds"):
        t_mean([0.5])


def test_paired_difference_pairs_by_seed():
    baseline = {1: 0.1, 2: 0.5, 3: 0.9, 4: 0.3}
    values = {3: 1.0, 1: 0.2, 2: 0.6}  # each seed 0.1 above its baseline, in another order, seed 4 missing
    d = paired_difference(values, baseline)
    assert d.n == 3 and d.mean == pytest.approx(0.1) and d.low == pytest.approx(0.1) and d.high == pytest.approx(0.1)
    assert d.excludes_zero()
    unpaired = t_mean(list(values.values())).mean - t_mean(list(baseline.values())).mean
    assert unpaired != pytest.approx(0.1)  # pooling instead of pairing would give another number
    with pytest.raises(ValueError, match="no common seeds"):
        paired_difference({5: 1.0}, baseline)


def _row(task: str, estimator: str, seed: int, final: float) -> dict:
    return {
        "task": task,
        "estimator": estimator,
        "seed": seed,
        "final_success": final,
        "auc": final / 2,
        "steps": 10,
        "wall_s": 1.0,
        "cpu_s": 1.0,
        "load1_start": 0.0,
        "curve": [[0, 0.0], [10, final]],
    }


def test_verdicts_follow_the_paired_differences():
    better = {
        "grpo": {s: _row("sparse", "grpo", s, 0.5) for s in range(1, 11)},
        "rloo": {s: _row("sparse", "rloo", s, 0.7 + 0.01 * s) for s in range(1, 11)},
    }
    text, winner = verdict(better)
    assert winner == "rloo" and text.startswith("rloo beats GRPO by +0.255 final success")
    assert verdict(better, "auc")[0].startswith("rloo beats GRPO by +0.128 AUC") and choice(better) == "rloo"
    same = {
        "grpo": better["grpo"],
        "rloo": {s: _row("sparse", "rloo", s, 0.5 + (0.02 if s % 2 else -0.02)) for s in range(1, 11)},
    }
    text, winner = verdict(same)
    bound = float(text.split("±")[1].split()[0])
    assert (
        winner is None
        and choice(same) == "grpo"
        and text.startswith("no difference larger than ±")
        and 0.0 < bound <= 0.02
    )
    worse = {"grpo": better["grpo"], "rloo": {s: _row("sparse", "rloo", s, 0.2) for s in range(1, 11)}}
    assert verdict(worse) == (
        "GRPO beats every other estimator on final success; the closest, rloo, by 0.300, "
        "95 % t-interval of its difference [-0.300, -0.300]",
        None,
    )
    two = {name: {s: r for s, r in seeds.items() if s <= 2} for name, seeds in better.items()}
    assert verdict(two) == ("too few paired seeds for a verdict (2, need 3)", None) and choice(two) == "grpo"
    one = {name: {1: seeds[1]} for name, seeds in better.items()}  # a pilot's one seed: values, no interval
    assert verdict(one) == ("too few paired seeds for a verdict (1, need 3)", None) and choice(one) == "grpo"
    assert "| rloo | 1 | 0.710 (1 seed) |" in table("sparse", one) and "| +0.210 (1 seed) |" in table("sparse", one)
    faster = {"grpo": better["grpo"], "rloo": {s: {**_row("sparse", "rloo", s, 0.5), "auc": 0.4} for s in range(1, 11)}}
    assert verdict(faster)[1] is None and verdict(faster, "auc")[1] == "rloo" and choice(faster) == "rloo"


def test_every_estimator_keeps_the_task_and_sets_only_the_algorithm():
    for name, spec in TASKS.items():
        assert spec.estimators[0] == "grpo", name  # the paired baseline everywhere
        base = run_config(name, "grpo", 1)
        for estimator in spec.estimators:
            cfg = run_config(name, estimator, 1)
            assert cfg["actor"]["kl_ctl"] == 0.0 and cfg["model"] == base["model"]
            assert (cfg["train"], cfg["eval"], cfg["reward"]) == (base["train"], base["eval"], base["reward"])
            assert cfg["task"]["implementation"] == base["task"]["implementation"]
    assert algorithm("turn_gae")["critic"]["enabled"] is True
    assert algorithm("mt_grpo")["rollout"]["prm"] == {"enabled": True}
    assert algorithm("gvpo")["task_kwargs"] == {"process_reward": "signed"}


def _suite(tmp: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = [
        sys.executable,
        "-m",
        SCRIPT,
        "--tasks",
        "sparse",
        "two_rewards",
        "--estimators",
        "grpo",
        "rloo",
        "--seeds",
        "1",
        "--steps",
        "3",
        "--eval-every",
        "1",
        "--workers",
        "1",
        "--results",
        str(tmp / "rows.jsonl"),
        *args,
    ]
    return warm_python.run(cmd, cwd=ROOT, timeout=600)  # forked warm: the script pins ATen's kernels itself


def test_a_tiny_suite_writes_rows_resumes_reproduces_and_reports(tmp_path: Path):
    first = _suite(tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    rows = [json.loads(line) for line in (tmp_path / "rows.jsonl").read_text().splitlines()]
    assert sorted((r["task"], r["estimator"]) for r in rows) == [
        ("sparse", "grpo"),
        ("sparse", "rloo"),
        ("two_rewards", "grpo"),
        ("two_rewards", "rloo"),
    ]
    for row in rows:
        assert row["seed"] == 1 and row["steps"] == 3 and [p[0] for p in row["curve"]] == [0, 1, 3]
        assert row["final_success"] == row["curve"][-1][1] and 0.0 <= row["auc"] <= 1.0
        assert len(row["train_reward"]) == 3 and len(row["config_hash"]) == 12
    by_task = {}
    for row in rows:  # paired: the same seed starts every estimator from the same weights and prompts
        by_task.setdefault(row["task"], set()).add((row["curve"][0][1], row["train_reward"][0]))
    assert all(len(starts) == 1 for starts in by_task.values()), by_task

    again = _suite(tmp_path)
    assert again.returncode == 0 and "4 of 4 runs already in" in again.stdout and "0 to run" in again.stdout
    assert len((tmp_path / "rows.jsonl").read_text().splitlines()) == 4  # nothing trained twice

    check = _suite(tmp_path, "--verify")
    assert check.returncode == 0, check.stdout + check.stderr[-3000:]
    assert "4 of 4 rows reproduced exactly" in check.stdout

    report = _suite(tmp_path, "--report")
    assert report.returncode == 0, report.stderr[-3000:]
    assert "#### `sparse`" in report.stdout and "#### `two_rewards`" in report.stdout
    assert "| rloo | 1 |" in report.stdout and "Decision table" in report.stdout
    assert "**Verdict.** Final success: too few paired seeds" in report.stdout


def test_the_docs_block_is_what_the_committed_results_give():
    results = ROOT / "bench" / "results" / "estimator_suite.jsonl"
    rows = [json.loads(line) for line in results.read_text().splitlines() if line.strip()]
    from bench.suite.estimator_suite import current_rows

    doc = (ROOT / "docs" / "benchmarks.md").read_text()
    committed = DOC_BEGIN + doc.split(DOC_BEGIN, 1)[1].split(DOC_END, 1)[0] + DOC_END
    assert committed == docs_block(current_rows(rows), list(TASKS), "img/estimator_suite.png")
