"""The benchmark scripts stay runnable: a tiny pipeline run, the TRL comparison and the matmul rate on a tiny
checkpoint, and the GPU check failing cleanly without a GPU."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import warm_python

ROOT = Path(__file__).resolve().parents[2]


def _run(module: str, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """`python -m module args` from the clone's root, as the docs run the benchmarks (forked warm)."""
    return warm_python.run(
        [sys.executable, "-m", module, *args], cwd=ROOT, timeout=600, env={**os.environ, **(env or {})}
    )


def test_pipeline_bench_runs_and_checks_its_results():
    proc = _run(
        "bench.kernels.bench_pipeline",
        "--sizes",
        "16x64",
        "--threads",
        "1",
        "--reps",
        "1",
        "--ref-reps",
        "1",
        "--tensor-reps",
        "1",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "16x64 1 thr: default token:" in proc.stdout


def test_call_agreement_bench_runs_on_two_ranks():
    proc = _run("bench.kernels.bench_call_agreement", "--sizes", "8x32", "--rounds", "1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "| PPOActorConfig() | 8 x 32 | 1 |" in proc.stdout, proc.stdout


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU exit")
def test_gpu_check_exits_cleanly_without_a_gpu():
    proc = _run("bench.kernels.bench_gae_cuda", "--quick", env={"TRITON_INTERPRET": ""})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "nothing to check" in proc.stdout


def test_threads_bench_runs_both_modes() -> None:
    proc = _run("bench.kernels.bench_threads", "--sizes", "32", "--steps", "1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "OMP_WAIT_POLICY=PASSIVE" in proc.stdout and "hidden    32  params " in proc.stdout
    proc = _run(
        "bench.kernels.bench_threads",
        "model.hidden_size=32",
        "model.num_heads=2",
        "model.intermediate_size=64",
        "--steps",
        "1",
        "--scenes",
        "quiet",
        "--variants",
        "one",
        "spincount",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "busy 0  spincount " in proc.stdout and "x1.00 of one" in proc.stdout


def _user_ticks(pid: int) -> int:
    """CPU time a process has spent in user mode, in clock ticks (/proc/<pid>/stat, field 14)."""
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[11])


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_threads_bench_busy_scene_keeps_cores_busy_and_ends_its_loops() -> None:
    """The busy scene's processes burn CPU while the runs go on and are gone after (the runs are the quiet scene's)."""
    import time

    from bench.kernels.bench_threads import busy_loops

    with busy_loops(2) as loops:
        assert len(loops) == 2 and all(p.poll() is None for p in loops)
        start = [_user_ticks(p.pid) for p in loops]
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not all(_user_ticks(p.pid) > t for p, t in zip(loops, start)):
            time.sleep(0.1)
        assert all(_user_ticks(p.pid) > t for p, t in zip(loops, start)), "a busy loop is not spinning"
    assert all(p.returncode is not None for p in loops)  # killed and reaped when the scene ends


def test_trl_comparison_runs_both_sides_on_a_tiny_checkpoint(tmp_path: Path) -> None:
    sys.path.insert(0, str(ROOT / "tests" / "trainer"))
    from checkpoint_factory import build_checkpoint

    build_checkpoint(tmp_path / "tiny")
    results = tmp_path / "vs_trl.jsonl"
    proc = _run(
        "bench.peers.bench_vs_trl",
        *("--model", str(tmp_path / "tiny"), "--rounds", "1", "--steps", "2", "--threads", "1"),
        *("--sides", "ours,ours:bf16,ours:bf16copy,trl", "--results", str(results)),
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for side in ("ours", "ours:bf16", "ours:bf16copy", "trl"):
        assert f"round 1 {side}: " in proc.stdout
        assert re.search(rf"(?m)^ *{side}: [\d.]+ s/step \(median of 2\) .* x[\d.]+ plain floor", proc.stdout), (
            proc.stdout
        )
    for pair in ("ours / trl", "ours:bf16 / ours", "ours:bf16copy / trl", "ours:bf16copy / ours"):
        assert re.search(rf"ratio {pair}: [\d.]+ \(median of 2 same-step pairs", proc.stdout), proc.stdout
    assert "ours:bf16 / trl:bf16" not in proc.stdout  # a ratio only between sides that ran
    assert re.search(r"matmul float32: [\d.]+ GFLOP/s before", proc.stdout)
    assert "trl: gradient checkpointing on" in proc.stdout  # TRL's GRPOConfig default, as its users run it
    (row,) = [json.loads(line) for line in results.read_text().splitlines()]
    assert row["trl_gradient_checkpointing"] is True
    assert set(row["medians_s"]) == {"ours", "ours:bf16", "ours:bf16copy", "trl"}
    assert set(row["pair_median_ratios"]) == {
        "ours / trl",
        "ours:bf16 / ours",
        "ours:bf16copy / trl",
        "ours:bf16copy / ours",
    }
    assert (
        row["busy"] == 0
        and row["load"]["before"]["loadavg"]
        and row["command"].startswith("python -m bench.peers.bench_vs_trl")
    )
    assert row["commit"] and row["date"].endswith("UTC") and len(row["sides"]["ours"]["steps_s"]) == 2
    assert set(row["pair_ratio_ranges"]) == set(row["pair_median_ratios"])
    report = _run("bench.peers.bench_vs_trl", "--report", "--results", str(results))
    assert report.returncode == 0, report.stderr[-3000:]
    assert "vs_trl.jsonl (1 row)" in report.stdout and "| 0 | on | " in report.stdout, report.stdout
    bad = _run("bench.peers.bench_vs_trl", "--sides", "ours,vllm")
    assert bad.returncode != 0 and "--sides: unknown ['vllm']" in bad.stderr


def test_lookup_gradient_bench_alternates_sparse_and_dense_on_a_tied_checkpoint(tmp_path: Path) -> None:
    sys.path.insert(0, str(ROOT / "tests" / "trainer"))
    from checkpoint_factory import build_checkpoint

    build_checkpoint(tmp_path / "tied", tied=True)
    results = tmp_path / "lookup.jsonl"
    proc = _run(
        "bench.peers.bench_lookup_gradient",
        *("--model", str(tmp_path / "tied"), "--pairs", "2", "--threads", "1", "--results", str(results)),
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert [line.split(":")[0] for line in proc.stdout.splitlines() if line.startswith("pair ")] == [
        "pair 0 dense ",
        "pair 0 sparse",
        "pair 1 sparse",
        "pair 1 dense ",
    ]
    assert re.search(r"sparse / dense [\d.]+ \(median of 2 pairs", proc.stdout), proc.stdout
    (row,) = [json.loads(line) for line in results.read_text().splitlines()]
    assert row["bench"] == "lookup_gradient" and row["command"].startswith(
        "python -m bench.peers.bench_lookup_gradient --model"
    )
    assert row["commit"] and row["started"] <= row["date"] and row["load"]["before"]["loadavg"]
    assert len(row["update_s"]["sparse"]) == len(row["update_s"]["dense"]) == len(row["ratios"]) == 2
    report = _run("bench.peers.bench_lookup_gradient", "--report", "--results", str(results))
    assert report.returncode == 0, report.stderr[-3000:]
    assert "| tied | 1 | " in report.stdout and "lookup.jsonl (1 row)" in report.stdout, report.stdout
    build_checkpoint(tmp_path / "untied")
    untied = _run("bench.peers.bench_lookup_gradient", "--model", str(tmp_path / "untied"), "--pairs", "1")
    assert untied.returncode != 0 and "no tied lookup table" in untied.stderr


def test_matmul_bench_prints_rates_and_the_step_floor() -> None:
    proc = _run("bench.kernels.bench_matmul", "--threads", "1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert re.search(r"rate: +[\d.]+ GFLOP/s float32, 1 thread", proc.stdout)


def _two_profiled_rounds_on_a_tiny_checkpoint(
    tmp_path: Path, script: str, configs: tuple[str, str, str]
) -> tuple[dict, Path]:
    """Run `script --reps 2 --profile --results` on a tiny tied checkpoint; its one row and the results file.

    Each round must time every configuration once, the order rotating by one.
    """
    sys.path.insert(0, str(ROOT / "tests" / "trainer"))
    from checkpoint_factory import build_checkpoint

    build_checkpoint(tmp_path / "tiny", tied=True)
    results = tmp_path / "results.jsonl"
    proc = _run(script, *("--model", str(tmp_path / "tiny"), "--reps", "2", "--profile", "--results", str(results)))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rounds = re.findall(r"(?m)^round (\d) (.+?) +[\d.]+ s$", proc.stdout)
    a, b, c = configs
    assert rounds == [("0", a), ("0", b), ("0", c), ("1", b), ("1", c), ("1", a)], proc.stdout
    (row,) = [json.loads(line) for line in results.read_text().splitlines()]
    return row, results


def test_decode_bench_writes_a_row_and_reports_it(tmp_path: Path) -> None:
    configs = ("float32, 1 thread", "float32, 2 threads", "bf16 autocast, 2 threads")
    row, results = _two_profiled_rounds_on_a_tiny_checkpoint(tmp_path, "bench.real_model.bench_decode", configs)
    assert row["bench"] == "decode" and row["command"].startswith("python -m bench.real_model.bench_decode --model")
    assert row["commit"] and row["load"]["after"]["loadavg"] and row["work"]["rows"] == 16
    assert all(len(t) == 2 for t in row["times_s"].values()) and len(row["times_s"]) == 3
    assert set(row["ratios"]) == {"2 threads / 1 thread (float32)", "bf16 / float32 (2 threads)"}
    assert row["profile"]["ops"] and any(op["op"] == "aten::mm" for op in row["profile"]["ops"])
    report = _run("bench.real_model.bench_decode", "--report", "--results", str(results))
    assert report.returncode == 0, report.stderr[-3000:]
    assert "| tiny | " in report.stdout and "| `aten::mm` |" in report.stdout, report.stdout


@pytest.mark.parametrize(
    "script", ["bench.real_model.bench_decode", "bench.peers.bench_lookup_gradient", "bench.peers.bench_vs_trl"]
)
def test_the_docs_block_is_what_the_committed_rows_give(script: str) -> None:
    """docs/performance.md's generated block of each benchmark is its report of bench/results/, unedited."""
    import importlib

    from bench import bench_rows

    module = importlib.import_module(script)
    rows = bench_rows.read(module.RESULTS)
    assert rows, f"no rows in {module.RESULTS}"
    expected = module.report_text(rows, module.RESULTS)
    assert bench_rows.block(bench_rows.PERFORMANCE_DOC, module.DOC_BLOCK) == expected, (
        f"docs/performance.md's {module.DOC_BLOCK} block is stale: run {module.REPORT_COMMAND}"
    )


def test_the_rollout_copy_learning_block_is_what_the_committed_rows_give() -> None:
    """docs/performance.md's table of the bf16-copy learning campaign is its report of bench/results/, unedited."""
    from bench import bench_rows
    from bench.real_model import rollout_copy_report

    runs = rollout_copy_report.latest_runs(bench_rows.read(rollout_copy_report.RUNS))
    assert {arm for arm, _ in runs} == set(rollout_copy_report.ARMS), sorted(runs)
    assert bench_rows.block(bench_rows.PERFORMANCE_DOC, rollout_copy_report.BLOCK) == (
        rollout_copy_report.report().strip("\n")
    ), (
        "docs/performance.md's rollout_copy_learning block is stale: "
        "run .venv/bin/python -m bench.real_model.rollout_copy_report --write-docs"
    )


def test_rollout_copy_bench_writes_a_row_with_its_profiles(tmp_path: Path) -> None:
    configs = ("float32", "bf16 autocast", "bf16 copy")
    row, _ = _two_profiled_rounds_on_a_tiny_checkpoint(tmp_path, "bench.real_model.bench_rollout_copy", configs)
    assert row["bench"] == "rollout_copy" and row["commit"] and row["load"]["after"]["loadavg"]
    assert set(row["ratios"]) == {"bf16 autocast / float32", "bf16 copy / float32"}
    assert set(row["profiles"]) == {"float32", "bf16 copy"}
    assert all(any(op["op"] == "aten::mm" for op in p["ops"]) for p in row["profiles"].values())
    assert set(row["mismatch"]) >= {"rollout_mismatch/kl", "rollout_mismatch/imp_weight_max"}


def test_the_threads_bench_reads_every_form_of_the_run_s_closing_line() -> None:
    import importlib.util

    from areal_adv.trainer.run.loop import RunResult

    spec = importlib.util.spec_from_file_location("bench_threads", ROOT / "bench" / "kernels" / "bench_threads.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for first, last, reward in ((5, 10, ("0.250", "0.500")), (1, 2, ("0.250", "0.500")), (1, 0, ("0.250", "0.250"))):
        line = RunResult(Path("r"), Path("r/metrics.jsonl"), None, 3, False, 1.5, 0.25, 0.5, first, last).summary(
            "x", 3
        )
        match = module.LOOP.search(line)
        assert match is not None, line
        got = (match.group(4), match.group(5)) if match.group(6) is None else (match.group(6),) * 2
        assert (match.group(1), match.group(3), got) == ("3", "1.5", reward), line
