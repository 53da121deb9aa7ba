"""`areal-adv diagnose RUN_DIR [--estimators ...] [--steps ...] [--weights ...]`: estimators measured on a run's batches.

A run trained with `output.save_rollouts: true` keeps each step's batch. This command
recomputes, on those batches, the advantages of every named estimator (presets or
estimator names, as `diagnostics.estimators`; default: the run's own list) and of the run
itself (`active`: the advantages it trained on, as saved), and measures them as the
trainer does. The measuring, the choice of weights and the printed text are
`areal_adv.trainer.diagnostics`'s (`offline`, `offline_report`); this module is the
command around them: the checkpoints' policies, the files and the figure.

The gradient metrics (`grad_snr`, `cos_to_active`) depend on the weights they are
taken at, and the run measured them at the weights that sampled each batch.
`checkpoints/step_N` holds exactly those for step N (the weights after N updates).
By default (`--weights sampled`) a step gets gradient metrics only from such a
checkpoint, so every number agrees with the run's own (tested); the other steps'
cells stay empty and the command says which and why, naming the flag. `--weights
nearest` fills them at the nearest checkpoint's weights instead, which can differ
from the run's numbers at any distance: those rows carry `stale_weights: true`, the
summary counts them and the plot draws them hollow.

Output, in this order: a summary per estimator (the mean of each metric over the
steps that have it), one line per shadow that cannot run and on the weights, the
per-step table with `--per-step`; RUN_DIR/diagnostics.jsonl (one row per step and
estimator: `step`, `estimator`, `checkpoint_step`, `stale_weights` and the metrics)
and RUN_DIR/diagnostics.png (each metric per estimator over the steps, stale
points hollow, the weights used named on top). transformers' progress bars are
off while it loads weights: the output is this command's own.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from areal_adv.trainer.diagnostics.metric_names import GRADIENT_METRICS, METRICS
from areal_adv.trainer.diagnostics.offline import WEIGHTS
from areal_adv.trainer.diagnostics.offline_report import no_recommendation_note, summary, table, weights_title

__all__ = ["build_figure", "diagnose_run", "main", "panel_points", "plot_rows"]


def _load_policy(checkpoint: Path) -> Any:
    """The checkpoint's policy as it trained: a full model, or the rebuilt base with its (unmerged) LoRA adapters."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from areal_adv.trainer.lm.model import build_policy, special_ids
    from areal_adv.trainer.run.export import _model_config
    from areal_adv.trainer.run.trainer_state import POLICY_DIR, load_module, no_hf_progress_bars

    policy_dir = checkpoint / POLICY_DIR
    model_cfg, seed = _model_config(checkpoint)
    with no_hf_progress_bars():  # transformers' "Loading weights" bar is not this command's output
        if model_cfg.lora is None:
            return AutoModelForCausalLM.from_pretrained(
                policy_dir, local_files_only=True, dtype=getattr(torch, model_cfg.dtype)
            )
        tokenizer = AutoTokenizer.from_pretrained(policy_dir, local_files_only=True)
        torch.manual_seed(seed)  # the random base of a `model.path: null` run, as the trainer seeded it
        model = build_policy(model_cfg, len(tokenizer), special_ids(tokenizer))
    load_module(model, policy_dir)
    return model


def diagnose_run(
    run_dir: Path,
    estimators: Sequence[str] | None = None,
    steps: Sequence[int] | None = None,
    *,
    weights: str = "sampled",
    say: Callable[[str], None] = print,
) -> list[dict[str, Any]]:
    """The rows of `diagnostics.jsonl` for `run_dir`'s saved steps (all, or `steps`), written there too.

    `weights` picks the checkpoint of each step's gradient metrics (`offline.weights_for`); `say` gets the
    lines about what is left out and why (a shadow the batches cannot feed, steps without their weights).
    """
    from areal_adv.trainer.diagnostics.offline import diagnose_rows
    from areal_adv.trainer.run.metrics import write_jsonl

    rows = diagnose_rows(run_dir, estimators, steps, weights=weights, load_policy=_load_policy, say=say)
    write_jsonl(run_dir / "diagnostics.jsonl", rows)
    return rows


def panel_points(
    rows: Sequence[Mapping[str, Any]], estimator: str, metric: str
) -> tuple[list[tuple[int, float]], list[tuple[int, float]]]:
    """(points at the weights that sampled the batch or of the batch alone, points at stale weights) of a metric."""
    fresh: list[tuple[int, float]] = []
    stale: list[tuple[int, float]] = []
    for r in rows:
        if r["estimator"] != estimator or r.get(metric) is None:
            continue
        is_stale = metric in GRADIENT_METRICS and bool(r.get("stale_weights"))
        (stale if is_stale else fresh).append((int(r["step"]), float(r[metric])))
    return fresh, stale


def build_figure(rows: Sequence[Mapping[str, Any]]) -> Any:
    """One panel per metric, one line per estimator over the steps; stale-weight points hollow, the weights on top."""
    from areal_adv.trainer.run.plot import _pyplot

    plt = _pyplot()
    estimators = list(dict.fromkeys(str(r["estimator"]) for r in rows))
    fig, axes = plt.subplots(2, 3, figsize=(13, 7.4), squeeze=False)
    for ax, metric in zip(axes.flat, METRICS):
        for i, name in enumerate(estimators):
            fresh, stale = panel_points(rows, name, metric)
            color = f"C{i % 10}"
            if fresh or stale:
                ax.plot(*zip(*sorted(fresh + stale)), color=color, linewidth=1.2, label=name)
            if fresh:
                ax.plot(*zip(*fresh), linestyle="none", marker="o", markersize=3.5, color=color)
            if stale:
                ax.plot(*zip(*stale), linestyle="none", marker="o", markersize=5, markerfacecolor="none", color=color)
        if metric in GRADIENT_METRICS and not ax.lines:
            ax.text(0.5, 0.5, "not measured:\nno checkpoint at these steps", ha="center", va="center",
                    transform=ax.transAxes, color="0.4")  # fmt: skip
        ax.set_title(metric)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    axes.flat[0].legend(fontsize=8)
    fig.suptitle(weights_title(rows), fontsize=9)
    fig.tight_layout()
    return fig


def plot_rows(rows: Sequence[Mapping[str, Any]], path: Path) -> Path:
    """`build_figure` written to `path` (PNG)."""
    from areal_adv.trainer.run.plot import _pyplot

    fig = build_figure(rows)
    fig.savefig(path, dpi=110)
    _pyplot().close(fig)
    return path


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="areal-adv diagnose",
        description="measure estimators on a run's saved batches (output.save_rollouts=true): prints a summary "
        "per estimator and writes RUN_DIR/diagnostics.jsonl and diagnostics.png",
    )
    p.add_argument("run_dir", type=Path, help="the run directory (with rollouts/ and config.yaml)")
    p.add_argument(
        "--estimators", nargs="+", default=None, help="presets or estimator names (default: the run's own list)"
    )
    p.add_argument("--steps", nargs="+", type=int, default=None, help="the saved steps to measure (default: all)")
    p.add_argument(
        "--weights",
        choices=WEIGHTS,
        default="sampled",
        help="the weights of grad_snr and cos_to_active: 'sampled' (default) only a checkpoint holding the weights "
        "that sampled the step's batch (checkpoints/step_N for step N), other steps left empty; 'nearest' the "
        "nearest checkpoint otherwise (stale weights, marked)",
    )
    p.add_argument("--per-step", action="store_true", help="also print every step's row after the summary")
    return p


def main(argv: Sequence[str]) -> int:
    """The `areal-adv diagnose` command: parse, measure, write the rows and the plot, print the summary first."""
    args = _parser().parse_args(list(argv))
    from areal_adv.api.cli_args import ConfigError
    from areal_adv.api.config_checks import shown_path
    from areal_adv.utils.checkpoint_folders import CheckpointError

    if not (args.run_dir / "config.yaml").is_file():
        print(f"error: {shown_path(str(args.run_dir))}: no config.yaml; expected a run directory", file=sys.stderr)
        return 1
    notes: list[str] = []  # printed after the summary
    try:
        rows = diagnose_run(args.run_dir, args.estimators, args.steps, weights=args.weights, say=notes.append)
    except (ConfigError, CheckpointError, FileNotFoundError, ValueError) as exc:
        print(f"error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 1
    print(summary(rows))
    for note in notes:
        print(note)
    if args.per_step:
        print("\n" + table(rows))
    plot = plot_rows(rows, args.run_dir / "diagnostics.png")
    print("\n" + no_recommendation_note())
    print(f"rows: {args.run_dir / 'diagnostics.jsonl'} (or --per-step) | plot: {plot}")
    return 0
