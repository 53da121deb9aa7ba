"""Where per-step metrics go: JSONL, TensorBoard (torch.utils.tensorboard) and Weights & Biases.

`output.loggers` picks the sinks; only rank 0 opens any (every rank keeps the
rows in memory for the summary). Each sink continues a resumed run without
duplicates: the JSONL file is rebuilt from the checkpoint's rows,
TensorBoard gets `purge_step` (its readers drop events at or after the resumed
step from the earlier files), W&B reuses the run id with `resume="allow"`.
W&B cannot rewind an offline run: rows a killed segment logged after its last
checkpoint stay in that segment's offline folder (docs/training.md).
`flush()` is called before every checkpoint, so whatever a checkpoint covers
is on disk in every sink.
"""

from __future__ import annotations

import logging
import secrets
import string
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from areal_adv.api.config_checks import is_real
from areal_adv.trainer.run.metrics import MetricsWriter, plain_value

logger = logging.getLogger("areal_adv.loggers")

TENSORBOARD_DIR = "tensorboard"
WANDB_DIR = "wandb"
WANDB_ID_FILE = "areal_run_id"


class MetricSink(Protocol):
    def log(self, row: Mapping[str, Any]) -> None: ...

    def flush(self) -> None: ...

    def close(self) -> None: ...


def _scalars(row: Mapping[str, Any]) -> dict[str, float]:
    """The numeric metrics of a row (no step, no missing values)."""
    return {k: float(v) for k, v in row.items() if k != "step" and v is not None and is_real(v)}


class JsonlSink:
    """`metrics.jsonl`: one JSON object per step, flushed every step."""

    def __init__(self, path: Path, initial: Sequence[Mapping[str, Any]]) -> None:
        self.writer = MetricsWriter(path, initial)

    def log(self, row: Mapping[str, Any]) -> None:
        self.writer.write(row)

    def flush(self) -> None:
        pass  # every row is flushed as it is written

    def close(self) -> None:
        self.writer.close()


class TensorBoardSink:
    """Scalars per step in `<run_dir>/tensorboard/`, one tag per metric; the config as text."""

    def __init__(self, log_dir: Path, *, purge_step: int | None, config_yaml: str) -> None:
        from torch.utils.tensorboard import SummaryWriter

        if purge_step is not None:
            wait_for_a_later_event_file_name(log_dir)
        self.writer = SummaryWriter(log_dir=str(log_dir), purge_step=purge_step)
        if purge_step is None:
            self.writer.add_text("config", "```yaml\n" + config_yaml + "```", global_step=0)

    def log(self, row: Mapping[str, Any]) -> None:
        for key, value in _scalars(row).items():
            self.writer.add_scalar(key, value, global_step=int(row["step"]))

    def flush(self) -> None:
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


def wait_for_a_later_event_file_name(log_dir: Path) -> None:
    """Sleep (under 1 s, and only when needed) until a new event file sorts after the existing ones.

    TensorBoard's readers load a folder's event files in the order of their
    names, `events.out.tfevents.<start second>.<host>.<pid>.<n>`, and a resumed
    writer's `purge_step` drops only the events of files read before its own.
    Two files started in the same second are ordered by their pids as strings,
    so a resumed segment that starts within the second of the killed one (a
    fast run, a restart loop) could be read first and its purge would miss the
    killed tail. Starting the new file in a later second orders it by time.
    """
    newest = max((_event_file_second(p.name) for p in log_dir.glob("events.out.tfevents.*")), default=-1)
    while int(time.time()) <= newest:
        time.sleep(max(0.01, newest + 1 - time.time()))


def _event_file_second(name: str) -> int:
    """The start second in an event file's name (-1 for a name that does not carry one)."""
    field = name.split(".")[3] if name.count(".") >= 3 else ""
    return int(field) if field.isdigit() else -1


def _new_run_id() -> str:
    """A W&B-style run id: 8 characters of [a-z0-9] (wandb's own helper moved between versions)."""
    alphabet = string.ascii_lowercase + string.digits
    return "".join(secrets.choice(alphabet) for _ in range(8))


class WandbSink:
    """A Weights & Biases run (offline by default) in `<run_dir>/wandb/`; a resumed run keeps its id."""

    def __init__(self, cfg: Any, run_dir: Path, *, resumed: bool, config: Mapping[str, Any]) -> None:
        import wandb

        folder = run_dir / WANDB_DIR
        folder.mkdir(parents=True, exist_ok=True)
        id_file = folder / WANDB_ID_FILE
        run_id = id_file.read_text(encoding="utf-8").strip() if resumed and id_file.is_file() else None
        if not run_id:
            run_id = _new_run_id()
            id_file.write_text(run_id, encoding="utf-8")
        self.run = wandb.init(
            project=cfg.output.wandb_project or "areal-adv",
            group=cfg.experiment_name,
            name=f"{cfg.experiment_name}/{cfg.trial_name}",
            id=run_id,
            resume="allow",
            dir=str(run_dir),
            mode=cfg.output.wandb_mode,
            config=dict(config),
        )

    def log(self, row: Mapping[str, Any]) -> None:
        self.run.log(_scalars(row), step=int(row["step"]))

    def flush(self) -> None:
        pass  # the wandb service process writes asynchronously; finish() drains it

    def close(self) -> None:
        self.run.finish()


class RunLoggers:
    """The run's sinks (rank 0) plus every row of the run in memory (all ranks)."""

    def __init__(self, sinks: Sequence[MetricSink], records: Sequence[Mapping[str, Any]] = ()) -> None:
        self.sinks = list(sinks)
        self.records: list[dict[str, Any]] = [dict(r) for r in records]

    def log(self, row: Mapping[str, Any]) -> dict[str, Any]:
        plain = {k: plain_value(v) for k, v in row.items()}
        self.records.append(plain)
        for sink in self.sinks:
            sink.log(plain)
        return plain

    def flush(self) -> None:
        for sink in self.sinks:
            sink.flush()

    def close(self) -> None:
        for sink in self.sinks:
            try:
                sink.close()
            except Exception:  # a sink failing to close must not hide the run's own outcome
                logger.exception("closing %s failed", type(sink).__name__)


def open_loggers(
    cfg: Any, run_dir: Path, *, records: Sequence[Mapping[str, Any]], start_step: int, is_main: bool
) -> RunLoggers:
    """The sinks of `output.loggers` for this rank (none off rank 0), continuing at `start_step`."""
    if not is_main:
        return RunLoggers([], records)
    from areal_adv.api.cli_args import config_to_dict, config_to_yaml

    resumed = start_step > 0
    sinks: list[MetricSink] = []
    for name in cfg.output.loggers:
        if name == "jsonl":
            sinks.append(JsonlSink(run_dir / "metrics.jsonl", records))
        elif name == "tensorboard":
            sinks.append(
                TensorBoardSink(
                    run_dir / TENSORBOARD_DIR,
                    purge_step=start_step if resumed else None,
                    config_yaml=config_to_yaml(cfg),
                )
            )
        elif name == "wandb":
            sinks.append(WandbSink(cfg, run_dir, resumed=resumed, config=config_to_dict(cfg)))
    return RunLoggers(sinks, records)
