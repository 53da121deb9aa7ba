"""Entry point: `python -m areal.trainer.main --config FILE [key=value ...]`.

Dotted overrides go straight to `areal.api.cli_args.load_config`, as on AReaL's
command line. Exit status: 0 done, 1 bad config, 130 interrupted (outputs kept).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from areal.api.cli_args import ConfigError, load_config

#: The embedded default run (GRPO on single-turn arithmetic), found from any working directory.
DEFAULT_CONFIG = str(Path(__file__).resolve().parents[2] / "examples" / "grpo_arith.yaml")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m areal.trainer.main",
                                     description="Train a tiny policy with GRPO/PPO on a synthetic task.")
    parser.add_argument("--config", default=DEFAULT_CONFIG, help="experiment YAML (default: examples/grpo_arith.yaml)")
    parser.add_argument("overrides", nargs="*", help="dotted overrides, e.g. train.steps=10 actor.kl_ctl=0")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        cfg = load_config(args.config, args.overrides)
        from areal.trainer.trainer import Trainer

        trainer = Trainer(cfg)
    except ConfigError as exc:
        print(f"config error: {exc}", file=sys.stderr)
        return 1
    except (ImportError, ValueError, TypeError) as exc:  # e.g. an advantage plugin that does not resolve
        print(f"error while building the trainer: {exc}", file=sys.stderr)
        return 1
    result = trainer.run()
    print(result.summary(cfg.experiment_name, cfg.train.steps), flush=True)
    return 130 if result.interrupted else 0


if __name__ == "__main__":
    sys.exit(main())
