"""Entry point: `python -m areal_adv.trainer.main [--config FILE] [--print-config] [key=value ...]`.

Dotted overrides go straight to `areal_adv.api.cli_args.load_config`, as on AReaL's
command line, and may come before or after `--config`. `--print-config` prints
the fully resolved config (defaults, file and overrides merged) and exits.
Exit status: 0 done, 1 bad config (or a plugin that does not resolve, on any
rank, or a run directory that is already taken, or a checkpoint that does not
fit the run) or, under torchrun, a failure on any rank; 130 interrupted
(outputs kept).

Data parallel: `torchrun --nproc_per_node=N -m areal_adv.trainer.main --config ...`.
Every rank loads the same config, joins the process group (`init_distributed`:
gloo on CPU, nccl on GPU) and runs its own `Trainer`; without torchrun's
environment no process group is created and the run is the single-process one.

Failures under torchrun (`areal_adv.trainer.parallel.failures`): an exception on any rank is
published to the other ranks, and every rank exits 1 with one line naming the
failing rank, the stage and the cause; the same text is in each rank's torch
elastic error file, so torchrun's summary shows it. The failing rank also
prints its traceback and appends it to `<run dir>/error.log`. In a single
process a failure ends with one line at the bottom naming the stage and the
cause, exit 1; the traceback goes to `<run dir>/error.log`, and to the terminal
too for anything but an error in the user's own code (reward function, task,
stage) unless `--debug` or `AREAL_TRACEBACK=1` asks for it
(`areal_adv.trainer.run.error_report`).
"""

from __future__ import annotations

from areal_adv.trainer.parallel.launch_env import prefer_passive_waiting

prefer_passive_waiting()  # OpenMP reads it when torch loads, so before anything below imports torch

import argparse  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import traceback  # noqa: E402
from collections.abc import Sequence  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

from areal_adv.api.cli_args import ConfigError, config_to_yaml, load_config  # noqa: E402
from areal_adv.api.extras import check_extras  # noqa: E402

#: The default run (GRPO on single-turn arithmetic), a preset shipped with the package: found from any folder.
DEFAULT_CONFIG = "preset:grpo_arith"


#: What `--help` says: the default run, and what else a config can train.
DESCRIPTION = (
    "Train a policy with PPO/GRPO-family advantages: by default a tiny random-init policy on a synthetic task "
    "(preset:grpo_arith); a config can name a local checkpoint (model.path), a task plugin (task.implementation) "
    "or prompt files (data.train), reward functions (reward) and any estimator or preset."
)


def parse_args(argv: Sequence[str] | None, prog: str = "python -m areal_adv.trainer.main") -> argparse.Namespace:
    """The trainer's arguments; `prog` is the command the usage line shows (`areal-adv train` from the CLI)."""
    parser = argparse.ArgumentParser(prog=prog, description=DESCRIPTION)
    parser.add_argument(
        "--config",
        default=DEFAULT_CONFIG,
        help="experiment YAML, or preset:NAME for a preset shipped with the package (`areal-adv presets` lists "
        "them; default: preset:grpo_arith, the default run)",
    )
    parser.add_argument(
        "--print-config", action="store_true", help="print the fully resolved config as YAML and exit without training"
    )
    parser.add_argument(
        "--debug",
        action="store_true",
        help="print the traceback of an error in your reward function, task or stage on the terminal "
        "too (it is always in <run dir>/error.log; AREAL_TRACEBACK=1 does the same)",
    )
    parser.add_argument("overrides", nargs="*", help="dotted overrides, e.g. train.steps=10 actor.kl_ctl=0")
    # intermixed: `key=value --config X key=value` works, overrides on either side of the options
    return parser.parse_intermixed_args(argv)


def _build_errors() -> tuple[type[BaseException], ...]:
    """Errors of a bad setup, reported in one line without a traceback."""
    from areal_adv.trainer.ppo.actor import WorkerInitError

    # a plugin that does not resolve: ImportError/ValueError/TypeError in one process; in a process
    # group WorkerInitError (a RuntimeError), raised on every rank and naming the failing ranks
    return (ConfigError, WorkerInitError, ImportError, ValueError, TypeError)


def _setup_message(exc: BaseException, text: str, *, resuming: bool = False) -> str:
    if resuming:
        kind = "error while resuming"
    else:
        kind = "config error" if isinstance(exc, ConfigError) else "error while building the trainer"
    return f"{kind}: {text}"


def _stop_every_rank(
    exc: BaseException, watch: Any, *, setup: bool, resuming: bool = False, run_dir: Path | None = None
) -> int:
    """Tell the other ranks, print this rank's line (and, on the failing rank, the traceback), exit 1.

    The failing rank also appends its traceback to `<run dir>/error.log` when the run has a directory.
    """
    from areal_adv.trainer.parallel.failures import write_error_file
    from areal_adv.trainer.run.error_report import write_error_log

    failure = watch.fail(exc)
    if failure is not exc and not setup and failure.rank in failure.report.ranks:  # the root cause is here
        traceback.print_exception(exc, file=sys.stderr)
        write_error_log(run_dir, exc, rank=failure.rank)
    own_words = str(exc) if failure.report.error == f"{type(exc).__name__}: {exc}" else str(failure)
    line = _setup_message(exc, own_words, resuming=resuming) if setup else f"error: {failure}"
    print(line, file=sys.stderr, flush=True)
    write_error_file(failure)  # torchrun's summary: the root cause, after this rank's traceback
    watch.linger(failure)  # a rank that reported for a gone or silent peer lets torchrun see that peer first
    return 1


def _end(exc: BaseException, watch: Any, run_dir: Path | None, debug: bool) -> int:
    """A failure outside the expected setup errors: every rank told under torchrun, else `report_failure`."""
    from areal_adv.trainer.run.error_report import report_failure

    if watch is not None:
        return _stop_every_rank(exc, watch, setup=False, run_dir=run_dir)
    report_failure(exc, run_dir, debug=debug)
    return 1


def _build(cfg: Any, ctx: Any, watch: Any, debug: bool) -> tuple[Any, int]:
    """(trainer, 0), or (None, exit status) after reporting why it could not be built."""
    from areal_adv.trainer.parallel.cpu_threads import busy_cores_of_others, busy_note, cpu_sample, local_world_size
    from areal_adv.trainer.parallel.failures import stage
    from areal_adv.trainer.run.loop import Trainer

    started = cpu_sample()
    try:
        with stage("building the trainer"):
            trainer = Trainer(cfg, ctx)
    except _build_errors() as exc:
        if watch is not None:
            return None, _stop_every_rank(exc, watch, setup=True)
        print(_setup_message(exc, str(exc)), file=sys.stderr)
        return None, 1
    except Exception as exc:
        return None, _end(exc, watch, None, debug)
    if ctx.is_main:  # other processes on the cores while this one started
        ranks = local_world_size() if ctx.is_distributed else 1
        note = busy_note(busy_cores_of_others(started, cpu_sample(), ranks), trainer.num_threads)
        if note:
            print(note, file=sys.stderr, flush=True)
    return trainer, 0


def _train(cfg: Any, ctx: Any, watch: Any, debug: bool = False) -> int:
    """Build and run the trainer; under a failure watch every failure goes through `_stop_every_rank`."""
    from areal_adv.trainer.parallel.distributed import barrier
    from areal_adv.utils.checkpoint_folders import CheckpointError

    trainer, status = _build(cfg, ctx, watch, debug)
    if trainer is None:
        return status
    try:
        result = trainer.run()
    except (ConfigError, CheckpointError) as exc:  # a checkpoint that does not fit this run
        if watch is not None:
            return _stop_every_rank(exc, watch, setup=True, resuming=True)
        print(_setup_message(exc, str(exc), resuming=True), file=sys.stderr)
        return 1
    except Exception as exc:
        return _end(exc, watch, trainer.run_dir, debug)
    if watch is not None:
        watch.close()
        barrier(ctx)  # no rank leaves (and takes a store it hosts down) while another still watches it
    if ctx.is_main:
        print(result.summary(cfg.experiment_name, cfg.train.steps), flush=True)
    return 130 if result.interrupted else 0


def _start_watch(watch_cls: Any, ctx: Any, timeout_s: float) -> Any:
    """This rank's failure watch on the job's store; None (failures then raise locally) if there is no store."""
    try:
        return watch_cls.for_this_rank(ctx.rank, ctx.world_size, timeout_s, ctx.attempt)
    except (KeyError, ValueError, RuntimeError) as exc:  # no MASTER_ADDR/PORT, or the store does not answer
        print(
            f"[areal-adv] rank {ctx.rank}: warning: failures will not reach the other ranks (no rendezvous store: "
            f"{type(exc).__name__}: {exc})",
            file=sys.stderr,
        )
        return None


def _run_dir_refusal(cfg: Any) -> ConfigError | None:
    """The run directory's refusal (another run there, contradictory resume settings), before torch loads.

    A single process only: under torchrun rank 0 decides and every rank hears the
    verdict (`areal_adv.trainer.run.run_dir.shared_plan`), which needs the process group.
    """
    if "WORLD_SIZE" in os.environ:
        return None
    from areal_adv.trainer.run.run_dir import RunDirectoryError, check_run_dir

    try:
        check_run_dir(cfg)
    except RunDirectoryError as exc:
        return exc
    return None


def main(argv: Sequence[str] | None = None, *, prog: str = "python -m areal_adv.trainer.main") -> int:
    """Train (exit statuses: the module docstring); `prog` is the command `--help` shows."""
    args = parse_args(argv, prog)
    try:
        cfg = load_config(args.config, args.overrides)
    except ConfigError as exc:
        print(f"config error: {exc}", file=sys.stderr)
        return 1
    if args.print_config:
        print(config_to_yaml(cfg), end="")
        return 0
    try:  # every missing extra in one line, before torch or a model loads
        check_extras(cfg)
    except ConfigError as exc:
        print(f"config error: {exc}", file=sys.stderr)
        return 1
    refusal = _run_dir_refusal(cfg)
    if refusal is not None:  # answered in a fraction of a second, not after the model is built
        print(f"config error: {refusal}", file=sys.stderr)
        return 1
    import torch.distributed as dist

    from areal_adv.trainer.parallel.distributed import destroy, init_distributed
    from areal_adv.trainer.parallel.failures import FailureWatch, keep_exit_status_through_shutdown

    joined_here = not (dist.is_available() and dist.is_initialized())
    try:
        ctx = init_distributed(timeout=cfg.train.dist_timeout_s)
    except (ValueError, RuntimeError) as exc:  # a broken torchrun environment or rendezvous
        print(f"error while joining the process group: {exc}", file=sys.stderr)
        return 1
    watch, status = None, 1
    try:
        if ctx.is_distributed:
            watch = _start_watch(FailureWatch, ctx, cfg.train.failure_timeout_s)
        status = _train(cfg, ctx, watch, args.debug)
        return status
    finally:
        if watch is not None:
            watch.close()
        if joined_here:  # leave only a process group this call created
            destroy(ctx)
        if watch is not None and status != 0:  # reported: shutting down must not turn the status into -15
            keep_exit_status_through_shutdown()


if __name__ == "__main__":
    from torch.distributed.elastic.multiprocessing.errors import record

    # torch elastic's `record`: an exception that escapes main (a bug) still reaches torchrun's summary
    sys.exit(record(main)())
