"""The run directory `<output.dir>/<experiment_name>/<trial_name>/`: start, refuse, overwrite or resume.

`plan_run` decides from the config and what is on disk (rank 0 decides, the
trainer shares the verdict with every rank); `prepare_run_dir` carries the plan
out before anything is written. A new run never lands silently on top of an
old one: that needs `train.resume` (continue it) or `output.overwrite=true`
(delete it first).
"""

from __future__ import annotations

import json
import logging
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from areal_adv.api.cli_args import ConfigError
from areal_adv.utils.checkpoint_folders import (
    CheckpointError,
    check_resumable,
    checkpoint_root,
    latest_checkpoint,
    read_manifest,
    remove_leftovers,
    remove_newer_than,
)

logger = logging.getLogger("areal_adv.run_dir")

#: What a run writes; any of these present means "a run is already here".
RUN_OUTPUTS = (
    "metrics.jsonl",
    "config.yaml",
    "checkpoints",
    "tensorboard",
    "wandb",
    "curves.png",
    "param_checksums.jsonl",
)


class RunDirectoryError(ConfigError):
    """The run directory holds another run, or the resume request does not fit what is on disk."""


@dataclass(frozen=True)
class RunPlan:
    """What to do with the run directory before the first step."""

    run_dir: Path
    resume_from: Path | None  # checkpoint folder to continue from
    clear: bool  # delete the run directory's old contents first


def run_directory(cfg: Any) -> Path:
    return Path(cfg.output.dir) / cfg.experiment_name / cfg.trial_name


def existing_outputs(run_dir: Path) -> list[str]:
    return [name for name in RUN_OUTPUTS if (run_dir / name).exists()]


def _refusal(run_dir: Path, found: list[str]) -> RunDirectoryError:
    return RunDirectoryError(
        f"run directory {run_dir} already holds a run ({', '.join(found)}). To continue it set train.resume=auto; "
        "to replace it set output.overwrite=true; to keep it and start another run set trial_name=<new name> "
        "(or experiment_name / output.dir)"
    )


def plan_run(cfg: Any) -> RunPlan:
    """Decide how this run starts: fresh, fresh over a deleted old run, or from a checkpoint."""
    plan, note = _decide(cfg)
    if note:
        logger.warning("%s", note)
    return plan


def check_run_dir(cfg: Any) -> None:
    """`plan_run`'s refusals, nothing done or logged: the entry point asks before torch and the model load."""
    _decide(cfg)


def _check_resumable(folder: Path) -> None:
    """A complete checkpoint of the format this version resumes, or a one-line RunDirectoryError."""
    try:
        check_resumable(folder, read_manifest(folder))
    except CheckpointError as exc:
        raise RunDirectoryError(f"train.resume: {exc}") from None


def _decide(cfg: Any) -> tuple[RunPlan, str | None]:
    """The plan, and a warning to log when it replaces what a stopped run left behind."""
    run_dir = run_directory(cfg)
    resume, overwrite = cfg.train.resume, cfg.output.overwrite
    if resume is not None and overwrite:
        raise RunDirectoryError(
            f"train.resume={resume!r} and output.overwrite=true contradict each other: "
            "resume continues the run that overwrite would delete; set only one"
        )
    if resume == "auto":
        found = latest_checkpoint(checkpoint_root(run_dir))
        if found is not None:
            _check_resumable(found)
            return RunPlan(run_dir, found, clear=False), None
        old = existing_outputs(run_dir)
        note = (
            f"train.resume=auto: {run_dir} has no complete checkpoint, so a new run starts there "
            f"(replacing {', '.join(old)})"
        )
        return RunPlan(run_dir, None, clear=bool(old)), note if old else None
    if resume is not None:
        _check_resumable(Path(resume))
        return RunPlan(run_dir, Path(resume), clear=False), None
    old = existing_outputs(run_dir)
    note = None
    if old and not overwrite:
        if not stopped_before_first_step(run_dir):
            raise _refusal(run_dir, old)
        note = (
            f"run directory {run_dir}: the run there stopped before its first step (no checkpoint, no step in "
            f"metrics.jsonl), so a new run starts there (replacing {', '.join(old)})"
        )
    return RunPlan(run_dir, None, clear=bool(old)), note


def stopped_before_first_step(run_dir: Path) -> bool:
    """A run that crashed at start-up: `metrics.jsonl` with no complete step row and no complete checkpoint.

    Without `metrics.jsonl` (the jsonl logger off) nothing tells, so it is not
    taken for one and the directory stays protected.
    """
    metrics = run_dir / "metrics.jsonl"
    if not metrics.is_file() or latest_checkpoint(checkpoint_root(run_dir)) is not None:
        return False
    return not complete_rows(metrics)


def complete_rows(path: Path) -> list[dict[str, Any]]:
    """The rows with an integer `step` of a per-step JSONL file, up to the first torn line."""
    rows = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            break  # a torn last line from a killed run
        if isinstance(row, dict) and isinstance(row.get("step"), int):
            rows.append(row)
    return rows


def prepare_run_dir(plan: RunPlan, start_step: int) -> None:
    """Carry out the plan on disk (rank 0 only): clear, create, drop what lies after the resumed step."""
    if plan.clear and plan.run_dir.exists():
        shutil.rmtree(plan.run_dir)
    plan.run_dir.mkdir(parents=True, exist_ok=True)
    root = checkpoint_root(plan.run_dir)
    remove_leftovers(root)
    if plan.resume_from is not None:
        for folder in remove_newer_than(root, start_step):
            logger.warning(
                "removed %s: the run continues from step %d, so it describes a replaced history", folder, start_step
            )
        truncate_jsonl(plan.run_dir / "param_checksums.jsonl", start_step)


def truncate_jsonl(path: Path, before_step: int) -> list[dict[str, Any]]:
    """Keep the complete rows of a per-step JSONL file with `step < before_step` (atomic rewrite)."""
    path = Path(path)
    if not path.is_file():
        return []
    from areal_adv.trainer.run.metrics import write_jsonl  # imports torch: the entry point checks before it loads

    kept = [row for row in complete_rows(path) if row["step"] < before_step]
    write_jsonl(path, kept)
    return kept


def shared_plan(cfg: Any, ctx: Any) -> RunPlan:
    """`plan_run` on rank 0, handed to every rank (a refusal is raised on every rank, none waits)."""
    from areal_adv.trainer.parallel.distributed import all_gather_objects

    plan, error = None, None
    if ctx.is_main:
        try:
            plan = plan_run(cfg)
        except RunDirectoryError as exc:
            error = str(exc)
    if ctx.is_distributed:
        plan, error = all_gather_objects((plan, error), ctx)[0]
    if error is not None:
        raise RunDirectoryError(error)
    return plan
