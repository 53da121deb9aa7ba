"""The diagnostics of a finished run, from the batches it saved (`output.save_rollouts`): `areal-adv diagnose`.

Each saved step's batch (`rollout_store`) is measured as the trainer measured it
(`measure.measure_estimators`): the run's own advantages, as saved, under `active`, and
every named estimator's beside them. The gradient metrics depend on the weights they are
taken at, and the run took them at the weights that sampled each batch;
`checkpoints/step_N` holds exactly those for step N (the weights after N updates). So
with `weights="sampled"` a step gets gradient metrics only from such a checkpoint and
every number agrees with the run's own; `weights="nearest"` fills the other steps from the
nearest checkpoint, marked `stale_weights`.

The command around it (`areal_adv.trainer.run.diagnose`) loads the checkpoints' policies
and writes the files. This module imports torch only when it measures: the command reads
`WEIGHTS` before it parses its arguments.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from areal_adv.trainer.diagnostics.offline_report import step_ranges, weights_note

if TYPE_CHECKING:
    from torch import nn

    from areal_adv.api.train_args import ExperimentConfig
    from areal_adv.trainer.diagnostics.rollout_store import SavedRollout
    from areal_adv.trainer.diagnostics.shadow_estimators import Shadow
    from areal_adv.trainer.ppo.actor import PPOActor

__all__ = ["WEIGHTS", "diagnose_rows", "measure_saved_step", "saved_steps", "weights_for"]

#: `weights`: `sampled`, only a checkpoint that holds the weights which sampled the step's batch (the run's own
#: numbers); `nearest`, else the nearest checkpoint (stale weights, marked as such).
WEIGHTS = ("sampled", "nearest")


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


def saved_steps(run_dir: Path, steps: Sequence[int] | None) -> tuple[dict[int, Path], list[int]]:
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


def measure_saved_step(
    saved: SavedRollout,
    cfg: ExperimentConfig,
    actor: PPOActor,
    shadows: Sequence[Shadow],
    policy: nn.Module | None,
) -> dict[str, dict[str, float]]:
    """{estimator: {metric: value}} of one saved step; with gradient metrics at `policy`'s weights when given."""
    from areal_adv.trainer.diagnostics.gradient_probe import GradientProbe, probe_parameters
    from areal_adv.trainer.diagnostics.measure import measure_estimators

    shaping = cfg.rollout.prm.advantage_shaping
    own = actor.compute_advantages(saved.batch, saved.meta, shaping=shaping)
    probe = None
    if policy is not None:
        chosen = [p for _, p in probe_parameters(policy, cfg.diagnostics.params)]
        probe = GradientProbe(policy, cfg.actor, cfg.diagnostics.folds, chosen)
    return measure_estimators(
        {**own, "advantages": saved.active_advantages},  # the advantages the run trained on, as saved
        shadows,
        saved.batch,
        saved.meta,
        computed={} if saved.sum_pi_squared is None else {"sum_pi_squared": saved.sum_pi_squared},
        sum_pi_squared=saved.sum_pi_squared,
        shaping=shaping,
        probe=probe,
    )


def diagnose_rows(
    run_dir: Path,
    estimators: Sequence[str] | None,
    steps: Sequence[int] | None,
    *,
    weights: str,
    load_policy: Callable[[Path], nn.Module],
    say: Callable[[str], None],
) -> list[dict[str, Any]]:
    """One row per saved step of `run_dir` (all, or `steps`) and estimator: `step`, `estimator`,
    `checkpoint_step`, `stale_weights` and the metrics of `estimators` (default: the run's
    `diagnostics.estimators`) and of the run itself (`active`).

    `weights` picks each step's checkpoint (`weights_for`), whose policy `load_policy` reads
    from its folder (one in memory at a time); `say` gets the lines on what is left out and
    why (a shadow the batches cannot feed, steps without their weights).
    """
    from areal_adv.api.cli_args import load_config
    from areal_adv.api.train_args import DiagnosticsConfig
    from areal_adv.trainer.diagnostics.batch_offer import run_offer
    from areal_adv.trainer.diagnostics.rollout_store import load_rollout
    from areal_adv.trainer.diagnostics.shadow_estimators import build_shadows
    from areal_adv.trainer.ppo.actor import PPOActor
    from areal_adv.utils.checkpoint_folders import checkpoint_root, list_checkpoints

    if weights not in WEIGHTS:
        raise ValueError(f"--weights: got {weights!r}, expected one of {list(WEIGHTS)}")
    cfg = load_config(run_dir / "config.yaml")
    names = list(cfg.diagnostics.estimators if estimators is None else estimators)
    settings = DiagnosticsConfig(estimators=names, folds=cfg.diagnostics.folds, params=cfg.diagnostics.params)
    saved, wanted = saved_steps(run_dir, steps)
    actor = PPOActor(cfg.actor)
    shadows = build_shadows(settings.estimators, cfg.actor, run_offer(cfg, actor.resolved))  # as the run's
    for shadow in shadows:
        if shadow.skipped:
            say(f"{shadow.name} skipped: {shadow.skipped}")
    root = checkpoint_root(run_dir)
    checkpoints = list_checkpoints(root) if root.is_dir() else []
    chosen = {step: weights_for(step, checkpoints, weights) for step in wanted}
    note = weights_note(_checkpoint_steps(chosen), [c for c, _ in checkpoints], weights)
    if note:
        say(note)
    rows: list[dict[str, Any]] = []
    loaded: dict[int, nn.Module] = {}
    for step in wanted:
        at = chosen[step]
        if at is not None and at[0] not in loaded:
            loaded.clear()  # one policy in memory at a time
            loaded[at[0]] = load_policy(at[1])
        policy = None if at is None else loaded[at[0]]
        measured = measure_saved_step(load_rollout(saved[step]), cfg, actor, shadows, policy)
        ckpt = None if at is None else at[0]
        for name, values in measured.items():
            row = {"step": step, "estimator": name, "checkpoint_step": ckpt, "stale_weights": ckpt not in (None, step)}
            rows.append({**row, **values})
    return rows


def _checkpoint_steps(chosen: Mapping[int, tuple[int, Path] | None]) -> dict[int, int | None]:
    """{step: the step of the checkpoint its gradients come from, or None}."""
    return {s: None if c is None else c[0] for s, c in chosen.items()}
