"""Run the configured advantage pipeline once before step 0, so that step 0 loads and compiles nothing.

numba keeps the compiled kernels on disk (`cache=True`), but each process still loads
them, and starts numba's runtime, on the first call of each kernel. On 2 CPU cores that
took about a second, and it used to land inside step 0's `time/advantages` (on a cold
cache the whole compile did). `warm_up_advantage_kernels` pays that cost in
`Trainer.__init__` instead. It builds a separate `PPOActor` from the run's actor config
and calls `compute_advantages` on `dry_run.synthetic_batch`: the layout the trainer
exports for this config, so the same stages run, on the same fused or tensor path, with
the same compiled signatures. With more than one numba thread, large batches run on the
parallel drivers (`kernels.numba_cpu.use_parallel`), so a second call, on the same rows
right-padded past `PARALLEL_MIN_ELEMENTS`, loads those too.

Nothing of the run changes:

* the trainer's actor is not used. The warm-up actor's stage state is saved before the
  calls and loaded back after them; that includes any stage object the two actors share
  (a module-level instance with `state_dict` / `load_state_dict`);
* the global random states (torch's CPU generator, the CUDA device's, numpy's and
  `random`'s) are saved before and put back after, so a stage that draws from them does
  not shift the run's sampling;
* a stage that raises on the synthetic batch (say, a plugin that expects the real task's
  data) ends the warm-up early. The result names the error in one line, the states are
  restored as above, and the run goes on; step 0 then loads whatever is still unloaded.
  A state that cannot be loaded back raises, because the run would no longer be the same
  run. A plugin's own module globals, outside `state` and `state_dict`, are not restored.

Under a process group every rank makes the same calls, so the pipeline's collectives
match, and a failure on one rank ends the warm-up on every rank (the call-time agreement
of `PPOActor.compute_advantages`).
"""

from __future__ import annotations

import copy
import dataclasses
import time
from dataclasses import dataclass
from typing import Any

import torch

from areal_adv.api.cli_args import PPOActorConfig
from areal_adv.api.train_args import ExperimentConfig
from areal_adv.trainer.parallel.distributed import DistContext, all_gather_objects
from areal_adv.trainer.ppo.actor import PPOActor
from areal_adv.trainer.ppo.checks.contracts import StageContractError
from areal_adv.trainer.ppo.kernels.numba_cpu import PARALLEL_MIN_ELEMENTS, use_parallel
from areal_adv.trainer.rollout.stage_fields import stage_batch_fields
from areal_adv.trainer.run.dry_run import synthetic_batch
from areal_adv.utils.batch_meta import TrajBatchMeta
from areal_adv.utils.call_agreement import CallFailure
from areal_adv.utils.norm_kernels import PARALLEL_MIN_ELEMENTS as NORM_PARALLEL_MIN_ELEMENTS
from areal_adv.utils.random_states import preserved_random_states

__all__ = ["KernelWarmUp", "warm_up_advantage_kernels"]


@dataclass(frozen=True)
class KernelWarmUp:
    """How the warm-up went: its seconds, the batches it ran ("small", "large") and the error that ended it."""

    seconds: float
    batches: tuple[str, ...]
    error: str | None = None  # the error's first line, naming the stage; None when every batch ran

    def message(self) -> str:
        """The one line the trainer prints below its opening block."""
        if self.error is None:
            return f"[areal-adv] advantage kernels ready in {self.seconds:.2f} s"
        return (
            f"[areal-adv] advantage kernels not loaded before step 0: on a synthetic batch, {self.error}; "
            "the run goes on (step 0 loads them)"
        )


def _one_line(exc: BaseException) -> str:
    """The error's first line; prefixed with its type unless it names the stage (and rank) itself."""
    lines = str(exc).strip().splitlines()
    if isinstance(exc, (StageContractError, CallFailure)) and lines:
        return lines[0]
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


def _on_device(batch: dict[str, Any], meta: TrajBatchMeta, device: torch.device) -> tuple[dict[str, Any], Any]:
    """The batch and its metadata's reference rewards on `device`, where the trainer's batches are."""
    if device.type == "cpu":
        return batch, meta
    moved = {key: value.to(device) if torch.is_tensor(value) else value for key, value in batch.items()}
    if meta.rollout_groups is None:
        return moved, meta
    groups = tuple(
        g if g is None or g.rewards is None else dataclasses.replace(g, rewards=g.rewards.to(device))
        for g in meta.rollout_groups
    )
    return moved, dataclasses.replace(meta, rollout_groups=groups)


def _large_batch_reachable(device: torch.device, ctx: DistContext) -> bool:
    """Whether any rank runs large batches on the parallel drivers (numba with more than one thread, on CPU).

    Decided together, so every rank makes the same calls and the pipeline's collectives match.
    """
    mine = device.type == "cpu" and use_parallel(2, max(PARALLEL_MIN_ELEMENTS, NORM_PARALLEL_MIN_ELEMENTS))
    return any(all_gather_objects(mine, ctx))


def _run_batches(
    actor: PPOActor, cfg: ExperimentConfig, task: Any, device: torch.device, large: bool
) -> tuple[tuple[str, ...], str | None]:
    """Call `compute_advantages` on the small synthetic batch, then (when `large`) on the wide one.

    Returns the batches that ran and the error that ended the calls (None: none did).
    """
    done: list[str] = []
    try:
        fields = stage_batch_fields(actor.resolved)
        batches = [("small", synthetic_batch(cfg, 0, task, fields))]
        if large:  # the same rows, right-padded until rows x positions reaches the parallel threshold
            rows = batches[0][1][0]["input_ids"].shape[0]
            threshold = max(PARALLEL_MIN_ELEMENTS, NORM_PARALLEL_MIN_ELEMENTS)
            batches.append(("large", synthetic_batch(cfg, 0, task, fields, min_positions=-(-threshold // rows))))
        for name, (batch, meta) in batches:
            batch, meta = _on_device(batch, meta, device)
            actor.compute_advantages(batch, meta, shaping=cfg.rollout.prm.advantage_shaping)
            done.append(name)
    except Exception as exc:  # a plugin that only works on the real task's data: noted, the run goes on
        return tuple(done), _one_line(exc)
    return tuple(done), None


def warm_up_advantage_kernels(
    cfg: ExperimentConfig,
    actor_config: PPOActorConfig,
    *,
    task: Any,
    device: torch.device,
    ctx: DistContext,
) -> KernelWarmUp:
    """Run the pipeline of `actor_config` once (twice with parallel drivers) on synthetic batches; see the module.

    `task` is the run's task object (its turn structure shapes the batch). Returns what ran
    and how long it took; an error in a stage is reported in the result, not raised.
    """
    start = time.perf_counter()
    with preserved_random_states(device):
        try:
            actor = PPOActor(actor_config)
        except Exception as exc:  # it resolved for the trainer's actor just before; noted, should it fail now
            return KernelWarmUp(time.perf_counter() - start, (), _one_line(exc))
        saved = copy.deepcopy(actor.state_dict())
        try:
            large = _large_batch_reachable(device, ctx)
            batches, error = _run_batches(actor, cfg, task, device, large)
        finally:
            actor.load_state_dict(saved)  # puts back the state of stage objects shared with the trainer's actor
    return KernelWarmUp(time.perf_counter() - start, batches, error)
