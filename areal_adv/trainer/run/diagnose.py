"""`areal-adv diagnose RUN_DIR [--estimators ...] [--steps ...]`: the diagnostics of any estimators on a run's saved batches.

A run trained with `output.save_rollouts: true` keeps each step's batch
(`areal_adv.trainer.run.rollout_store`). This command recomputes, on those
batches, the advantages of every named estimator (presets or estimator names,
as `diagnostics.estimators`; default: the run's own list) and of the run itself
(`active`: the advantages it trained on, as saved), and measures them as the
trainer does (`areal_adv.trainer.run.diagnostics`). The gradient metrics
(`grad_snr`, `cos_to_active`) need weights: each step uses the checkpoint
nearest it (`checkpoint_step` in its rows; the checkpoint at step N holds the
weights that sampled step N's batch, so only an equal step is exact), and a run
without checkpoints gets the gradient-free metrics only, which the command says.

Outputs: RUN_DIR/diagnostics.jsonl (one row per step and estimator, with
`step`, `estimator` and `checkpoint_step` keys), a table on stdout, and
RUN_DIR/diagnostics.png (each metric per estimator over the steps).
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["METRICS", "diagnose_run", "main", "plot_rows", "recommend", "table"]

METRICS = ("zero_adv_frac", "noise_proxy", "grad_snr", "cos_to_active", "length_corr", "reward_rank_corr")


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


def _load_policy(checkpoint: Path) -> Any:
    """The checkpoint's policy as it trained: a full model, or the rebuilt base with its (unmerged) LoRA adapters."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from areal_adv.trainer.lm.model import build_policy, special_ids
    from areal_adv.trainer.run.export import _model_config
    from areal_adv.trainer.run.trainer_state import POLICY_DIR, load_module

    policy_dir = checkpoint / POLICY_DIR
    model_cfg, seed = _model_config(checkpoint)
    if model_cfg.lora is None:
        model = AutoModelForCausalLM.from_pretrained(
            policy_dir, local_files_only=True, dtype=getattr(torch, model_cfg.dtype)
        )
    else:
        tokenizer = AutoTokenizer.from_pretrained(policy_dir, local_files_only=True)
        torch.manual_seed(seed)  # the random base of a `model.path: null` run, as the trainer seeded it
        model = build_policy(model_cfg, len(tokenizer), special_ids(tokenizer))
        load_module(model, policy_dir)
    return model


def _step_rows(saved: Any, cfg: Any, actor: Any, shadows: Any, policy: Any, folds: int, params: str) -> dict:
    """{estimator: {metric: value}} of one saved step (with gradients when `policy` is given)."""
    from areal_adv.api.train_args import ACTIVE_ESTIMATOR
    from areal_adv.trainer.ppo.shadow_estimators import shadow_advantages
    from areal_adv.trainer.ppo.training.gradient_probe import fold_gradients, fold_rows, probe_parameters
    from areal_adv.trainer.run.diagnostics import measure_batch

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


def diagnose_run(
    run_dir: Path,
    estimators: Sequence[str] | None = None,
    steps: Sequence[int] | None = None,
    *,
    say: Callable[[str], None] = print,
) -> list[dict[str, Any]]:
    """The rows of `diagnostics.jsonl` for `run_dir`'s saved steps (all, or `steps`), written there too."""
    from areal_adv.api.cli_args import load_config
    from areal_adv.api.train_args import DiagnosticsConfig
    from areal_adv.trainer.ppo.actor import PPOActor
    from areal_adv.trainer.ppo.shadow_estimators import BatchOffer, build_shadows
    from areal_adv.trainer.run.metrics import write_jsonl
    from areal_adv.trainer.run.rollout_store import load_rollout, rollout_steps
    from areal_adv.utils.checkpoint_folders import checkpoint_root, list_checkpoints

    cfg = load_config(run_dir / "config.yaml")
    names = list(cfg.diagnostics.estimators if estimators is None else estimators)
    settings = DiagnosticsConfig(estimators=names, folds=cfg.diagnostics.folds, params=cfg.diagnostics.params)
    saved_steps = rollout_steps(run_dir)
    if not saved_steps:
        raise FileNotFoundError(f"{run_dir}: no saved rollouts in rollouts/; train with output.save_rollouts=true")
    wanted = sorted(saved_steps if steps is None else steps)
    missing = [s for s in wanted if s not in saved_steps]
    if missing:
        raise ValueError(f"--steps: {missing} not saved in {run_dir / 'rollouts'} (saved: {sorted(saved_steps)})")
    actor = PPOActor(cfg.actor)
    offer = BatchOffer(cfg.critic.enabled, cfg.rollout.greedy_baseline, cfg.rollout.prm.enabled, cfg.rollout.export)
    shadows = build_shadows(settings.estimators, cfg.actor, offer)
    for shadow in shadows:
        if shadow.skipped:
            say(f"{shadow.name} skipped: {shadow.skipped}")
    root = checkpoint_root(run_dir)
    checkpoints = list_checkpoints(root) if root.is_dir() else []
    if not checkpoints:
        say(f"{run_dir}: no checkpoints, so grad_snr and cos_to_active are not measured at any step")
    rows: list[dict[str, Any]] = []
    loaded: dict[int, Any] = {}
    for step in wanted:
        near = _nearest(step, checkpoints)
        if near is not None and near[0] not in loaded:
            loaded.clear()  # one policy in memory at a time
            loaded[near[0]] = _load_policy(near[1])
        policy = None if near is None else loaded[near[0]]
        measured = _step_rows(
            load_rollout(saved_steps[step]), cfg, actor, shadows, policy, settings.folds, settings.params
        )
        for name, values in measured.items():
            rows.append({"step": step, "estimator": name, "checkpoint_step": None if near is None else near[0]})
            rows[-1].update(values)
    inexact = sorted({r["step"] for r in rows if r["checkpoint_step"] not in (None, r["step"])})
    if inexact:
        say(
            f"steps {inexact}: grad_snr and cos_to_active at the nearest checkpoint's weights, not those that "
            "sampled the batch (checkpoint_step in their rows)"
        )
    write_jsonl(run_dir / "diagnostics.jsonl", rows)
    return rows


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return "n/a" if not math.isfinite(value) else f"{value:.4g}"
    return "n/a" if value is None else str(value)


def table(rows: Sequence[Mapping[str, Any]]) -> str:
    """The rows as a plain text table: step, estimator, checkpoint step and the six metrics."""
    header = ["step", "estimator", "ckpt", *METRICS]
    body = [[_fmt(r.get("step")), str(r["estimator"]), _fmt(r.get("checkpoint_step"))] for r in rows]
    for line, r in zip(body, rows):
        line.extend(_fmt(r.get(m)) for m in METRICS)
    widths = [max(len(x) for x in col) for col in zip(header, *body)]
    lines = ["  ".join(x.ljust(w) for x, w in zip(line, widths)) for line in [header, *body]]
    return "\n".join(lines)


def plot_rows(rows: Sequence[Mapping[str, Any]], path: Path) -> Path:
    """One panel per metric, one line per estimator over the steps (matplotlib, no display)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    estimators = list(dict.fromkeys(str(r["estimator"]) for r in rows))
    fig, axes = plt.subplots(2, 3, figsize=(13, 7), squeeze=False)
    for ax, metric in zip(axes.flat, METRICS):
        for name in estimators:
            points = [(r["step"], r[metric]) for r in rows if r["estimator"] == name and r.get(metric) is not None]
            if points:
                ax.plot(*zip(*points), marker="o", markersize=3, label=name)
        ax.set_title(metric)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    axes.flat[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv: Sequence[str]) -> int:
    """The `areal-adv diagnose` command: parse, measure, write the rows and the plot, print the table."""
    p = argparse.ArgumentParser(
        prog="areal-adv diagnose",
        description="measure estimators on a run's saved batches (output.save_rollouts=true): "
        "writes RUN_DIR/diagnostics.jsonl and diagnostics.png and prints a table",
    )
    p.add_argument("run_dir", type=Path, help="the run directory (with rollouts/ and config.yaml)")
    p.add_argument(
        "--estimators", nargs="+", default=None, help="presets or estimator names (default: the run's own list)"
    )
    p.add_argument("--steps", nargs="+", type=int, default=None, help="the saved steps to measure (default: all)")
    args = p.parse_args(list(argv))
    from areal_adv.api.cli_args import ConfigError
    from areal_adv.utils.checkpoint_folders import CheckpointError

    if not (args.run_dir / "config.yaml").is_file():
        print(f"error: {args.run_dir}: no config.yaml; expected a run directory", file=sys.stderr)
        return 1
    try:
        rows = diagnose_run(args.run_dir, args.estimators, args.steps)
    except (ConfigError, CheckpointError, FileNotFoundError, ValueError) as exc:
        print(f"error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 1
    print(table(rows))
    plot = plot_rows(rows, args.run_dir / "diagnostics.png")
    advice = recommend(rows)
    print(advice if advice else no_recommendation_note())
    print(f"\nrows: {args.run_dir / 'diagnostics.jsonl'} | plot: {plot}")
    return 0
