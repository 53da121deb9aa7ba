"""`areal-adv` command line: `areal-adv validate CONFIG [key=value ...] [--dry-run]`, `areal-adv presets`, `areal-adv train`,
`areal-adv export`, `areal-adv diagnose`, `areal-adv race`; `areal-adv --version` prints the installed version.

`train [--config FILE] [key=value ...]` is `python -m areal_adv.trainer.main` (what
scripts/train.sh runs). `export RUN_DIR OUT_DIR [--step N]` writes a run's
policy as a `save_pretrained` folder with its tokenizer (LoRA merged).

`validate` loads a config the way the trainer does, then resolves every stage the
way an actor worker would and the task, reward functions and prompt datasets the
way the trainer does at start-up (imports included), runs the trainer's own
cross-field checks (`areal_adv.trainer.run.preflight`: every prompt plus the generation
budget fits the model's context, reward functions name only columns the data
has), and prints what would run. `--dry-run` also runs every configured stage
once on a small synthetic batch of the config's layout, so a plugin returning a
wrong shape or dtype fails before launch, and the task's scorer and every reward
function on two real rows with dummy completions (an empty one and one as long
as a completion of the run can be among them: the number the context line adds to
every prompt, for a single-turn task), with the run-time checks.
Every failure is one line naming the field, stage or function. `presets` lists
the presets shipped with the package (`preset:NAME`), one line each.
"""

from __future__ import annotations

from areal_adv.trainer.parallel.launch_env import prefer_passive_waiting

prefer_passive_waiting()  # before torch loads (areal_adv.trainer.parallel.launch_env): `validate --dry-run` computes too

import argparse  # noqa: E402
import sys
from collections.abc import Sequence
from typing import Any

from areal_adv.api.cli_args import ConfigError, load_config
from areal_adv.api.extras import check_extras

#: What `areal-adv --help` says above the list of commands.
DESCRIPTION = (
    "areal-adv: check a config (validate), list the shipped presets (presets), train a policy (train), "
    "write a run's policy as a model folder (export), measure estimators on a run's saved batches (diagnose) and "
    "race estimators on paired seeds (race)"
)


def installed_version() -> str:
    """The installed distribution's version (pyproject.toml's), read from its metadata without importing torch."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("areal-adv")
    except PackageNotFoundError:  # a clone on sys.path that pip never installed
        return "unknown (not installed; pip install -e . records the version)"


def _one_line(exc: BaseException) -> str:
    """An error as one line (a user's exception message may span several)."""
    return " ".join(str(exc).split())


def _resolve(config: Any) -> tuple[Any, Any, Any, Any]:
    """Resolve every stage, the task and the rewards, then the cross-field checks (preflight)."""
    from areal_adv.trainer.ppo.actor import PPOActor
    from areal_adv.trainer.run.preflight import check_before_launch, preflight_runtime
    from areal_adv.trainer.run.task_setup import make_eval_rows, resolve_task_parts

    actor = PPOActor(config.actor)
    parts = resolve_task_parts(config)
    runtime = preflight_runtime(config, parts)
    report = check_before_launch(config, parts, runtime, make_eval_rows(config, parts))
    return actor, parts, runtime, report


def validate(config_path: str, overrides: Sequence[str], *, dry_run: bool = False) -> int:
    try:  # first, and before torch is imported: a bad key or value or a missing extra answers in about a second
        config = load_config(config_path, overrides)
        check_extras(config)
    except ConfigError as exc:
        print(f"error: {_one_line(exc)}", file=sys.stderr)
        return 1
    from areal_adv.trainer.rollout.tasks.runtime import TaskError
    from areal_adv.trainer.run.run_summary import stage_rows, stage_table

    try:
        actor, parts, runtime, report = _resolve(config)
    except (ConfigError, ImportError, ValueError, TypeError, TaskError) as exc:
        print(f"error: {_one_line(exc)}", file=sys.stderr)
        return 1
    print(stage_table(stage_rows(config, actor, parts)))
    print("\nconfig OK: every stage, the task and the reward functions resolved as a worker would resolve them")
    print(f"context OK: {report.describe()}")
    if not dry_run:
        return 0
    return _dry_run(config, actor, parts.task) or _dry_run_rewards(config, parts, runtime)


def _dry_run(config: object, actor: object, task: object) -> int:
    """Every configured stage once on a synthetic batch of the config's layout (areal_adv.trainer.run.dry_run)."""
    from areal_adv.trainer.run.dry_run import dry_run

    try:
        report = dry_run(config, actor, task=task)
    except Exception as exc:  # any stage failure is the answer the user asked for
        print(f"error: dry run on a synthetic batch: {_one_line(exc)}", file=sys.stderr)
        return 1
    print(
        f"dry run OK: every configured stage ran on a synthetic batch of {report.n_rows} rows x "
        f"{report.n_pos} positions ({report.layout})"
    )
    return 0


def _dry_run_rewards(config: Any, parts: Any, runtime: Any) -> int:
    """The task's scorer and every reward function on two real rows (areal_adv.trainer.run.dry_run)."""
    from areal_adv.trainer.run.dry_run import dry_run_rewards, reward_rows
    from areal_adv.trainer.run.preflight import budget_field, longest_completion

    rows, source = reward_rows(config, parts)
    # the number validate's context line adds to every prompt, for a single-turn task
    longest, cap_source = longest_completion(runtime, config.generation_budget, budget_field(config))
    try:
        report = dry_run_rewards(runtime, rows, longest, cap_source)
    except Exception as exc:  # the task's or a reward function's failure, named as at run time
        print(f"error: dry run of the rewards on {source}: {_one_line(exc)}", file=sys.stderr)
        return 1
    print(
        f"rewards OK: {', '.join(report.components)} scored {source} with dummy completions {list(report.completions)}"
    )
    return 0


def _validate_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="areal-adv validate",
        description="load a config and resolve every advantage stage, the task and the rewards",
    )
    p.add_argument("config", help="experiment YAML file, or preset:NAME (areal-adv presets)")
    p.add_argument(
        "overrides", nargs="*", help="dotted overrides, e.g. actor.advantage.estimator.implementation=turn_gae"
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="also run every configured stage once on a small synthetic batch of the config's layout, "
        "and the task's scorer and every reward function on two real rows",
    )
    return p


def presets() -> int:
    """Print every preset shipped with the package, one line each: its name and description."""
    from areal_adv.api.presets import describe_preset, preset_names

    names = preset_names()
    width = max(map(len, names))
    for name in names:
        print(f"{name:<{width}}  {describe_preset(name)}")
    print("\nuse one as --config preset:NAME, load_config('preset:NAME') or defaults: [preset:NAME]")
    return 0


def train(argv: Sequence[str]) -> int:
    """`areal-adv train ...`: the trainer's own entry point, arguments as for `python -m areal_adv.trainer.main`."""
    from areal_adv.trainer.main import main as train_main

    return train_main(list(argv), prog="areal-adv train")


def export(argv: Sequence[str]) -> int:
    """`areal-adv export RUN_DIR OUT_DIR [--step N]`: the run's policy as a plain transformers model folder."""
    p = argparse.ArgumentParser(
        prog="areal-adv export",
        description="write a run's trained policy as a "
        "save_pretrained folder (weights, config, tokenizer, chat template; LoRA merged)",
    )
    p.add_argument("run_dir", help="the run directory (or one of its checkpoints/step_N folders)")
    p.add_argument("out_dir", help="a new or empty folder for the model")
    p.add_argument("--step", type=int, default=None, help="the checkpoint's step (default: the newest)")
    args = p.parse_args(argv)
    # after the arguments: torch and transformers take seconds to import, `export --help` should not wait for them
    from areal_adv.trainer.run.export import export_run
    from areal_adv.utils.checkpoint_folders import CheckpointError

    try:
        done = export_run(args.run_dir, args.out_dir, args.step)
    except (CheckpointError, ConfigError, FileExistsError) as exc:
        print(f"error: {_one_line(exc)}", file=sys.stderr)
        return 1
    merged = " (LoRA adapters merged)" if done.merged_lora else ""
    print(
        f"exported {done.checkpoint} to {done.out_dir}{merged}: AutoModelForCausalLM.from_pretrained"
        f"({str(done.out_dir)!r}) loads it"
    )
    return 0


def diagnose(argv: Sequence[str]) -> int:
    """`areal-adv diagnose RUN_DIR [--estimators ...] [--steps ...]`: estimators measured on a run's saved batches."""
    from areal_adv.trainer.run.diagnose import main as diagnose_main  # parses first, imports torch after

    return diagnose_main(argv)


def race(argv: Sequence[str]) -> int:
    """`areal-adv race CONFIG --estimators ...` or `--compare RUN ...`: which estimator learns sooner, on paired seeds."""
    from areal_adv.trainer.race.race_command import main as race_main  # parses first, trains after

    return race_main(argv)


_COMMANDS = {"train": train, "export": export, "diagnose": diagnose, "race": race}


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["validate"]:  # its own parser, so --dry-run may come before, between or after overrides
        args = _validate_parser().parse_intermixed_args(argv[1:])
        return validate(args.config, args.overrides, dry_run=args.dry_run)
    if argv[:1] and argv[0] in _COMMANDS:  # each parses its own arguments
        return _COMMANDS[argv[0]](argv[1:])
    parser = argparse.ArgumentParser(prog="areal-adv", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"areal-adv {installed_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser(
        "validate",
        help="load a config and resolve every advantage stage, the task and the rewards (areal-adv validate -h)",
    )
    sub.add_parser("presets", help="list the presets shipped with the package (use one as preset:NAME)")
    sub.add_parser("train", help="train a policy: the same as python -m areal_adv.trainer.main (areal-adv train -h)")
    sub.add_parser("export", help="a run's policy as a save_pretrained model folder (areal-adv export -h)")
    sub.add_parser("diagnose", help="measure estimators on a run's saved batches (areal-adv diagnose -h)")
    sub.add_parser(
        "race", help="race estimators on paired seeds and drop the worse early, or compare runs (areal-adv race -h)"
    )
    args = parser.parse_args(argv)
    if args.command == "presets":
        return presets()
    return 2


if __name__ == "__main__":
    sys.exit(main())
