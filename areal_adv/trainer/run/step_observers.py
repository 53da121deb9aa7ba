"""A training step's named phases, and the features that watch or change the batch at one of them.

`Trainer.step` does the step's own work in a fixed order: rollout, the reference
log-probs and values, the advantages, the update, the metrics row. Everything else that
reads the batch during a step (the shadow-estimator diagnostics, saved rollouts, the
zero-advantage filter, parameter checksums, and the next feature) is a *step observer*: one
class that names the phase it runs at, the batch fields it reads there and whether it
replaces what the update trains on, registered once with `@step_observer(enabled=...)`.
The trainer builds the observers a config enables and calls them at their phase; the step
never names them.

From the loops the field holds up: transformers' `TrainerCallback` (a feature is one object
the loop calls at named events, and the loop never learns its name) and Lightning's
callbacks that keep their own state. Unlike both, an observer declares what it reads, so the
trainer can tell what the step must compute for it: whether the trained weights' log-probs of
the sampled tokens (`prox_logp`) must exist before the update, or may come from the
update's own forward (`logprobs_read_before_update`). And there are two phases, named after
the step's work, not thirty hooks. torchtune's copy-and-edit recipes are the other choice: a
short loop, but every feature is an edit of it.

Phases:

* `ADVANTAGES`: after the pipeline, before the update. The observer sees the rollout batch
  (with its reference log-probs, values and behaviour statistics), its `TrajBatchMeta` and
  the pipeline's output. It returns metrics for the step's row; one that changes the batch
  may return what the update trains on instead. At this phase the observers that only read
  run first, in registration order, then those that change the batch: every reader sees the
  pipeline's own output.
* `LOGGED`: after the step's row is logged (metrics returned here are not logged).
"""

from __future__ import annotations

import enum
import importlib
from collections.abc import Callable, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import torch

from areal_adv.api.train_args import ExperimentConfig
from areal_adv.trainer.parallel.failures import stage
from areal_adv.utils.batch_meta import TrajBatchMeta

if TYPE_CHECKING:
    from areal_adv.trainer.parallel.distributed import DistContext
    from areal_adv.trainer.parallel.engine import PolicyEngine
    from areal_adv.trainer.ppo.actor import PPOActor
    from areal_adv.trainer.run.metrics import PhaseTimer

__all__ = [
    "BUILTIN_OBSERVERS",
    "TRAINED_LOGPROBS",
    "Observation",
    "Phase",
    "StepObserver",
    "StepObservers",
    "StepServices",
    "StepView",
    "enabled_observers",
    "logprobs_read_before_update",
    "step_observer",
    "unregister_step_observer",
]

#: The modules whose observers ship with the trainer; each registers its observers when imported.
BUILTIN_OBSERVERS = (
    "areal_adv.trainer.run.diagnostics_observers",
    "areal_adv.trainer.run.group_filter",
    "areal_adv.trainer.run.param_checksums",
)
#: The field that holds the trained weights' log-probs of the sampled tokens, before the update.
TRAINED_LOGPROBS = frozenset({"prox_logp"})


class Phase(enum.Enum):
    ADVANTAGES = "advantages"
    LOGGED = "logged"


@dataclass(frozen=True)
class StepView:
    """What an observer sees at its phase. Read it; an observer that changes the batch returns a new dict."""

    step: int
    batch: Mapping[str, Any]  # the rollout batch with the prepared fields (the pipeline's input)
    meta: TrajBatchMeta
    data: Mapping[str, Any]  # the pipeline's output: what the update trains on
    row: Mapping[str, Any] | None = None  # LOGGED: the row as logged


@dataclass(frozen=True)
class Observation:
    """An observer's result: metrics for the step's row, and (only if it changes the batch) the new batch."""

    metrics: Mapping[str, float] = field(default_factory=dict)
    data: dict[str, Any] | None = None  # what the update trains on instead (None: unchanged)
    skip_update: bool = False  # nothing left to train on this step


@dataclass(frozen=True)
class StepServices:
    """What the trainer lends its observers, by name, instead of the trainer itself."""

    cfg: ExperimentConfig
    ctx: DistContext
    device: torch.device
    run_dir: Path
    actor: PPOActor
    engine: PolicyEngine
    #: the run's modules by role (policy, reference, critic, sampler), None where the run has none
    models: Callable[[], Mapping[str, torch.nn.Module | None]]


class StepObserver:
    """A feature run at one phase of every step. Set the class attributes, implement `observe`."""

    #: a short name, for messages and tests
    name: ClassVar[str]
    phase: ClassVar[Phase]
    #: the batch and pipeline-output fields `observe` reads (what the step must have computed by then)
    reads: ClassVar[frozenset[str]] = frozenset()
    #: whether `observe` may return a batch the update trains on instead of the pipeline's output
    changes_batch: ClassVar[bool] = False
    #: the `time/<name>` its calls are charged to, kept out of the step's `seconds` (None: part of the step)
    timed_as: ClassVar[str | None] = None

    def __init__(self, cfg: ExperimentConfig, services: StepServices) -> None:
        """Built once per run, after the trainer's models and actor (`StepObservers.for_run`)."""

    def due(self, step: int) -> bool:
        """Whether to run at this step (every step by default)."""
        return True

    def observe(self, view: StepView) -> Observation:
        raise NotImplementedError

    def opening_lines(self) -> str | None:
        """Lines for the run's opening block (what is measured, what is skipped), or None."""
        return None

    def close(self) -> None:
        """The run ended (files to close)."""


@dataclass(frozen=True)
class _Registration:
    cls: type[StepObserver]
    enabled: Callable[[ExperimentConfig], bool]
    build: Callable[[ExperimentConfig, StepServices], StepObserver]


_REGISTRY: dict[str, _Registration] = {}
ObserverClass = TypeVar("ObserverClass", bound=type[StepObserver])


def step_observer(
    *,
    enabled: Callable[[ExperimentConfig], bool],
    build: Callable[[ExperimentConfig, StepServices], StepObserver] | None = None,
) -> Callable[[ObserverClass], ObserverClass]:
    """Register an observer class: `enabled(cfg)` says whether a run has it, `build(cfg, services)` makes it
    (default: the class called with them). A second registration of the same name is refused."""

    def register(cls: ObserverClass) -> ObserverClass:
        name = getattr(cls, "name", None)
        if not isinstance(name, str) or not isinstance(getattr(cls, "phase", None), Phase):
            raise TypeError(f"step observer {cls.__qualname__}: expected class attributes name (str) and phase (Phase)")
        if name in _REGISTRY and _REGISTRY[name].cls is not cls:
            raise ValueError(f"step observer {name!r} is already registered ({_REGISTRY[name].cls.__qualname__})")
        _REGISTRY[name] = _Registration(cls, enabled, build or cls)  # type: ignore[arg-type]
        return cls

    return register


def unregister_step_observer(name: str) -> None:
    """Remove a registration (tests, and a plugin replacing its own)."""
    _REGISTRY.pop(name, None)


def _registrations() -> list[_Registration]:
    """Every registration: the built-ins in `BUILTIN_OBSERVERS` order, then the others in registration order.

    Sorted, not left in registration order: a built-in module imported early (a test, a plugin
    importing `group_filter`) would otherwise register ahead of those listed before it.
    """
    for module in BUILTIN_OBSERVERS:
        importlib.import_module(module)
    rank = {module: i for i, module in enumerate(BUILTIN_OBSERVERS)}
    return sorted(_REGISTRY.values(), key=lambda r: rank.get(r.cls.__module__, len(rank)))  # stable


def enabled_observers(cfg: ExperimentConfig) -> list[type[StepObserver]]:
    """The observer classes this config enables, in registration order (nothing is built)."""
    return [r.cls for r in _registrations() if r.enabled(cfg)]


def logprobs_read_before_update(observers: Sequence[type[StepObserver] | StepObserver]) -> list[str]:
    """The observers that need the trained weights' log-probs before the update: they read them at their phase,
    or change what the update trains on (then the update's forward does not see every sampled token)."""
    return [o.name for o in observers if o.changes_batch or o.reads & TRAINED_LOGPROBS]


@dataclass(frozen=True)
class Merged:
    """The observers' results at one phase, together."""

    metrics: dict[str, float]
    data: Mapping[str, Any]
    skip_update: bool


class StepObservers:
    """A run's observers, called at their phases in order (readers before changers)."""

    def __init__(self, observers: Sequence[StepObserver]) -> None:
        self.observers = sorted(observers, key=lambda o: o.changes_batch)  # stable: registration order kept

    @classmethod
    def for_run(cls, cfg: ExperimentConfig, services: StepServices) -> StepObservers:
        return cls([r.build(cfg, services) for r in _registrations() if r.enabled(cfg)])

    def at(self, phase: Phase, view: StepView, timer: PhaseTimer) -> Merged:
        """Run the due observers of `phase` on `view`; each reader sees the pipeline's output."""
        metrics: dict[str, float] = {}
        data, skip = view.data, False
        for observer in (o for o in self.observers if o.phase is phase):
            if observer.timed_as is not None:
                timer.seconds.setdefault(observer.timed_as, 0.0)
            if not observer.due(view.step):
                continue
            seen = view if data is view.data else StepView(view.step, view.batch, view.meta, data, view.row)
            with stage(observer.name), timer.phase(observer.timed_as) if observer.timed_as else nullcontext():
                result = observer.observe(seen)
            metrics.update(result.metrics)
            if result.data is not None or result.skip_update:
                if not observer.changes_batch:
                    raise RuntimeError(f"step observer {observer.name!r} returned a batch but does not change batches")
                data = data if result.data is None else result.data
                skip = skip or result.skip_update
        return Merged(metrics, data, skip)

    @property
    def timed_as(self) -> list[str]:
        """The `time/<name>` keys the observers are charged to (kept out of the step's `seconds`)."""
        return sorted({o.timed_as for o in self.observers if o.timed_as is not None})

    def find(self, name: str) -> StepObserver | None:
        """The observer registered under `name`, if this run has it."""
        return next((o for o in self.observers if o.name == name), None)

    def opening_lines(self) -> list[str]:
        return [line for o in self.observers if (line := o.opening_lines())]

    def close(self) -> None:
        for observer in self.observers:
            observer.close()
