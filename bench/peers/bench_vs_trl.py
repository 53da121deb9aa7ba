"""GRPO step time against TRL 1.16's `GRPOTrainer` on the same work, the two alternating step by step.

Usage:
    .venv/bin/python -m bench.peers.bench_vs_trl                   # quiet: 1 warm-up + 8 timed steps per side
    .venv/bin/python -m bench.peers.bench_vs_trl --busy 2          # two busy-loop processes beside both sides
    .venv/bin/python -m bench.peers.bench_vs_trl --steps 4 --rounds 2 --model PATH
    .venv/bin/python -m bench.peers.bench_vs_trl --sides ours,ours:bf16,trl,trl:bf16   # bf16 autocast on both sides too
    .venv/bin/python -m bench.peers.bench_vs_trl --sides ours,ours:bf16copy,trl   # ours sampling from the bf16 copy

The work (the same on both sides): SmolLM2-135M-Instruct (float32, the folder
`examples/real_model/install.sh` converts), 64 chat prompts "What is a + b?
Answer with the number only." (a, b < 100, fixed seed), an exact-answer reward
(`exact_answer`, one function for both), 4 prompts x 4 completions per step,
at most 16 new tokens, temperature 1 (no top-k / top-p), no KL term and no
reference model, one optimiser step per batch (AdamW, lr 1e-6, gradient
clipping at 1), no evaluation, no checkpoints. TRL runs `GRPOTrainer` with
`transformers` generation on CPU (`use_cpu=True`); ours runs
`areal_adv.trainer.run.loop.Trainer`. Both end a turn at `<|im_end|>`.
TRL keeps its `GRPOConfig` default of gradient checkpointing (each block's
forward runs again during the backward, to save memory; ours recomputes
nothing): on this work it is also TRL's faster setting (12.80 s a step
without it, 11.60 s with it, two quiet runs of docs/performance.md), so the
comparison is with TRL as its users run it. `--trl-no-gradient-checkpointing`
turns it off. Each TRL worker reports whether its model checkpoints, and the
run prints it.

Each side is one long-lived subprocess per round (model loaded once); the
driver lets them take turns, one step at a time (ours then TRL on even steps,
TRL then ours on odd ones), while the other waits idle on a pipe, so a change
of the machine's load hits the two steps of a pair alike. Both get the same
environment: `OMP_WAIT_POLICY=PASSIVE` (idle OpenMP threads sleep instead of
spinning, which matters on busy cores) and `--threads` intra-op threads. A
step's time: ours `Trainer.step` (rollout, rewards, advantages, update,
metrics); TRL from its `on_step_begin` to its `on_step_end` callback
(generation, rewards, loss, backward, optimiser). The first step of each
process is a warm-up. Printed: each side's median, the median of the per-pair
ratios, and each median as a multiple of two floors (`bench_matmul`: the
machine's float32 matmul rate, measured before and after, and the FLOPs of the
side's own mean step: plain, every row's prompt computed for itself as TRL
does, and shared-prefix, a group's prompt once). `--busy N` starts N processes
that spin in a Python loop for the whole run. Results go into
docs/performance.md.

A side named `NAME:bf16` is the same worker with bfloat16 autocast and float32
master weights: ours with `model.mixed_precision: bf16`, TRL with its
`bf16=True` (accelerate's CPU autocast). `ours:bf16copy` trains in float32 and
samples from the bfloat16 copy (`rollout.weights_dtype: bfloat16`, refreshed by
one cast after each update) with AReaL's decoupled correction
(`actor.use_decoupled_loss`, `behav_imp_weight_cap: 5`): its step includes the
float32 log-prob pass that the correction needs. Every ratio between two sides that
differ in one thing (ours / TRL at one precision, bf16 / float32 on one side)
is printed, and with `--results FILE` one JSON row per run is appended there: the
command, commit, UTC date, the load before and after (load averages and
/proc/pressure/cpu), the matmul rates, each side's step times, tokens, floors,
phases and peak RSS, and every ratio with its range (bench/bench_rows.py).
`--report` rebuilds the table of the rows in bench/results/vs_trl.jsonl (rows
written before these fields existed show what they hold); `--write-docs` writes
it between the `bench_vs_trl` markers of docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

N_PROMPTS, PROMPTS_PER_STEP, GROUP, MAX_NEW_TOKENS, LR, SEED = 64, 4, 4, 16, 1e-6, 0
DEFAULT_MODEL = ROOT / "runs" / "models" / "SmolLM2-135M-Instruct"
RESULTS = ROOT / "bench" / "results" / "vs_trl.jsonl"
DOC_BLOCK = "bench_vs_trl"
REPORT_COMMAND = ".venv/bin/python -m bench.peers.bench_vs_trl --report --write-docs"
SIDES = ("ours", "trl", "ours:bf16", "trl:bf16", "ours:bf16copy")
#: (numerator, denominator) side pairs whose step-time ratio is printed when both ran: one difference each
RATIOS = (
    ("ours", "trl"),
    ("ours:bf16", "trl:bf16"),
    ("ours:bf16", "ours"),
    ("trl:bf16", "trl"),
    ("ours:bf16copy", "trl"),
    ("ours:bf16copy", "ours"),
)
#: `ours:bf16copy`: float32 training, rollouts sampled from the bfloat16 copy, AReaL's decoupled correction
BF16_COPY_CAP = 5.0


def prompt_rows(n: int = N_PROMPTS, seed: int = SEED) -> list[dict[str, str]]:
    """`n` rows {prompt, answer}: "What is a + b? Answer with the number only." with a, b in [0, 99]."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        a, b = rng.randrange(100), rng.randrange(100)
        rows.append({"prompt": f"What is {a} + {b}? Answer with the number only.", "answer": str(a + b)})
    return rows


def _text(completion: Any) -> str:
    """A completion as text: TRL passes chat completions as [{"role": "assistant", "content": ...}]."""
    if isinstance(completion, list):
        return "".join(str(m.get("content", "")) for m in completion)
    return str(completion)


def exact_answer(prompts: Sequence[Any], completions: Sequence[Any], answer: Sequence[str], **_: Any) -> list[float]:
    """1.0 when the stripped completion is exactly the answer, else 0.0 (TRL's reward convention)."""
    return [1.0 if _text(c).strip() == str(a) else 0.0 for c, a in zip(completions, answer)]


# ---------------------------------------------------------------------------
# the two workers (each runs in its own process and writes one JSON file)
# ---------------------------------------------------------------------------


def ours_config(
    model: str, data: Path, out: Path, steps: int, threads: int, precision: str | None = None
) -> dict[str, Any]:
    config: dict[str, Any] = {
        "experiment_name": "bench_vs_trl",
        "seed": SEED,
        "model": {
            "path": model,
            "attn_implementation": "sdpa",
            "mixed_precision": "bf16" if precision == "bf16" else None,
        },
        "task": {"implementation": "dataset", "kwargs": {"chat": True}},
        "data": {"train": str(data), "shuffle": True},
        "reward": [{"implementation": "bench.peers.bench_vs_trl.exact_answer"}],
        "rollout": {"batch_size": PROMPTS_PER_STEP, "n_samples": GROUP},
        "critic": {"enabled": False},
        "actor": {
            "max_new_tokens": MAX_NEW_TOKENS,
            "temperature": 1.0,
            "kl_ctl": 0.0,
            "reward_norm": {"mean_level": "group", "std_level": "group"},
            "adv_norm": None,
            "eps_clip": 0.2,
            "ppo_n_minibatches": 1,
        },
        "eval": {"every": None, "samples_per_step": 0},
        "train": {"steps": steps, "lr": LR, "grad_clip": 1.0, "num_threads": threads, "save_every": 0, "log_every": 1},
        "output": {"dir": str(out), "plot": False, "progress_bar": False, "loggers": ["jsonl"], "overwrite": True},
    }
    if precision == "bf16copy":  # float32 training; samples from the bf16 copy, the mismatch corrected
        config["rollout"]["weights_dtype"] = "bfloat16"
        config["actor"].update(use_decoupled_loss=True, behav_imp_weight_cap=BF16_COPY_CAP)
    return config


class Channel:
    """A worker's side of the driver's protocol: wait for "go" on stdin, report one JSON line on a pipe."""

    def __init__(self, fd: int) -> None:
        self.out = os.fdopen(fd, "w", buffering=1)

    def wait(self) -> None:
        if sys.stdin.readline().strip() != "go":
            raise SystemExit(0)  # the driver closed the pipe: done

    def send(self, message: dict[str, Any]) -> None:
        self.out.write(json.dumps(message) + "\n")


def run_ours(
    model: str, data: Path, out: Path, steps: int, threads: int, channel: Channel, precision: str | None = None
) -> None:
    """Our trainer, one step per "go": its wall time, the rows' token counts and the step's phase times."""
    from areal_adv.api.cli_args import load_config
    from areal_adv.trainer.run.loop import Trainer

    trainer = Trainer(load_config(ours_config(model, data, out, steps, threads, precision)))
    channel.send({"ready": True})
    for step in range(steps):
        channel.wait()
        start = time.perf_counter()
        output = trainer.step(step)
        seconds = time.perf_counter() - start
        mask, attn = output.data["loss_mask"], output.data["attention_mask"]
        generated = mask.sum(-1)
        channel.send(
            {
                "seconds": seconds,
                "prompt": (attn.sum(-1) - generated).tolist(),
                "completion": generated.tolist(),
                "peak_rss_gib": _peak_rss_gib(),
                "phases": {k: v for k, v in output.metrics.items() if k.startswith("time/")},
            }
        )


def _step_clock(channel: Channel) -> Any:
    """A `transformers` callback: each optimiser step starts on "go" and reports its wall time at its end."""
    from transformers import TrainerCallback

    class StepClock(TrainerCallback):
        start = 0.0

        def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            channel.wait()
            self.start = time.perf_counter()

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            seconds = time.perf_counter() - self.start
            # the Trainer turns checkpointing on inside train(): read it off the model the step ran
            model = kwargs.get("model")
            ckpt = bool(getattr(model, "is_gradient_checkpointing", False))
            report = {"seconds": seconds, "prompt": None, "completion": None, "peak_rss_gib": _peak_rss_gib()}
            channel.send({**report, "gradient_checkpointing": ckpt})

    return StepClock()


def _trl_trainer(
    model: str,
    rows: list[dict[str, str]],
    out: Path,
    steps: int,
    precision: str | None = None,
    checkpointing: bool = True,
) -> Any:
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    data = Dataset.from_list(
        [{"prompt": [{"role": "user", "content": r["prompt"]}], "answer": r["answer"]} for r in rows]
    )
    args = GRPOConfig(
        output_dir=str(out),
        per_device_train_batch_size=PROMPTS_PER_STEP * GROUP,
        num_generations=GROUP,
        gradient_accumulation_steps=1,
        num_iterations=1,
        max_completion_length=MAX_NEW_TOKENS,
        temperature=1.0,
        top_k=0,
        top_p=1.0,
        beta=0.0,
        epsilon=0.2,
        learning_rate=LR,
        max_grad_norm=1.0,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.0,
        max_steps=steps,
        logging_steps=1,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
        bf16=precision == "bf16",
        fp16=False,
        gradient_checkpointing=checkpointing,  # TRL's default (True) unless --trl-no-gradient-checkpointing
        seed=SEED,
        dataloader_num_workers=0,
        log_completions=False,
        disable_tqdm=True,
    )
    policy = AutoModelForCausalLM.from_pretrained(
        model, local_files_only=True, dtype="float32", attn_implementation="sdpa"
    )
    tokenizer = AutoTokenizer.from_pretrained(model, local_files_only=True)
    # the GGUF-converted tokenizer names <|im_start|> as its eos; TRL stops only at the tokenizer's eos, ours
    # at the tokenizer's and the checkpoint's (<|im_end|>): end TRL's turns at <|im_end|> too, as ours end
    if "<|im_end|>" in tokenizer.get_vocab():
        tokenizer.eos_token = "<|im_end|>"
    return GRPOTrainer(
        model=policy, reward_funcs=exact_answer, args=args, train_dataset=data, processing_class=tokenizer
    )


def run_trl(
    model: str,
    rows: list[dict[str, str]],
    out: Path,
    steps: int,
    threads: int,
    channel: Channel,
    precision: str | None = None,
    checkpointing: bool = True,
) -> None:
    """TRL's GRPOTrainer, one optimiser step per "go" (its logged completion lengths are read afterwards)."""
    import torch

    torch.set_num_threads(threads)
    trainer = _trl_trainer(model, rows, out, steps, precision, checkpointing)
    trainer.add_callback(_step_clock(channel))
    channel.send({"ready": True})
    trainer.train()
    lengths = [h["completions/mean_length"] for h in trainer.state.log_history if "completions/mean_length" in h]
    channel.send({"completion_means": lengths})


def _peak_rss_gib() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def prompt_lengths(model: str, rows: list[dict[str, str]]) -> list[int]:
    """Each prompt's token count once rendered with the chat template (both sides render it the same way)."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model, local_files_only=True)
    return [
        len(
            tok.apply_chat_template(
                [{"role": "user", "content": r["prompt"]}], add_generation_prompt=True, tokenize=True, return_dict=True
            )["input_ids"]
        )
        for r in rows
    ]


def worker(args: argparse.Namespace) -> None:
    channel = Channel(args.report_fd)
    rows = prompt_rows()
    with tempfile.TemporaryDirectory(prefix="bench_vs_trl_") as tmp:
        tmp_path = Path(tmp)
        if args.worker == "ours":
            data = tmp_path / "prompts.jsonl"
            data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
            run_ours(args.model, data, tmp_path / "runs", args.steps, args.threads, channel, args.precision)
        else:
            run_trl(
                args.model,
                rows,
                tmp_path / "trl",
                args.steps,
                args.threads,
                channel,
                args.precision,
                not args.trl_no_gradient_checkpointing,
            )


# ---------------------------------------------------------------------------
# the driver
# ---------------------------------------------------------------------------


def _env(threads: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    env.update(
        OMP_WAIT_POLICY="PASSIVE",
        TOKENIZERS_PARALLELISM="false",
        PYTHONPATH=str(ROOT),
        TRANSFORMERS_VERBOSITY="error",
        HF_HUB_OFFLINE="1",
    )
    return env


class Side:
    """One worker process of the driver: started, told "go" step by step, its one-line JSON reports read."""

    def __init__(self, name: str, args: argparse.Namespace, tmp: Path) -> None:
        read, write = os.pipe()
        self.name, self.log_path = name, tmp / f"{name.replace(':', '_')}.log"
        base, _, precision = name.partition(":")
        cmd = [
            sys.executable,
            "-m",
            "bench.peers.bench_vs_trl",
            "--worker",
            base,
            *(["--precision", precision] if precision else []),
            *(["--trl-no-gradient-checkpointing"] if args.trl_no_gradient_checkpointing else []),
            "--report-fd",
            str(write),
            "--steps",
            str(args.steps + 1),
            "--threads",
            str(args.threads),
            "--model",
            str(args.model),
        ]
        with open(self.log_path, "w", encoding="utf-8") as log:
            self.proc = subprocess.Popen(
                cmd,
                stdin=subprocess.PIPE,
                stdout=log,
                stderr=subprocess.STDOUT,
                pass_fds=(write,),
                text=True,
                env=_env(args.threads),
                cwd=ROOT,
            )
        os.close(write)
        self.reports = os.fdopen(read, "r")

    def receive(self) -> dict[str, Any]:
        line = self.reports.readline()
        if not line:
            self.proc.wait(timeout=60)
            tail = self.log_path.read_text(encoding="utf-8", errors="replace")[-5000:]
            raise SystemExit(f"{self.name} worker stopped (exit {self.proc.returncode}):\n{tail}")
        return json.loads(line)

    def step(self) -> dict[str, Any]:
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()
        return self.receive()

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=300)
        self.reports.close()


def run_round(args: argparse.Namespace, sides: list[str], tmp: Path) -> dict[str, list[dict[str, Any]]]:
    """Both workers alive; steps taken in turn (the order flips every step); the warm-up step included."""
    workers = {name: Side(name, args, tmp) for name in sides}
    try:
        for worker_side in workers.values():
            worker_side.receive()  # ready: model loaded
        steps: dict[str, list[dict[str, Any]]] = {name: [] for name in sides}
        for i in range(args.steps + 1):
            for name in sides if i % 2 == 0 else sides[::-1]:
                steps[name].append(workers[name].step())
        for name in sides:  # TRL's logged mean completion length of every step
            if name.partition(":")[0] == "trl":
                ckpt = {bool(s.get("gradient_checkpointing")) for s in steps[name]}
                print(f"{name}: gradient checkpointing {' and '.join('on' if c else 'off' for c in sorted(ckpt))}")
                for report, mean in zip(steps[name], workers[name].receive()["completion_means"]):
                    report["completion"] = [mean] * (PROMPTS_PER_STEP * GROUP)
    finally:
        for worker_side in workers.values():
            worker_side.close()
    return steps


def _step_times(steps: list[dict[str, Any]]) -> list[float]:
    """Seconds of the timed steps (the first, a warm-up, left out)."""
    return [s["seconds"] for s in steps[1:]]


#: a Python loop that spins until its parent is gone (checked every few million turns), so loops outlive
#: neither a finished run nor a driver that was killed before it could end them
#: (the parent's pid comes as an argument: read in the child, it could already be init's)
SPIN_WHILE_PARENT = "import os, sys\nwhile os.getppid() == int(sys.argv[1]):\n    for _ in range(5_000_000): pass"


def _busy_loops(n: int) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", SPIN_WHILE_PARENT, str(os.getpid())]) for _ in range(n)]


def _mean_tokens(rounds: list[list[dict[str, Any]]], prompt_len: float) -> tuple[float, float]:
    """Mean prompt and completion tokens per row over the timed steps of one side."""
    prompts, completions = [], []
    for steps in rounds:
        for step in steps[1:]:
            completions += step["completion"]
            prompts += step["prompt"] if step["prompt"] is not None else [prompt_len] * len(step["completion"])
    return statistics.mean(prompts), statistics.mean(completions)


def _floors(shape: Any, prompt: float, completion: float) -> dict[str, float]:
    """FLOPs of a mean step: plain (every row's prompt) and shared-prefix (one prompt per group)."""
    from bench.kernels.bench_matmul import step_flops

    rows = PROMPTS_PER_STEP * GROUP
    prompts, completions = [round(prompt)] * rows, [round(completion)] * rows
    return {
        "plain": step_flops(shape, prompts, completions)["total"],
        "shared": step_flops(shape, prompts, completions, group=GROUP)["total"],
    }


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=1, help="fresh worker processes per round")
    parser.add_argument("--steps", type=int, default=8, help="timed steps per side and round (after one warm-up)")
    parser.add_argument("--busy", type=int, default=0, help="busy-loop processes running beside both sides")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--model", default=str(DEFAULT_MODEL))
    parser.add_argument(
        "--sides",
        default="ours,trl",
        help="comma-separated: ours, trl, ours:bf16, trl:bf16 (bf16 autocast), ours:bf16copy (float32 training, "
        "sampling from the bfloat16 copy, decoupled correction)",
    )
    parser.add_argument("--results", type=Path, default=None, help="append one JSON row per run (JSONL)")
    parser.add_argument(
        "--trl-no-gradient-checkpointing",
        action="store_true",
        help="turn off TRL's default gradient checkpointing (ours recomputes no activations)",
    )
    parser.add_argument("--report", action="store_true", help="print the table of the rows in --results")
    parser.add_argument("--write-docs", action="store_true", help="with --report: write it into --doc")
    parser.add_argument("--doc", type=Path, default=ROOT / "docs" / "performance.md")
    parser.add_argument("--worker", choices=["ours", "trl"], help=argparse.SUPPRESS)
    parser.add_argument("--precision", choices=["bf16", "bf16copy"], default=None, help=argparse.SUPPRESS)
    parser.add_argument("--report-fd", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    bad = [s for s in args.sides.split(",") if s not in SIDES]
    if bad:
        raise SystemExit(f"--sides: unknown {bad}, expected some of {list(SIDES)}")
    if args.worker:
        worker(args)
        return
    if args.report:
        show_report(args.results or RESULTS, args.doc if args.write_docs else None)
        return
    if not Path(args.model, "config.json").is_file():
        raise SystemExit(f"--model {args.model}: no converted checkpoint there; run examples/real_model/install.sh")
    drive(args)


def drive(args: argparse.Namespace) -> None:
    from transformers import AutoConfig

    from bench.kernels.bench_matmul import DecoderShape, matmul_gflops

    sides = args.sides.split(",")
    from bench import bench_rows

    origin = bench_rows.provenance("bench.peers.bench_vs_trl")  # the code as the run starts
    busy = _busy_loops(args.busy)
    load = {"before": bench_rows.load_now()}
    try:
        print(
            f"load before: {bench_rows.load_text()} | busy loops: {args.busy} | threads: {args.threads} | OMP_WAIT_POLICY=PASSIVE",
            flush=True,
        )
        rate_before = matmul_gflops(args.threads)["rate"]
        results: dict[str, list[list[dict[str, Any]]]] = {s: [] for s in sides}
        with tempfile.TemporaryDirectory(prefix="bench_vs_trl_") as tmp:
            for r in range(args.rounds):
                steps = run_round(args, sides, Path(tmp))
                for side in sides:
                    results[side].append(steps[side])
                    print(
                        f"round {r + 1} {side}: " + " ".join(f"{t:.2f}" for t in _step_times(steps[side])) + " s/step",
                        flush=True,
                    )
        rate_after = matmul_gflops(args.threads)["rate"]
        load["after"] = bench_rows.load_now()
        print(f"load after: {bench_rows.load_text()}")
    finally:
        for proc in busy:
            proc.kill()
            proc.wait()
    rate = (rate_before + rate_after) / 2
    shape = DecoderShape.from_config(AutoConfig.from_pretrained(args.model, local_files_only=True))
    summary = report(
        results, rate, (rate_before, rate_after), shape, statistics.mean(prompt_lengths(args.model, prompt_rows()))
    )
    if args.results is not None:
        bench_rows.append(
            args.results,
            {
                **summary,
                **origin,
                "busy": args.busy,
                "threads": args.threads,
                "trl_gradient_checkpointing": not args.trl_no_gradient_checkpointing,
                "load": load,
            },
        )


def report(
    results: dict[str, list[list[dict[str, Any]]]],
    rate: float,
    rates: tuple[float, float],
    shape: Any,
    prompt_len: float,
) -> dict[str, Any]:
    """Print each side's median step, floors and phases and every ratio of RATIOS; return them as one row."""
    print(f"matmul float32: {rates[0]:.1f} GFLOP/s before, {rates[1]:.1f} after (mean {rate:.1f})")
    medians: dict[str, float] = {}
    detail: dict[str, dict[str, Any]] = {}
    for side, rounds in results.items():
        times = [t for steps in rounds for t in _step_times(steps)]
        medians[side] = statistics.median(times)
        prompt, completion = _mean_tokens(rounds, prompt_len)
        floors = _floors(shape, prompt, completion)
        plain_s, shared_s = floors["plain"] / 1e9 / rate, floors["shared"] / 1e9 / rate
        rss = max(s["peak_rss_gib"] for steps in rounds for s in steps)
        print(
            f"{side:>5}: {medians[side]:.2f} s/step (median of {len(times)}) | {prompt:.1f} prompt + "
            f"{completion:.1f} completion tokens per row | floor {plain_s:.2f} s plain ({floors['plain'] / 1e9:.0f} "
            f"GFLOP), {shared_s:.2f} s shared prefix ({floors['shared'] / 1e9:.0f} GFLOP) | "
            f"x{medians[side] / plain_s:.2f} plain floor, x{medians[side] / shared_s:.2f} shared floor | "
            f"peak rss {rss:.2f} GiB"
        )
        phases = [s["phases"] for steps in rounds for s in steps[1:] if s.get("phases")]
        mean = {k[5:]: statistics.mean(p[k] for p in phases) for k in phases[0]} if phases else {}
        if mean:
            print("       phases (mean): " + " ".join(f"{k} {v:.2f}" for k, v in mean.items()))
        detail[side] = {
            "steps_s": times,
            "tokens_per_row": {"prompt": prompt, "completion": completion},
            "x_plain_floor": medians[side] / plain_s,
            "x_shared_floor": medians[side] / shared_s,
            "peak_rss_gib": rss,
            "phases_mean_s": mean,
        }
    ratios, ranges = {}, {}
    for top, bottom in RATIOS:
        if top in medians and bottom in medians:
            pairs = [
                a / b for ra, rb in zip(results[top], results[bottom]) for a, b in zip(_step_times(ra), _step_times(rb))
            ]
            ratios[f"{top} / {bottom}"] = statistics.median(pairs)
            ranges[f"{top} / {bottom}"] = [min(pairs), max(pairs)]
            print(
                f"ratio {top} / {bottom}: {statistics.median(pairs):.3f} (median of {len(pairs)} same-step pairs; "
                f"range {min(pairs):.3f}-{max(pairs):.3f}); ratio of the medians {medians[top] / medians[bottom]:.3f}"
            )
    return {
        "medians_s": medians,
        "pair_median_ratios": ratios,
        "pair_ratio_ranges": ranges,
        "matmul_gflops": list(rates),
        "sides": detail,
    }


def report_text(rows: list[dict[str, Any]], results: Path) -> str:
    """The docs block: one line per run of `rows` (medians of the timed steps, pair-median ratios)."""
    from bench import bench_rows

    def ratio(row: dict[str, Any], name: str) -> str:
        if name not in row["pair_median_ratios"]:
            return "-"
        low_high = row.get("pair_ratio_ranges", {}).get(name)
        value = f"{row['pair_median_ratios'][name]:.3f}"
        return value + (f" ({low_high[0]:.3f}-{low_high[1]:.3f})" if low_high else "")

    def cpu(row: dict[str, Any]) -> str:
        found = row.get("cpu")
        return "not recorded" if not found else f"{found['model']} ({', '.join(found['flags']) or 'no avx2'})"

    def checkpointing(row: dict[str, Any]) -> str:
        value = row.get("trl_gradient_checkpointing")
        return "not recorded (on: TRL's default)" if value is None else ("on" if value else "**off**")

    lines = [
        bench_rows.generated_note(REPORT_COMMAND, results, len(rows)),
        "",
        "| run (date, commit) | CPU (vector flags) | busy loops | TRL gradient checkpointing | load before -> after | matmul GFLOP/s "
        "before / after | ours | ours bf16 | TRL | TRL bf16 | ours / TRL | both bf16 | bf16 / float32: ours | "
        "bf16 / float32: TRL | ours, bf16 copy | ours bf16 copy / TRL | bf16 copy / float32: ours |",
        "| --- " * 18 + "|",
    ]
    for row in rows:
        steps = [f"{row['medians_s'][s]:.2f} s" if s in row["medians_s"] else "-" for s in ("ours", "ours:bf16")]
        steps += [f"{row['medians_s'][s]:.2f} s" if s in row["medians_s"] else "-" for s in ("trl", "trl:bf16")]
        cells = [
            bench_rows.commit_cell(row),
            cpu(row),
            str(row["busy"]),
            checkpointing(row),
            bench_rows.load_span(row),
            " / ".join(f"{r:.0f}" for r in row["matmul_gflops"]),
            *steps,
            "**" + ratio(row, "ours / trl") + "**",
            ratio(row, "ours:bf16 / trl:bf16"),
            ratio(row, "ours:bf16 / ours"),
            ratio(row, "trl:bf16 / trl"),
            f"{row['medians_s']['ours:bf16copy']:.2f} s" if "ours:bf16copy" in row["medians_s"] else "-",
            "**" + ratio(row, "ours:bf16copy / trl") + "**" if "ours:bf16copy" in row["medians_s"] else "-",
            ratio(row, "ours:bf16copy / ours"),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "Steps: each side's median s/step over the run's timed steps; ratios: the median of the same-step pairs "
        "(their range in brackets where the row records it).",
    ]
    return "\n".join(lines)


def show_report(results: Path, doc: Path | None) -> None:
    from bench import bench_rows

    rows = bench_rows.read(results)
    if not rows:
        raise SystemExit(f"--results {bench_rows.shown(results)}: no rows")
    text = report_text(rows, results)
    print(text)
    if doc is not None:
        bench_rows.write_block(doc, DOC_BLOCK, text)


if __name__ == "__main__":
    main()
