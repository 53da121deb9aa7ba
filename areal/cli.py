"""`areal` command line: `areal validate CONFIG [key=value ...]`.

`validate` loads a config the way the trainer does, then resolves every stage the
way an actor worker would and the task, reward functions and prompt datasets the
way the trainer does at start-up (imports included), and prints what would run.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from areal.api.cli_args import ConfigError, load_config


def _table(rows: Sequence[tuple[str, str, str]]) -> str:
    headers = ("stage", "implementation", "kwargs")
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    line = "  ".join("{:<" + str(w) + "}" for w in widths)
    out = [line.format(*headers), line.format(*("-" * w for w in widths))]
    out += [line.format(*r) for r in rows]
    return "\n".join(out)


def _task_rows(config: object, parts: object) -> list[tuple[str, str, str]]:
    """The task and each reward function as `stage / implementation / kwargs` rows."""
    task = config.task
    kind = "multi-turn" if getattr(parts.task, "multi_turn", False) else "single-turn"
    rows = [(f"task ({kind})", task.implementation, str(task.kwargs))]
    rows += [(f"reward/{r.name} x{r.weight:g}", spec.implementation, str(spec.kwargs))
             for r, spec in zip(parts.reward_functions, config.reward)]
    for name, data in (("data.train", parts.train_data), ("data.eval", parts.eval_data)):
        if data is not None:
            rows.append((name, getattr(config.data, name.split(".")[1]), f"{len(data)} rows"))
    return rows


def validate(config_path: str, overrides: Sequence[str]) -> int:
    from areal.trainer.ppo.actor import PPOActor
    from areal.trainer.task_setup import resolve_task_parts

    try:
        config = load_config(config_path, overrides)
        actor = PPOActor(config.actor)
        parts = resolve_task_parts(config)
    except (ConfigError, ImportError, ValueError, TypeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(_table([*actor.resolved.describe(config.actor), *_task_rows(config, parts)]))
    print("\nconfig OK: every stage, the task and the reward functions resolved as a worker would resolve them")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="areal", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("validate", help="load a config and resolve every advantage stage, the task and the rewards")
    p.add_argument("config", help="experiment YAML file")
    p.add_argument("overrides", nargs="*", help="dotted overrides, e.g. actor.advantage.estimator.implementation=turn_gae")
    args = parser.parse_args(argv)
    if args.command == "validate":
        return validate(args.config, args.overrides)
    return 2


if __name__ == "__main__":
    sys.exit(main())
