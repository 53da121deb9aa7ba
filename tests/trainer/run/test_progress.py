"""Progress: a bar on a terminal, one line every N steps otherwise (a redirected log stays small)."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

from areal_adv.api.cli_args import load_config
from areal_adv.trainer.run.loop import Trainer
from areal_adv.trainer.run.progress import Progress, progress_line

ROOT = Path(__file__).resolve().parents[3]
ROW = {"reward_mean": 0.5, "success_rate": 0.25, "kl": 0.00123, "entropy": 1.5}


def _feed(progress: Progress, start: int, total: int) -> None:
    for done in range(start + 1, total + 1):
        progress.update(done, ROW)
    progress.close()


def test_not_a_terminal_one_line_every_n_steps_and_after_the_last() -> None:
    out = io.StringIO()
    _feed(Progress(name="exp", total=25, start=0, every=10, enabled=True, interactive=False, out=out), 0, 25)
    lines = out.getvalue().splitlines()
    assert [re.search(r"step (\d+)/25", line).group(1) for line in lines] == ["10", "20", "25"]
    assert lines[0].startswith(
        "[areal-adv] exp step 10/25 (40%) | reward 0.500 | success 0.250 | kl 0.0012 | entropy 1.500 | "
    )
    assert re.search(r"\| [\d.]+ steps/s \| eta \d+s$", lines[0])
    assert "\r" not in out.getvalue()


def _eta_seconds(line: str) -> float:
    minutes, seconds = re.search(r"eta (?:(\d+)m)?(\d+)s$", line).groups()
    return 60 * int(minutes or 0) + int(seconds)


@pytest.mark.parametrize("interactive", [False, True])
def test_the_eta_counts_the_steps_after_the_first(monkeypatch: pytest.MonkeyPatch, interactive: bool) -> None:
    """Step 1 takes 100 s (kernels load, optimiser state), later ones 1 s: 98 steps left take about 98 s."""
    import areal_adv.trainer.run.progress as progress_module

    now = {"t": 0.0}
    monkeypatch.setattr(progress_module.time, "perf_counter", lambda: now["t"])
    out = io.StringIO()
    progress = Progress(name="exp", total=100, start=0, every=1, enabled=True, interactive=interactive, out=out)
    if progress.bar is not None:
        monkeypatch.setattr(progress.bar, "_time", lambda: now["t"])
    now["t"] = 100.0  # the first step ends
    progress.update(1, ROW)
    now["t"] = 101.0  # the second one
    progress.update(2, ROW)
    if interactive:
        rate = progress.bar.format_dict["rate"] or (progress.bar.n - progress.bar.initial) / (
            now["t"] - progress.bar.start_t
        )
        assert (progress.bar.total - progress.bar.n) / rate == pytest.approx(98, abs=2)
    else:
        first, second = out.getvalue().splitlines()
        assert "eta" not in first  # no step after the first yet: no estimate
        assert _eta_seconds(second) == pytest.approx(98, abs=2)
    progress.close()


def test_a_resumed_run_counts_from_its_start() -> None:
    out = io.StringIO()
    _feed(Progress(name="exp", total=30, start=20, every=5, enabled=True, interactive=False, out=out), 20, 30)
    assert [re.search(r"step (\d+)/", line).group(1) for line in out.getvalue().splitlines()] == ["25", "30"]


def test_a_terminal_gets_the_bar_and_no_lines(capsys: pytest.CaptureFixture) -> None:
    out = io.StringIO()
    progress = Progress(name="exp", total=3, start=1, every=1, enabled=True, interactive=True, out=out)
    assert progress.bar is not None and progress.bar.n == 1
    _feed(progress, 1, 3)
    assert out.getvalue() == "" and "exp" in capsys.readouterr().err


def test_disabled_is_silent() -> None:
    out = io.StringIO()
    _feed(Progress(name="exp", total=5, start=0, every=1, enabled=False, interactive=False, out=out), 0, 5)
    assert out.getvalue() == ""


def test_missing_metrics_are_left_out_of_the_line() -> None:
    line = progress_line("x", 3, 10, {"reward_mean": 1.0, "kl": None}, None)
    assert line == "[areal-adv] x step 3/10 (30%) | reward 1.000"


def test_a_run_with_redirected_output_prints_lines(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    cfg = load_config(
        ROOT / "examples" / "grpo_arith.yaml",
        [
            "rollout.batch_size=2",
            "rollout.n_samples=4",
            "model.hidden_size=32",
            "model.num_heads=2",
            "model.intermediate_size=64",
            "train.num_threads=1",
            "train.steps=3",
            "train.log_every=2",
            "output.plot=false",
            "output.loggers=[jsonl]",
            f"output.dir={tmp_path}",
        ],
    )
    Trainer(cfg).run()  # pytest captures stdout and stderr: neither is a terminal
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    # the run opens with its "what runs" block (ending with the threads line) and the kernel warm-up's line,
    # then one line per log_every steps
    end = next(i for i, line in enumerate(lines) if line.startswith("threads: "))
    assert lines[0] == "[areal-adv] grpo_arith: what runs"
    assert re.fullmatch(r"\[areal-adv\] advantage kernels ready in \d+\.\d\d s", lines[end + 1]), lines[end + 1]
    assert [line.split(" | ")[0] for line in lines[end + 2 :]] == [
        "[areal-adv] grpo_arith step 2/3 (66%)",
        "[areal-adv] grpo_arith step 3/3 (100%)",
    ]
    assert "\r" not in captured.err
