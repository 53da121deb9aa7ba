"""bench/real_model/real_model_diagnostics.py on made-up runs: window means, paired t-intervals and the pre-registered verdicts."""

from __future__ import annotations

import json
import math
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

from bench.real_model import real_model_diagnostics as rmd  # noqa: E402

AUC_GAIN = {"grpo": 0.0, "maxrl": 0.10, "rloo": 0.0}  # maxrl clearly above grpo; rloo equal on average


def _write_run(root: Path, estimator: str, seed: int) -> None:
    run = root / estimator / f"seed{seed}"
    run.mkdir(parents=True)
    rows = []
    for step in range(30):
        row = {"step": step, "reward_mean": 0.1 * seed}
        if step < 10:
            for name in ("active", *(e for e in rmd.ESTIMATORS if e != estimator)):
                snr = {"grpo": 0.2, "maxrl": 0.5, "rloo": 0.1}[estimator if name == "active" else name] + 0.01 * step
                row.update({f"diagnostics/{name}/grad_snr": snr, f"diagnostics/{name}/length_corr": -0.3})
        rows.append(row)
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def _run_row(estimator: str, seed: int) -> dict:
    noise = {1: 0.01, 2: -0.02, 3: 0.015}[seed] if estimator == "rloo" else 0.003 * seed
    top = 0.3 + AUC_GAIN[estimator] + noise
    curve = [{"updates": u, "accuracy": top * u / 30} for u in (0, 10, 20, 30)]
    return {"tag": rmd.TASK, "estimator": estimator, "seed": seed, "curve": curve}


def test_collect_and_report_follow_the_written_rule(tmp_path: Path) -> None:
    runs, results = tmp_path / "runs", tmp_path / "diag.jsonl"
    run_rows = tmp_path / "runs.jsonl"
    for e in rmd.ESTIMATORS:
        for s in (1, 2, 3):
            _write_run(runs, e, s)
    finished = [_run_row(e, s) for e in rmd.ESTIMATORS for s in (1, 2, 3)]
    run_rows.write_text("".join(json.dumps(r) + "\n" for r in finished))
    rmd.collect(runs, results, run_rows)
    rmd.collect(runs, results, run_rows)  # a rerun appends nothing
    rows = [json.loads(line) for line in results.read_text().splitlines()]
    assert len(rows) == 9 and {r["steps_measured"] for r in rows} == {10}
    grpo1 = next(r for r in rows if (r["estimator"], r["seed"]) == ("grpo", 1))
    assert math.isclose(grpo1["metrics"]["active"]["grad_snr"], 0.2 + 0.01 * 4.5)
    assert math.isclose(grpo1["metrics"]["maxrl"]["grad_snr"], 0.5 + 0.01 * 4.5)
    assert math.isclose(grpo1["window_train_reward"], 0.1)

    diffs = [0.10 + 0.003 * s - 0.003 * s for s in (1, 2, 3)]  # AUC is half the last accuracy for a straight line
    mean, low, high = rmd.t_interval([d / 2 for d in diffs])
    assert math.isclose(mean, 0.05) and math.isclose(low, 0.05) and math.isclose(high, 0.05)
    sd = math.sqrt(sum((x - 0.0025 / 3) ** 2 for x in (0.005, -0.01, 0.0075)) / 2)
    m2, l2, h2 = rmd.t_interval([0.005, -0.01, 0.0075])
    assert math.isclose(h2 - m2, 4.303 * sd / math.sqrt(3), rel_tol=1e-4) and l2 < 0 < h2  # t(0.975, 2 df) = 4.3027

    text = rmd.report_text(rows, finished, [])
    assert "**carries over**" in text
    assert "| grad_snr (higher is better) | own runs | maxrl | +0.3, +0.3, +0.3 | +0.3 |" in text
    assert "| grad_snr (higher is better) | own runs | rloo |" in text and "nothing to predict (not resolved)" in text
    assert "grad_snr (own runs, maxrl)" in text and "grad_snr (shadow runs, maxrl)" in text
    assert "| abs(length_corr) (lower is better) | own runs | maxrl | +0, +0, +0 | +0 |" in text
    assert "| AUC | rloo |" in text and "| not resolved |" in text
