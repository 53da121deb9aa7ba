"""Per-phase timings, throughputs and peak memory in every metrics row (areal_adv.trainer.run.metrics.PhaseTimer).

* every row carries `time/<phase>` for each phase, `time/step`, the sampling and training throughputs
  and `memory/peak_rss_gib`, in metrics.jsonl and TensorBoard, and the progress line shows them;
* they are plausible: non-negative, the phases sum to no more than the row's wall time, evaluation
  time only on evaluation rows, a checkpoint's time in the row after it, throughputs equal to tokens
  over phase time, and the peak RSS at least the process's current RSS and never falling;
* the resume tests' filter (`is_wall_clock`) treats them all as wall-clock fields.
"""

from __future__ import annotations

import io
import os
import re
import resource
from pathlib import Path

import pytest
import tiny_run  # noqa: E402

from areal_adv.api.cli_args import load_config
from areal_adv.trainer.run.loop import Trainer
from areal_adv.trainer.run.metrics import PHASES, PhaseTimer, is_wall_clock, peak_memory_metrics, read_metrics
from areal_adv.trainer.run.progress import Progress, progress_line

ROOT = Path(__file__).resolve().parents[3]
DEFAULT = ROOT / "examples" / "grpo_arith.yaml"
TINY = [
    *tiny_run.TINY,
    "train.num_threads=1",
]
KEYS = [f"time/{p}" for p in PHASES] + [
    "time/step",
    "throughput/sample_tokens_per_s",
    "throughput/train_tokens_per_s",
    "memory/peak_rss_gib",
]


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> tuple[list[dict], list]:
    out = tmp_path_factory.mktemp("phases")
    trainer = Trainer(
        load_config(
            DEFAULT,
            [*TINY, "train.steps=4", "train.save_every=2", "eval.every=2", "eval.n_prompts=4", f"output.dir={out}"],
        )
    )
    outputs = []
    real_step = trainer.step
    trainer.step = lambda i: outputs.append(real_step(i)) or outputs[-1]
    result = trainer.run()
    return read_metrics(result.metrics_path), outputs


def test_every_row_has_every_timing_throughput_and_memory_key(run) -> None:
    rows, _ = run
    assert [r["step"] for r in rows] == [0, 1, 2, 3]
    for row in rows:
        missing = [k for k in KEYS if not isinstance(row.get(k), (int, float))]
        assert not missing, (missing, row)
        assert all(row[k] >= 0 for k in KEYS)


def test_phases_fit_in_the_step_and_land_where_they_happened(run) -> None:
    rows, _ = run
    for row in rows:
        phases = sum(row[f"time/{p}"] for p in PHASES)
        assert phases <= row["time/step"] + 1e-6, row
        assert row["time/rollout"] > 0 and row["time/update"] > 0
        assert row["seconds"] <= row["time/step"]
    # evaluation before steps 0 and 2, and after the last update (step 3)
    assert [r["time/eval"] > 0 for r in rows] == [True, False, True, True]
    assert [("eval/accuracy" in r) for r in rows] == [True, False, True, True]
    # checkpoints after steps 1 and 3 (save_every=2): step_2's time is in row 2; the last one after the run
    assert [r["time/save"] > 0 for r in rows] == [False, False, True, False]
    elapsed = [r["elapsed"] for r in rows]
    assert all(b - a >= r["time/step"] - 1e-6 for a, b, r in zip(elapsed, elapsed[1:], rows[1:]))


def test_throughputs_are_tokens_over_phase_time(run) -> None:
    rows, outputs = run
    for row, out in zip(rows, outputs):
        generated = sum(r.generated_tokens for r in out.records)
        trained = float(out.data["attention_mask"].sum())
        assert row["throughput/sample_tokens_per_s"] == pytest.approx(generated / row["time/rollout"])
        assert row["throughput/train_tokens_per_s"] == pytest.approx(trained / row["time/update"])


def test_peak_rss_is_plausible_and_never_falls(run) -> None:
    rows, _ = run
    peaks = [r["memory/peak_rss_gib"] for r in rows]
    assert peaks == sorted(peaks)
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    now = int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**30
    assert 0.05 < peaks[0] <= peaks[-1] <= resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20 < total
    assert peak_memory_metrics()["memory/peak_rss_gib"] >= now * 0.999


def test_the_timer_adds_repeated_phases_and_reports_zero_for_the_rest() -> None:
    timer = PhaseTimer()
    for _ in range(2):
        with timer.phase("eval"):
            sum(range(10_000))
    metrics = timer.metrics()
    assert set(metrics) == {f"time/{p}" for p in PHASES}
    assert metrics["time/eval"] > 0 and metrics["time/update"] == 0.0
    with pytest.raises(ZeroDivisionError), timer.phase("update"):
        _ = 1 / 0
    assert timer.metrics()["time/update"] > 0  # a failing phase is still charged


def test_progress_line_shows_the_step_time_its_phases_and_the_peak_memory(run) -> None:
    rows, _ = run
    line = progress_line("x", 4, 4, rows[-1], 0.5)
    assert re.search(r"\| step [\d.]+s: rollout [\d.]+ .*update [\d.]+", line), line
    assert f"peak rss {rows[-1]['memory/peak_rss_gib']:.2f} GiB" in line
    out = io.StringIO()
    progress = Progress(name="x", total=1, start=0, every=1, enabled=True, interactive=False, out=out)
    progress.update(1, rows[0])
    assert "eval " in out.getvalue()  # row 0 evaluated before its update


def test_wall_clock_fields_are_what_resume_comparisons_leave_out(run) -> None:
    rows, _ = run
    assert all(is_wall_clock(k) for k in KEYS + ["seconds", "elapsed", "tokens_per_s", "eval/seconds"])
    assert not any(is_wall_clock(k) for k in ("reward_mean", "policy_loss", "eval/accuracy", "step"))
