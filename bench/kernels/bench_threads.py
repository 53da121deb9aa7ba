"""Training-loop time by thread count and OpenMP wait policy, on a quiet machine and beside busy processes.

Usage:
    .venv/bin/python -m bench.kernels.bench_threads                       # default run, 100 steps, the four settings
    .venv/bin/python -m bench.kernels.bench_threads --steps 30 --rounds 2 --variants default one passive spin
    .venv/bin/python -m bench.kernels.bench_threads --sizes 64 128 256 512 --steps 20   # 1 vs 2 threads by model size

Every run is a separate process of the real command (`scripts/train.sh` for the
default and one-thread settings, as a user types it; `python -m
areal_adv.trainer.main` where the environment is the variable), writing into a
temporary folder, and the time is the training loop the run reports ("N/N steps
in X s"), so start-up and imports are left out. "busy" starts `--busy` processes
`python3 -c "while True: pass"` (default: one per core) before the run and ends
them after it. Settings alternate within each round (the order flips every
round), so load from elsewhere hits them alike; each row also prints the final
reward, which should agree between settings. `--sizes` instead builds one
trainer per hidden size and alternates 1 and <cores> threads step by step in
that process (how `SMALL_MODEL_PARAMS` was chosen). Results go in
docs/performance.md.

Variants (`--variants`):
  default   nothing set: the entry point's choice of threads and wait policy
  one       train.num_threads=1
  spin      train.num_threads=<cores>, libgomp's own spin-then-sleep waiting: torch is imported before the
            entry module runs, so `OMP_WAIT_POLICY` set there has no effect (the behaviour before passive waiting became the default)
  passive   train.num_threads=<cores>, OMP_WAIT_POLICY=PASSIVE
  spincount train.num_threads=<cores>, GOMP_SPINCOUNT=0
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from bench import bench_rows

ROOT = Path(__file__).resolve().parents[2]
PYTHON = str(ROOT / ".venv" / "bin" / "python") if (ROOT / ".venv" / "bin" / "python").exists() else sys.executable
#: the run's closing line: "N/N steps in X s | reward first 5 steps a -> last 10 steps b" (shorter runs
#: name "first step" / "last 2 steps"; a one-step run prints "reward a (one step)", read as a -> a)
LOOP = re.compile(
    r"(\d+)/(\d+) steps in ([0-9.]+)s \| reward "
    r"(?:first (?:\d+ steps|step) (\S+) -> last (?:\d+ steps|step) (\S+)|(\S+) \(one step\))"
)
#: torch first, then the entry module: libgomp has read its environment before the module could set it.
_TORCH_FIRST = (
    "import sys, runpy, torch; sys.argv = ['areal_adv.trainer.main', *sys.argv[1:]]; "
    "runpy.run_module('areal_adv.trainer.main', run_name='__main__')"
)


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OMP_NUM_THREADS")}


def command(variant: str, args: Sequence[str]) -> tuple[list[str], dict[str, str]]:
    """(argv, environment) of one run of `variant` with the trainer arguments `args`."""
    env, cores = _clean_env(), str(_cores())
    if variant == "default":
        return [str(ROOT / "scripts" / "train.sh"), *args], env
    if variant == "one":
        return [str(ROOT / "scripts" / "train.sh"), *args, "train.num_threads=1"], env
    if variant == "spin":
        return [PYTHON, "-c", _TORCH_FIRST, *args, f"train.num_threads={cores}"], env
    if variant == "passive":
        return [PYTHON, "-m", "areal_adv.trainer.main", *args, f"train.num_threads={cores}"], {
            **env,
            "OMP_WAIT_POLICY": "PASSIVE",
        }
    if variant == "spincount":
        return [PYTHON, "-m", "areal_adv.trainer.main", *args, f"train.num_threads={cores}"], {
            **env,
            "GOMP_SPINCOUNT": "0",
        }
    raise SystemExit(f"unknown variant {variant!r}")


@contextmanager
def busy_loops(n: int) -> Iterator[list[subprocess.Popen]]:
    """`n` processes spinning in a Python loop (one core each) for the duration of the block."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        yield procs
    finally:
        for proc in procs:
            proc.kill()
        for proc in procs:
            proc.wait()


def run_once(variant: str, args: Sequence[str], out: Path, tag: str) -> tuple[float, str]:
    """(loop seconds, 'first5 -> last10' reward) of one run."""
    argv, env = command(
        variant, [*args, f"output.dir={out}", f"trial_name={tag}", "output.progress_bar=false", "output.plot=false"]
    )
    proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=3600)
    match = LOOP.search(proc.stdout)
    if proc.returncode != 0 or match is None:
        raise SystemExit(f"{variant}: exit {proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    first, last = (match.group(4), match.group(5)) if match.group(6) is None else (match.group(6),) * 2
    return loop_seconds(out, tag, float(match.group(3))), f"{first} -> {last}"


def loop_seconds(out: Path, tag: str, printed: float) -> float:
    """The run's step seconds summed from its metrics file (the printed total has 0.1 s resolution)."""
    files = sorted(out.glob(f"**/{tag}/metrics.jsonl"))
    if not files:
        return printed
    from areal_adv.trainer.run.metrics import read_metrics  # the trainer's own reader (a torn last line is skipped)

    rows = read_metrics(files[0])
    steps = [float(r["seconds"]) for r in rows if isinstance(r.get("seconds"), int | float)]
    return sum(steps) if steps else printed


def measure(variants: Sequence[str], scenes: Sequence[int], args: Sequence[str], rounds: int) -> dict:
    """{(busy, variant): [loop seconds per round]}, settings alternating, order flipped every round."""
    times: dict[tuple[int, str], list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="bench_threads_") as tmp:
        # untimed: numba compiles (and caches) its kernels in the first process that calls them
        run_once(variants[0], [*args, "train.steps=2"], Path(tmp), "warmup")
        for r in range(rounds):
            order = list(variants) if r % 2 == 0 else list(reversed(variants))
            for busy in scenes:
                with busy_loops(busy):
                    for variant in order:
                        seconds, reward = run_once(variant, args, Path(tmp), f"r{r}_{busy}_{variant}".replace("=", ""))
                        times.setdefault((busy, variant), []).append(seconds)
                        print(
                            f"round {r}  busy {busy}  {variant:<10} loop {seconds:7.1f} s  reward {reward}  "
                            f"[{bench_rows.pressure_text()}]",
                            flush=True,
                        )
    return times


def summarise(times: dict, reference: str) -> None:
    print("\nsummary (median loop seconds; ratio to the reference setting in the same scene):")
    for (busy, variant), values in sorted(times.items()):
        ref = statistics.median(times[(busy, reference)]) if (busy, reference) in times else None
        med = statistics.median(values)
        ratio = f"  x{med / ref:.2f} of {reference}" if ref else ""
        print(f"  busy {busy}  {variant:<10} {med:7.2f} s  (runs: {', '.join(f'{v:.2f}' for v in values)}){ratio}")


def scaling(hidden_sizes: Sequence[int], steps: int, overrides: Sequence[str]) -> None:
    """Per hidden size: one Trainer, steps alternating 1 and <cores> threads (passive waiting), median step times.

    In one process, step by step, so load from elsewhere hits both counts alike.
    Two numbers per count: the wall time of a step, and the CPU time of the main
    thread (`time.thread_time`), which time slices lost to other processes do not
    inflate: with one thread it is the step's whole work, with more it is the
    main thread's share plus the serial parts, so 1-thread CPU / main-thread CPU
    estimates the speed-up on an idle machine (an upper bound: waits for a worker
    are not counted). The parameter count is the policy's (what
    `SMALL_MODEL_PARAMS` compares).
    """
    from areal_adv.trainer.parallel.launch_env import prefer_passive_waiting

    prefer_passive_waiting()  # torch is not imported yet in this process
    import time

    import torch

    from areal_adv.api.cli_args import load_config
    from areal_adv.trainer.parallel.cpu_threads import apply_num_threads
    from areal_adv.trainer.run.loop import Trainer

    cores = _cores()
    print(f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')}; steps alternate 1 / {cores} threads; medians")
    for hidden in hidden_sizes:
        size = [
            f"model.hidden_size={hidden}",
            f"model.intermediate_size={2 * hidden}",
            f"model.num_heads={max(1, hidden // 16)}",
        ]
        with tempfile.TemporaryDirectory(prefix="bench_threads_") as tmp:
            cfg = load_config(
                str(ROOT / "examples" / "grpo_arith.yaml"),
                [f"output.dir={tmp}", "output.loggers=[]", "output.plot=false", *size, *overrides],
            )
            trainer = Trainer(cfg)
            n_params = sum(p.numel() for p in trainer.policy.parameters())
            wall: dict[int, list[float]] = {1: [], cores: []}
            cpu: dict[int, list[float]] = {1: [], cores: []}
            for step in range(2 * steps + 2):
                threads = 1 if step % 2 == 0 else cores
                apply_num_threads(threads)
                start, start_cpu = time.perf_counter(), time.thread_time()
                trainer.step(step)
                if step >= 2:  # the first two: numba compiles, caches warm up
                    wall[threads].append(time.perf_counter() - start)
                    cpu[threads].append(time.thread_time() - start_cpu)
            w1, wn, c1, cn = (sorted(v)[len(v) // 2] for v in (wall[1], wall[cores], cpu[1], cpu[cores]))
            print(
                f"hidden {hidden:5d}  params {n_params / 1e6:7.3f} M | wall 1 thr {w1 * 1e3:8.1f} ms, {cores} thr "
                f"{wn * 1e3:8.1f} ms, 1/{cores} {w1 / wn:5.2f} | main-thread CPU 1 thr {c1 * 1e3:8.1f} ms, {cores} thr "
                f"{cn * 1e3:8.1f} ms, 1/{cores} {c1 / cn:5.2f}  [{bench_rows.pressure_text()}]",
                flush=True,
            )
            torch.set_num_threads(cores)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--busy", type=int, default=_cores(), help="busy-loop processes in the busy scene")
    parser.add_argument("--scenes", nargs="+", choices=("quiet", "busy"), default=["quiet", "busy"])
    parser.add_argument("--variants", nargs="+", default=["one", "default", "passive", "spincount"])
    parser.add_argument(
        "--sizes",
        nargs="+",
        type=int,
        help="hidden sizes: steps alternating 1 and <cores> threads in one process per size",
    )
    parser.add_argument("overrides", nargs="*", help="more trainer overrides, e.g. --config FILE key=value")
    args = parser.parse_intermixed_args()  # overrides before or between the options
    print(f"cores {_cores()}, python {PYTHON}, {bench_rows.pressure_text()}")
    if args.sizes:
        scaling(args.sizes, args.steps, args.overrides)
        return
    scenes = [0 if s == "quiet" else args.busy for s in args.scenes]
    base = [f"train.steps={args.steps}", "train.save_every=0", *args.overrides]
    summarise(measure(args.variants, scenes, base, args.rounds), reference="one")


if __name__ == "__main__":
    main()
