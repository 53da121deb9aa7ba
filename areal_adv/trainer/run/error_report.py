"""How a failed run ends: one line at the bottom of the terminal, the traceback in `<run dir>/error.log`.

An error raised by the user's own code (a reward function, a task, an
advantage stage) already names the function, the row and the exception in its
message; its traceback runs through the trainer's internals and buries that
line. So the traceback goes to `error.log` in the run directory, and the
terminal gets it too only on request (`AREAL_TRACEBACK=1` or `--debug`). Any
other exception (a bug on our side, a library's error) keeps its traceback on
the terminal, and is still followed by the one line.
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from pathlib import Path
from typing import IO

#: Set (to anything but "" or "0") to print tracebacks of user-code errors on the terminal too.
TRACEBACK_ENV = "AREAL_TRACEBACK"
ERROR_LOG = "error.log"


def user_code_errors() -> tuple[type[BaseException], ...]:
    """Errors whose message already names the user's function, row and exception."""
    from areal_adv.trainer.ppo.checks.batch_checks import BatchError
    from areal_adv.trainer.ppo.checks.contracts import StageContractError
    from areal_adv.trainer.ppo.gae import LambdaFunctionError
    from areal_adv.trainer.ppo.output_guard import NonFiniteOutputError
    from areal_adv.trainer.ppo.stage_state import StageStateError
    from areal_adv.trainer.rollout.reward_functions import RewardFunctionError
    from areal_adv.trainer.rollout.tasks.runtime import TaskError

    return (
        RewardFunctionError,
        TaskError,
        StageContractError,
        LambdaFunctionError,
        NonFiniteOutputError,
        StageStateError,
        BatchError,
    )


def traceback_requested(debug: bool = False) -> bool:
    """`--debug`, or `AREAL_TRACEBACK` set to something other than "" / "0"."""
    return debug or os.environ.get(TRACEBACK_ENV, "").strip() not in ("", "0")


def write_error_log(run_dir: Path | None, exc: BaseException, rank: int | None = None) -> Path | None:
    """Append `exc`'s traceback to `<run_dir>/error.log` (None when the run has no directory yet)."""
    if run_dir is None or not Path(run_dir).is_dir():
        return None
    path = Path(run_dir) / ERROR_LOG
    who = "" if rank is None else f" on rank {rank}"
    header = f"--- {time.strftime('%Y-%m-%d %H:%M:%S')}{who}\n"
    try:
        with path.open("a", encoding="utf-8") as fh:  # one write: ranks appending at once do not interleave
            fh.write(header + "".join(traceback.format_exception(exc)))
    except OSError:
        return None
    return path


def failure_line(exc: BaseException) -> str:
    """`error in <stage>: <Type>: <message>` on one line (the stage as `failures.stage` recorded it)."""
    from areal_adv.trainer.parallel.failures import _STAGE_ATTR  # where `stage()` records the stage path

    where = getattr(exc, _STAGE_ATTR, None)
    text = " ".join(str(exc).split())
    return f"error{f' in {where}' if where else ''}: {type(exc).__name__}: {text}"


def report_failure(
    exc: BaseException, run_dir: Path | None, *, debug: bool = False, stream: IO[str] | None = None
) -> Path | None:
    """Print how the run ended (traceback only where wanted, the one line last); returns the error log."""
    stream = sys.stderr if stream is None else stream
    log = write_error_log(run_dir, exc)
    shown = traceback_requested(debug) or log is None or not isinstance(exc, user_code_errors())
    if shown:
        traceback.print_exception(exc, file=stream)
    hint = ""
    if log is not None:
        hint = f" (traceback in {log})" if shown else f" (traceback in {log}; {TRACEBACK_ENV}=1 or --debug prints it)"
    print(failure_line(exc) + hint, file=stream, flush=True)
    return log
