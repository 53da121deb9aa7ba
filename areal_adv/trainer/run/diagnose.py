"""`areal-adv diagnose RUN_DIR [--estimators ...] [--steps ...] [--weights ...]`: estimators measured on a run's batches.

A run trained with `output.save_rollouts: true` keeps each step's batch
(`areal_adv.trainer.diagnostics.rollout_store`). This command recomputes, on those
batches, the advantages of every named estimator (presets or estimator names,
as `diagnostics.estimators`; default: the run's own list) and of the run itself
(`active`: the advantages it trained on, as saved), and measures them as the
trainer does (`areal_adv.trainer.diagnostics.step_diagnostics`).

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
import math
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "METRICS",
    "WEIGHTS",
    "build_figure",
    "diagnose_run",
    "main",
    "panel_points",
    "plot_rows",
    "recommend",
    "step_ranges",
    "summary",
    "table",
    "weights_for",
]

METRICS = ("zero_adv_frac", "noise_proxy", "grad_snr", "cos_to_active", "length_corr", "reward_rank_corr")
#: The metrics that need the policy's weights (a checkpoint); the others come from the saved batch alone.
GRADIENT_METRICS = ("grad_snr", "cos_to_active")
#: `--weights`: `sampled`, only a checkpoint that holds the weights which sampled the step's batch (the run's own
#: numbers); `nearest`, else the nearest checkpoint (stale weights, marked as such).
WEIGHTS = ("sampled", "nearest")


#: Where the evidence on recommending an estimator from diagnostics is written down.
EVIDENCE = 'docs/benchmarks.md, "Can a diagnostic choose the estimator?"'


def recommend(rows: Sequence[Mapping[str, Any]]) -> str | None:
    """The estimator the diagnostics recommend for this run, with the evidence behind the rule, or None.

    Tested on the estimator suite (every run's first 10 % of updates against its
    final learning curve, with a rule fixed before measuring): no diagnostic
    predicted which estimator learns sooner well enough to pass it (see
    `EVIDENCE`), so nothing is recommended and `diagnose` prints the numbers only.
    """
    del rows
    return None


def no_recommendation_note() -> str:
    """What `diagnose` says in place of a recommendation, and where the evidence is."""
    return (
        "no recommendation: on the estimator suite's tasks none of these diagnostics, measured early, "
        f"predicted which estimator learns sooner ({EVIDENCE}); read them as what each estimator does "
        "to these batches"
    )


def _nearest(step: int, checkpoints: Sequence[tuple[int, Path]]) -> tuple[int, Path] | None:
    """The checkpoint closest to `step` (ties: the earlier one), or None when there is none."""
    if not checkpoints:
        return None
    return min(checkpoints, key=lambda item: (abs(item[0] - step), item[0]))


def weights_for(step: int, checkpoints: Sequence[tuple[int, Path]], weights: str) -> tuple[int, Path] | None:
    """The checkpoint whose weights measure `step`'s gradients: the one at `step` (it holds the weights that
    sampled the batch), else with `weights="nearest"` the nearest one; None: leave the gradient cells empty."""
    exact = dict(checkpoints).get(step)
    if exact is not None:
        return step, exact
    return _nearest(step, checkpoints) if weights == "nearest" else None


def step_ranges(steps: Sequence[int]) -> str:
    """Steps as runs of consecutive numbers: [0, 1, 2, 5, 7, 8] -> '0-2, 5, 7-8' (30 steps in a few characters)."""
    parts: list[str] = []
    ordered = sorted(set(steps))
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ", ".join(parts)


def weights_note(used: Mapping[int, int | None], checkpoints: Sequence[int], weights: str) -> str | None:
    """One line on the weights of the gradient metrics, when any step is not at the weights that sampled it.

    `used` maps each measured step to the step of the checkpoint its gradients came from (None: none).
    """
    empty = [s for s, c in used.items() if c is None]
    stale = [s for s, c in used.items() if c is not None and c != s]
    have = "no checkpoints"
    if checkpoints:
        have = f"checkpoint{'s' if len(checkpoints) > 1 else ''} at step{'s' if len(checkpoints) > 1 else ''} "
        have += step_ranges(checkpoints)
    if empty and weights == "sampled":
        return (
            f"grad_snr, cos_to_active: empty at {len(empty)} of {len(used)} steps ({step_ranges(empty)}), "
            f"whose sampling weights no checkpoint holds ({have}; checkpoints/step_N holds step N's); "
            "--weights nearest measures them at the nearest checkpoint's weights, marked stale"
        )
    if empty:
        return f"grad_snr, cos_to_active: not measured, the run has {have} (train.save_every=N keeps some)"
    if stale:
        return (
            f"grad_snr, cos_to_active: at {len(stale)} of {len(used)} steps ({step_ranges(stale)}) from the nearest "
            "checkpoint's weights, not those that sampled the batch (stale_weights in the rows, hollow in the plot)"
        )
    return None


def weights_title(rows: Sequence[Mapping[str, Any]]) -> str:
    """What the figure says about the weights of its gradient panels: filled points exact, hollow ones stale."""
    steps = {r["step"]: r.get("checkpoint_step") for r in rows}
    exact = [s for s, c in steps.items() if c == s]
    stale = [s for s, c in steps.items() if c is not None and c != s]
    head = "grad_snr, cos_to_active"
    if not exact and not stale:
        return f"{head}: not measured (no checkpoint holds the weights that sampled a saved step)"
    parts = [f"at the weights that sampled the batch (steps {step_ranges(exact)})"] if exact else []
    if stale:
        parts.append(f"hollow: at a nearest checkpoint's weights, not the sampling ones (steps {step_ranges(stale)})")
    return f"{head}: " + "; ".join(parts)


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


def _step_rows(saved: Any, cfg: Any, actor: Any, shadows: Any, policy: Any, folds: int, params: str) -> dict:
    """{estimator: {metric: value}} of one saved step (with gradients when `policy` is given)."""
    from areal_adv.api.train_args import ACTIVE_ESTIMATOR
    from areal_adv.trainer.diagnostics.gradient_probe import fold_gradients, fold_rows, probe_parameters
    from areal_adv.trainer.diagnostics.shadow_estimators import shadow_advantages
    from areal_adv.trainer.diagnostics.step_diagnostics import measure_batch

    shaping = cfg.rollout.prm.advantage_shaping
    computed = {} if saved.sum_pi_squared is None else {"sum_pi_squared": saved.sum_pi_squared}
    own = actor.compute_advantages(saved.batch, saved.meta, shaping=shaping)
    outputs = {
        ACTIVE_ESTIMATOR: {**own, "advantages": saved.active_advantages},
        **shadow_advantages(shadows, saved.batch, saved.meta, computed, shaping=shaping),
    }
    gradients = None
    if policy is not None:
        chosen = [p for _, p in probe_parameters(policy, params)]
        gradients = fold_gradients(policy, cfg.actor, outputs, fold_rows(saved.meta.traj_group_sizes, folds), chosen)
    return measure_batch(outputs, saved.batch, saved.meta, sum_pi_squared=saved.sum_pi_squared, gradients=gradients)


def _saved_steps(run_dir: Path, steps: Sequence[int] | None) -> tuple[dict[int, Path], list[int]]:
    """({step: file} of the saved rollouts, the steps to measure): all, or `steps`, each of which must be saved."""
    from areal_adv.trainer.diagnostics.rollout_store import rollout_steps

    saved = rollout_steps(run_dir)
    if not saved:
        raise FileNotFoundError(f"{run_dir}: no saved rollouts in rollouts/; train with output.save_rollouts=true")
    wanted = sorted(saved if steps is None else set(steps))
    missing = [s for s in wanted if s not in saved]
    if missing:
        raise ValueError(f"--steps: {missing} not saved in {run_dir / 'rollouts'} (saved: {step_ranges(list(saved))})")
    return saved, wanted


def diagnose_run(
    run_dir: Path,
    estimators: Sequence[str] | None = None,
    steps: Sequence[int] | None = None,
    *,
    weights: str = "sampled",
    say: Callable[[str], None] = print,
) -> list[dict[str, Any]]:
    """The rows of `diagnostics.jsonl` for `run_dir`'s saved steps (all, or `steps`), written there too.

    `weights` picks the checkpoint of each step's gradient metrics (`weights_for`); `say` gets the lines
    about what is left out and why (a shadow the batches cannot feed, steps without their weights).
    """
    from areal_adv.api.cli_args import load_config
    from areal_adv.api.train_args import DiagnosticsConfig
    from areal_adv.trainer.diagnostics.rollout_store import load_rollout
    from areal_adv.trainer.diagnostics.shadow_estimators import BatchOffer, build_shadows
    from areal_adv.trainer.ppo.actor import PPOActor
    from areal_adv.trainer.run.metrics import write_jsonl
    from areal_adv.utils.checkpoint_folders import checkpoint_root, list_checkpoints

    if weights not in WEIGHTS:
        raise ValueError(f"--weights: got {weights!r}, expected one of {list(WEIGHTS)}")
    cfg = load_config(run_dir / "config.yaml")
    names = list(cfg.diagnostics.estimators if estimators is None else estimators)
    settings = DiagnosticsConfig(estimators=names, folds=cfg.diagnostics.folds, params=cfg.diagnostics.params)
    saved, wanted = _saved_steps(run_dir, steps)
    actor = PPOActor(cfg.actor)
    offer = BatchOffer(cfg.critic.enabled, cfg.rollout.greedy_baseline, cfg.rollout.prm.enabled, cfg.rollout.export)
    shadows = build_shadows(settings.estimators, cfg.actor, offer)
    for shadow in shadows:
        if shadow.skipped:
            say(f"{shadow.name} skipped: {shadow.skipped}")
    root = checkpoint_root(run_dir)
    checkpoints = list_checkpoints(root) if root.is_dir() else []
    chosen = {step: weights_for(step, checkpoints, weights) for step in wanted}
    note = weights_note(
        {s: None if c is None else c[0] for s, c in chosen.items()}, [c for c, _ in checkpoints], weights
    )
    if note:
        say(note)
    rows: list[dict[str, Any]] = []
    loaded: dict[int, Any] = {}
    for step in wanted:
        at = chosen[step]
        if at is not None and at[0] not in loaded:
            loaded.clear()  # one policy in memory at a time
            loaded[at[0]] = _load_policy(at[1])
        policy = None if at is None else loaded[at[0]]
        measured = _step_rows(load_rollout(saved[step]), cfg, actor, shadows, policy, settings.folds, settings.params)
        ckpt = None if at is None else at[0]
        for name, values in measured.items():
            row = {"step": step, "estimator": name, "checkpoint_step": ckpt, "stale_weights": ckpt not in (None, step)}
            rows.append({**row, **values})
    write_jsonl(run_dir / "diagnostics.jsonl", rows)
    return rows


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return "n/a" if not math.isfinite(value) else f"{value:.4g}"
    return "-" if value is None else str(value)


def _columns(header: Sequence[str], body: Sequence[Sequence[str]]) -> str:
    """Left-aligned columns, each as wide as its widest cell."""
    widths = [max(len(x) for x in col) for col in zip(header, *body)]
    return "\n".join("  ".join(x.ljust(w) for x, w in zip(line, widths)).rstrip() for line in [header, *body])


def table(rows: Sequence[Mapping[str, Any]]) -> str:
    """The rows as a plain text table: step, estimator, the checkpoint its gradients used and the six metrics.

    A stale checkpoint (not the step's own) is marked `*`; `-` is a cell left empty.
    """
    header = ["step", "estimator", "ckpt", *METRICS]
    body = []
    for r in rows:
        ckpt = _fmt(r.get("checkpoint_step")) + ("*" if r.get("stale_weights") else "")
        body.append([_fmt(r.get("step")), str(r["estimator"]), ckpt, *(_fmt(r.get(m)) for m in METRICS)])
    return _columns(header, body)


def _mean(rows: Sequence[Mapping[str, Any]], metric: str) -> str:
    """The mean of `metric` over the rows that have a finite value, or `-`."""
    values = [float(r[metric]) for r in rows if r.get(metric) is not None and math.isfinite(float(r[metric]))]
    return _fmt(sum(values) / len(values)) if values else "-"


def summary(rows: Sequence[Mapping[str, Any]]) -> str:
    """Per estimator, the mean of each metric over the steps that have it: a few lines before anything else.

    The first line says over how many steps, and how many of the gradient metrics' steps used stale weights.
    """
    estimators = list(dict.fromkeys(str(r["estimator"]) for r in rows))
    steps = sorted({r["step"] for r in rows})
    graded = sorted({r["step"] for r in rows if r.get("checkpoint_step") is not None})
    stale = sorted({r["step"] for r in rows if r.get("stale_weights")})
    where = f"{len(graded)} of them" if graded else "none"
    if stale:
        where += f", {len(stale)} at stale weights"
    first = f"mean over {len(steps)} steps ({step_ranges(steps)}); grad_snr and cos_to_active over {where}:"
    body = [[name, *(_mean([r for r in rows if r["estimator"] == name], m) for m in METRICS)] for name in estimators]
    return "\n".join([first, _columns(["estimator", *METRICS], body)])


def panel_points(
    rows: Sequence[Mapping[str, Any]], estimator: str, metric: str
) -> tuple[list[tuple[int, float]], list[tuple[int, float]]]:
    """(points at the weights that sampled the batch or of the batch alone, points at stale weights) of a metric."""
    fresh, stale = [], []
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
    advice = recommend(rows)
    print("\n" + (advice if advice else no_recommendation_note()))
    print(f"rows: {args.run_dir / 'diagnostics.jsonl'} (or --per-step) | plot: {plot}")
    return 0
