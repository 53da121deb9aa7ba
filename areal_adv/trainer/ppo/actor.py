"""`PPOActor`: one per data-parallel worker; resolves the advantage plugins at start-up."""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from areal_adv.api.cli_args import AdvantageShaping, ConfigError, PPOActorConfig
from areal_adv.api.train_args import AdvantageShapingConfig
from areal_adv.trainer.parallel.failures import staged
from areal_adv.trainer.ppo.advantage import ResolvedAdvantage, resolve_advantage, run_advantage_pipeline
from areal_adv.trainer.ppo.checks.batch_checks import BatchError
from areal_adv.trainer.ppo.checks.contracts import StageContractError, differences
from areal_adv.trainer.ppo.output_guard import NonFiniteOutputError
from areal_adv.trainer.ppo.stage_state import StageState, StageStateError
from areal_adv.utils.call_agreement import agreement
from areal_adv.utils.data import TrajBatchMeta, concat_batch

logger = logging.getLogger("areal_adv.actor")


class WorkerInitError(RuntimeError):
    """Plugin resolution failed on at least one data-parallel rank (raised on all of them).

    `failed_ranks` names the ranks whose resolution failed.
    """

    def __init__(self, message: str, failed_ranks: list[int] | None = None) -> None:
        super().__init__(message)
        self.failed_ranks = failed_ranks


def _resolve_on_every_rank(config: PPOActorConfig) -> ResolvedAdvantage:
    """Resolve the plugins; in a process group, agree on failure so no rank hangs.

    Each rank imports the configured functions itself. If any rank fails, every
    rank raises one error naming the failing ranks, stages and paths, instead of
    the healthy ranks waiting forever in their first collective.
    """
    import torch.distributed as dist

    resolved, error = None, None
    try:
        resolved = resolve_advantage(config)
    except Exception as exc:  # reported below, on every rank
        error = exc
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        if error is not None:
            raise error
        return resolved
    rank = dist.get_rank()
    reports: list[str | None] = [None] * dist.get_world_size()
    dist.all_gather_object(reports, None if error is None else f"rank {rank}: {error}")
    failures = [r for r in reports if r]
    if failures:
        raise WorkerInitError(
            "actor worker initialisation failed: " + "; ".join(failures), [i for i, r in enumerate(reports) if r]
        ) from error
    return resolved


def pipeline_stage(exc: BaseException) -> str:
    """Where in `compute_advantages` an error arose, for the call-time agreement's message."""
    if isinstance(exc, StageContractError):
        return f"advantage stage {exc.stage!r}"
    for kind, where in (
        (BatchError, "the batch checks"),
        (NonFiniteOutputError, "the output guard"),
        (StageStateError, "a stage's state"),
        (ConfigError, "the config check"),
    ):
        if isinstance(exc, kind):
            return where
    return "the advantage pipeline"


_LEGACY_SHAPING = {
    "mode": "advantage_shaping_mode",
    "negative_scale": "gvpo_negative_scale",
    "zero_penalty": "gvpo_zero_penalty",
    "zero_eps": "gvpo_zero_eps",
}


def _call_shaping(shaping: AdvantageShaping | AdvantageShapingConfig | None, **legacy: Any) -> AdvantageShaping:
    """The call's one shaping object: `shaping` (or its config section), else the legacy keywords over the defaults."""
    given = {name: value for name, value in legacy.items() if value is not None}
    if shaping is None:
        return AdvantageShaping(**given)
    if given:
        names = sorted(_LEGACY_SHAPING[name] for name in given)
        raise ValueError(f"PPOActor.compute_advantages: got shaping= and {names}; pass the values one way only")
    if isinstance(shaping, AdvantageShapingConfig):
        return shaping.shaping()
    if not isinstance(shaping, AdvantageShaping):
        raise TypeError(
            f"PPOActor.compute_advantages: shaping is a {type(shaping).__name__}, expected an AdvantageShaping "
            "or the rollout.prm.advantage_shaping section"
        )
    return shaping


class PPOActor:
    """The actor side of PPO: advantages in, policy update out.

    Every configured function (stages, full replacement, custom GAE lambda) is
    imported and checked here, in the worker's own process, so a bad path stops
    the worker at initialisation with the stage and path in the message.
    """

    def __init__(self, config: PPOActorConfig, engine: Any = None):
        if not isinstance(config, PPOActorConfig):
            raise TypeError(f"PPOActor: config must be a PPOActorConfig, got {type(config).__name__}")
        config.validate()
        # Private copies: the caller's later edits of `config` cannot reach this actor, and edits of
        # `actor.config` (which would disagree with the stages resolved here) are reported at the next call.
        self._config = copy.deepcopy(config)
        self._as_resolved = copy.deepcopy(config)
        self.engine = engine
        self.resolved: ResolvedAdvantage = _resolve_on_every_rank(self._config)

    @property
    def config(self) -> PPOActorConfig:
        """The actor's own copy of the config it was built with (read-only in effect)."""
        return self._config

    def _check_config_unchanged(self) -> None:
        changed = differences(self._as_resolved, self._config, "actor")
        if changed:
            raise ConfigError(
                f"{', '.join(changed)}: PPOActor.config was changed after the actor was built; the stages "
                "were resolved from the original config, so build a new PPOActor with the new config instead"
            )

    def compute_advantages(
        self,
        data: Mapping[str, Any] | Sequence[Mapping[str, Any]],
        meta: TrajBatchMeta | None = None,
        *,
        shaping: AdvantageShaping | AdvantageShapingConfig | None = None,
        advantage_shaping_mode: str | None = None,
        gvpo_negative_scale: float | None = None,
        gvpo_zero_penalty: float | None = None,
        gvpo_zero_eps: float | None = None,
    ) -> dict[str, Any]:
        """Run the configured advantage computation and return a NEW batch dict.

        `data` is one padded batch (with optional `meta`) or a list of trajectory
        groups, which are concatenated with `concat_batch` (metadata derived).
        `shaping` is the call-time PRM choice (`rollout.prm.advantage_shaping.shaping()`);
        `advantage_shaping_mode` and `gvpo_*` are its legacy spelling, one keyword per value. An explicit `actor.advantage.process_adv_shaping` wins over it. Every
        field the pipeline emits is a new tensor (editing it never edits the
        caller's batch); the batch's other fields are the caller's tensors.
        Without `use_decoupled_loss`, `prox_logp` is the same tensor as `logprobs`.

        Under a process group of two or more ranks the ranks agree on failures
        (`areal_adv.utils.call_agreement`): an error on one rank raises one
        `CallFailure` naming that rank, the stage and the cause on every rank,
        before any rank waits in a collective the failing rank never reaches.
        """
        states = self.stage_states
        snapshots = {name: state.snapshot() for name, state in states.items()}
        options = _call_shaping(
            shaping,
            mode=advantage_shaping_mode,
            negative_scale=gvpo_negative_scale,
            zero_penalty=gvpo_zero_penalty,
            zero_eps=gvpo_zero_eps,
        )
        try:
            with agreement("PPOActor.compute_advantages", pipeline_stage):
                return self._compute_advantages(data, meta, options)
        except BaseException:
            for name, state in states.items():  # a failed call leaves every stage's state as it was, on every rank
                state.restore(snapshots[name])
            raise

    def _compute_advantages(self, data: Any, meta: TrajBatchMeta | None, options: AdvantageShaping) -> dict[str, Any]:
        self._check_config_unchanged()
        if not isinstance(data, Mapping):
            if data is None or isinstance(data, (str, bytes)) or not isinstance(data, Sequence):
                raise BatchError(
                    f"data: got {type(data).__name__}, expected a batch dict of tensors or a list of "
                    "trajectory-group dicts"
                )
            if meta is not None:
                raise ValueError(
                    "compute_advantages: pass meta only with a single batch dict, not with a list of groups"
                )
            data, meta = concat_batch(list(data))
        return run_advantage_pipeline(data, meta, self.config, self.resolved, options)

    @property
    def stage_states(self) -> dict[str, StageState]:
        """The `StageState` of every configured stage that keeps state across steps, by stage name."""
        return self.resolved.stage_states()

    def _stateful_stages(self) -> dict[str, Any]:
        """What keeps state, per stage: the bound `StageState`, or a stage object with `state_dict`/`load_state_dict`."""
        out: dict[str, Any] = dict(self.stage_states)
        r = self.resolved
        for name, stage in (
            ("compute", r.compute),
            ("outcome_reward_shaping", r.outcome),
            ("estimator", r.estimator),
            ("process_adv_shaping", r.process),
        ):
            if name in out:
                continue
            fn = None if stage is None else stage.fn
            fn = getattr(fn, "func", fn)  # kwargs are bound with functools.partial
            if callable(getattr(fn, "state_dict", None)) and callable(getattr(fn, "load_state_dict", None)):
                out[name] = fn
        return out

    def state_fingerprints(self) -> dict[str, str]:
        """sha256 of each `StageState`: equal on every data-parallel rank when the ranks agree on the state."""
        return {name: state.fingerprint() for name, state in self.stage_states.items()}

    def state_dict(self) -> dict[str, Any]:
        """The state of every configured stage that keeps one (checkpointed with the run); {} when none does.

        Stages with a `StageState` (KRPO, SPO, plugins declaring `state`) and stage
        objects with their own `state_dict` / `load_state_dict` are both included.
        """
        return {"stages": {name: fn.state_dict() for name, fn in self._stateful_stages().items()}}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what `state_dict` returned; the stages with state must be the same ones."""
        saved = dict(state.get("stages", {})) if isinstance(state, Mapping) else None
        if saved is None:
            raise ValueError(f"PPOActor.load_state_dict: got {type(state).__name__}, expected the dict of state_dict()")
        stages = self._stateful_stages()
        if set(saved) != set(stages):
            raise ValueError(
                f"PPOActor.load_state_dict: the checkpoint holds state for stages {sorted(saved)}, "
                f"but the configured stages with state are {sorted(stages)}"
            )
        for name, fn in stages.items():
            fn.load_state_dict(saved[name])

    @staged("policy update")
    def ppo_update(self, data: Mapping[str, Any], **options: Any) -> dict[str, float]:
        """One PPO update over `data` (the output of `compute_advantages`).

        `options`: `proximal_from_forward` and `observe` of
        `areal_adv.trainer.ppo.training.update.ppo_update`.
        """
        self._check_config_unchanged()
        if self.engine is None:
            raise RuntimeError("PPOActor.ppo_update needs a training engine; construct PPOActor(config, engine)")
        from areal_adv.trainer.ppo.training.update import ppo_update

        return ppo_update(self.config, self.engine, data, **options)
