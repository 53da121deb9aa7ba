"""Entry point: `python -m areal.trainer.main [--config FILE] [--print-config] [key=value ...]`.

Dotted overrides go straight to `areal.api.cli_args.load_config`, as on AReaL's
command line, and may come before or after `--config`. `--print-config` prints
the fully resolved config (defaults, file and overrides merged) and exits.
Exit status: 0 done, 1 bad config (or a plugin that does not resolve, on any
rank, or a run directory that is already taken), 130 interrupted (outputs kept).

Data parallel: `torchrun --nproc_per_node=N -m areal.trainer.main --config ...`.
Every rank loads the same config, joins the process group (`init_distributed`:
gloo on CPU, nccl on GPU) and runs its own `Trainer`; without torchrun's
environment no process group is created and the run is the single-process one.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from areal.api.cli_args import ConfigError, config_to_yaml, load_config

#: The embedded default run (GRPO on single-turn arithmetic), found from any working directory.
DEFAULT_CONFIG = str(Path(__file__).resolve().parents[2] / "examples" / "grpo_arith.yaml")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m areal.trainer.main",
                                     description="Train a tiny policy with GRPO/PPO on a synthetic task.")
    parser.add_argument("--config", default=DEFAULT_CONFIG, help="experiment YAML (default: examples/grpo_arith.yaml)")
    parser.add_argument("--print-config", action="store_true",
                        help="print the fully resolved config as YAML and exit without training")
    parser.add_argument("overrides", nargs="*", help="dotted overrides, e.g. train.steps=10 actor.kl_ctl=0")
    # intermixed: `key=value --config X key=value` works, overrides on either side of the options
    return parser.parse_intermixed_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        cfg = load_config(args.config, args.overrides)
    except ConfigError as exc:
        print(f"config error: {exc}", file=sys.stderr)
        return 1
    if args.print_config:
        print(config_to_yaml(cfg), end="")
        return 0
    import torch.distributed as dist

    from areal.trainer.checkpoint import CheckpointError
    from areal.trainer.distributed import destroy, init_distributed
    from areal.trainer.ppo.actor import WorkerInitError
    from areal.trainer.trainer import Trainer

    joined_here = not (dist.is_available() and dist.is_initialized())
    try:
        ctx = init_distributed(timeout=cfg.train.dist_timeout_s)
    except (ValueError, RuntimeError) as exc:  # a broken torchrun environment or rendezvous
        print(f"error while joining the process group: {exc}", file=sys.stderr)
        return 1
    try:
        try:
            trainer = Trainer(cfg, ctx)
        except ConfigError as exc:
            print(f"config error: {exc}", file=sys.stderr)
            return 1
        # a plugin that does not resolve: ImportError/ValueError/TypeError in one process; in a process
        # group WorkerInitError (a RuntimeError), raised on every rank and naming the failing ranks
        except (WorkerInitError, ImportError, ValueError, TypeError) as exc:
            print(f"error while building the trainer: {exc}", file=sys.stderr)
            return 1
        try:
            result = trainer.run()
        except (ConfigError, CheckpointError) as exc:  # a checkpoint that does not fit this run
            print(f"error while resuming: {exc}", file=sys.stderr)
            return 1
        if ctx.is_main:
            print(result.summary(cfg.experiment_name, cfg.train.steps), flush=True)
        return 130 if result.interrupted else 0
    finally:
        if joined_here:  # leave only a process group this call created
            destroy(ctx)


if __name__ == "__main__":
    sys.exit(main())
