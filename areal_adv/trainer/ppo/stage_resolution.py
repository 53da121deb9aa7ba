"""From config to callables: which function runs each stage.

The docs list the names and their defaults (*Custom advantage computation*, *Stage functions*).

`resolve_advantage` runs once per actor worker, in `PPOActor.__init__`, so a bad
import path stops the worker at start-up with the stage and path in the error.
`select_process` settles, per call, the one choice that depends on call-time
arguments: the legacy PRM mode against an explicit `process_adv_shaping`.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from areal_adv.api.cli_args import GVPO_PARAMS, PRM_MODES, AdvantageShaping, PPOActorConfig, StageSpec
from areal_adv.api.stage_registry import STAGE_REGISTRY
from areal_adv.trainer.ppo import advantage_algorithms as algos
from areal_adv.trainer.ppo.checks.aux_fields import declared_fields
from areal_adv.trainer.ppo.checks.contracts import ResolvedStage, call_stage, check_temporal_result
from areal_adv.trainer.ppo.estimators import (  # noqa: F401  (imported for their @register_stage functions)
    combine,
    entropy_shaping,
    gdpo,
    peer_algorithms,
    role_baselines,
    stateful_baselines,
    step_credit,
    token_baseline,
)
from areal_adv.trainer.ppo.estimators.lambda_fn import BUILTIN_LAMBDAS
from areal_adv.trainer.ppo.rewards.running_norm import is_running, running_state
from areal_adv.trainer.ppo.stage_state import STATE_PARAMETER, StageState
from areal_adv.utils.dynamic_import import PluginResolutionError, bind_kwargs, import_object, resolve_function

__all__ = [
    "PRM_MODES",
    "CallOptions",
    "ResolvedAdvantage",
    "ResolvedStage",
    "default_estimator",
    "resolve_advantage",
    "select_process",
]


@dataclass(frozen=True)
class ResolvedAdvantage:
    """The functions an actor worker will run, resolved from the config."""

    compute: ResolvedStage | None  # None = the default pipeline
    outcome: ResolvedStage
    estimator: ResolvedStage | None  # None = follow actor.gae_timestep_unit
    process: ResolvedStage | None  # None = the call-time PRM mode
    gae_lambda: float | Callable[..., torch.Tensor]
    gae_lambda_kwargs: Mapping[str, Any]
    gae_lambda_source: str
    norm_states: Mapping[str, StageState] = field(default_factory=dict)  # reward_norm / adv_norm at level running

    def stage_states(self) -> dict[str, StageState]:
        """The state objects bound to stateful stages and running normalisations, by name (empty: none)."""
        stages = (self.compute, self.outcome, self.estimator, self.process)
        return {**{s.stage: s.state for s in stages if s is not None and s.state is not None}, **self.norm_states}

    def describe(self, config: PPOActorConfig) -> list[tuple[str, str, str]]:
        """(stage, implementation, kwargs) rows for `areal-adv validate`."""
        if self.compute is not None:
            return [("compute", self.compute.implementation, repr(dict(self.compute.kwargs)))]
        estimator = (
            self.estimator.implementation
            if self.estimator
            else f"{config.gae_timestep_unit}_gae (follows actor.gae_timestep_unit)"
        )
        process = (
            self.process.implementation
            if self.process
            else "call-time PRM mode (additive unless the trainer passes one)"
        )
        rows = [
            ("compute", "default", "{}"),
            ("outcome_reward_shaping", self.outcome.implementation, repr(dict(self.outcome.kwargs))),
            ("estimator", estimator, repr(dict(self.estimator.kwargs)) if self.estimator else "{}"),
            ("process_adv_shaping", process, repr(dict(self.process.kwargs)) if self.process else "{}"),
        ]
        lam = self.gae_lambda if isinstance(self.gae_lambda, float) else self.gae_lambda_source
        rows.append(("gae_lambda", str(lam), repr(dict(self.gae_lambda_kwargs))))
        return rows


# Every built-in stage module is imported above, so the registry is complete here; `functions` checks
# it against the names the config accepts (derived from the same decorators).
OUTCOME_BUILTINS = STAGE_REGISTRY.functions("outcome_reward_shaping")
ESTIMATOR_BUILTINS = STAGE_REGISTRY.functions("estimator")
PROCESS_BUILTINS = STAGE_REGISTRY.functions("process_adv_shaping")


def wants_state(fn: Callable[..., Any]) -> bool:
    """A stage function keeps state across steps when it declares a keyword-only `state` parameter."""
    try:
        param = inspect.signature(fn).parameters.get(STATE_PARAMETER)
    except (TypeError, ValueError):
        return False
    return param is not None and param.kind is inspect.Parameter.KEYWORD_ONLY


def _bind(
    stage: str, name: str, fn: Callable[..., Any], kwargs: Mapping[str, Any], custom: bool
) -> tuple[Callable[..., Any], StageState | None]:
    """Bind a fresh StageState (when the function wants one) and the configured kwargs."""
    where = f"actor.advantage.{stage}"
    if STATE_PARAMETER in kwargs:
        raise PluginResolutionError(
            where,
            name,
            f"kwargs may not set {STATE_PARAMETER!r}: it is the stage's state "
            "object, which the actor worker passes itself",
        )
    state = None
    if callable(fn) and wants_state(fn):
        state = StageState(stage, name)
        fn = functools.partial(fn, **{STATE_PARAMETER: state})
    if kwargs or custom:
        fn = bind_kwargs(fn, kwargs, stage=where, path=name)
    return fn, state


def _resolve_stage(
    stage: str, spec: StageSpec, builtins: Mapping[str, Callable[..., Any]], default: str
) -> ResolvedStage:
    name = default if spec.implementation == "auto" else spec.implementation
    custom = name not in builtins
    fn = import_object(name, stage=f"actor.advantage.{stage}") if custom else builtins[name]
    fn, state = _bind(stage, name, fn, spec.kwargs, custom)
    return ResolvedStage(stage, name, fn, custom=custom, kwargs=dict(spec.kwargs), state=state)


def _run_term(stage: ResolvedStage, inputs: Any) -> Any:
    result = call_stage(stage, inputs)
    if not stage.custom:
        return result
    return check_temporal_result(stage, result, tuple(inputs.loss_mask.shape), inputs.loss_mask.device)


def _resolve_combine(spec: StageSpec, default: str) -> ResolvedStage:
    """`combine`: resolve every estimator term now (bad names fail at start-up) and bind them to the sum."""
    where = "actor.advantage.estimator"
    if set(spec.kwargs) - {"terms"}:
        raise PluginResolutionError(where, "combine", f"got kwargs {sorted(spec.kwargs)}, expected only 'terms'")
    try:
        parsed = combine.parse_terms(spec.kwargs.get("terms"))
    except ValueError as exc:
        raise PluginResolutionError(where, "combine", str(exc)) from exc
    terms, fields = [], {"logprobs"}
    for i, term in enumerate(parsed):
        label = f"terms[{i}] ({term.get('estimator', term.get('term'))})"
        if "term" in term:
            fields.add(term["teacher"])
            terms.append(
                combine.CombineTerm(label, term["weight"], teacher=term["teacher"], kl_estimator=term["kl_estimator"])
            )
            continue
        sub = _resolve_stage("estimator", StageSpec(term["estimator"], term["kwargs"]), ESTIMATOR_BUILTINS, default)
        if sub.state is not None:
            raise PluginResolutionError(
                where,
                "combine",
                f"{label} keeps state across steps; a combine term must "
                "be stateless (configure the stateful stage on its own)",
            )
        fields |= declared_fields(sub.fn)
        terms.append(combine.CombineTerm(label, term["weight"], run=functools.partial(_run_term, sub)))
    fn = functools.partial(combine.combine, terms=tuple(terms))
    fn.batch_fields = tuple(sorted(fields))
    return ResolvedStage("estimator", "combine", fn, custom=False, kwargs=dict(spec.kwargs))


def _resolve_gae_lambda(config: PPOActorConfig) -> tuple[float | Callable[..., torch.Tensor], str]:
    value = config.gae_lambda
    if not isinstance(value, str):
        return float(value), "actor.gae_lambda"
    source = f"actor.gae_lambda ({value})"
    if value in BUILTIN_LAMBDAS:
        fn = BUILTIN_LAMBDAS[value]
        bind_kwargs(fn, config.gae_lambda_kwargs, stage="actor.gae_lambda", path=value)
        return fn, source
    fn = resolve_function(value, config.gae_lambda_kwargs, stage="actor.gae_lambda")
    # Keep the raw function; kwargs travel separately through compute_gae_lambda.
    return getattr(fn, "func", fn), source


def _resolve_process(spec: StageSpec | None) -> ResolvedStage | None:
    if spec is None or spec.implementation == "auto":
        return None
    if spec.implementation == "gvpo":
        # GVPO kwargs are merged with the call-time legacy values at run time.
        return ResolvedStage("process_adv_shaping", "gvpo", algos.gvpo, custom=False, kwargs=dict(spec.kwargs))
    return _resolve_stage("process_adv_shaping", spec, PROCESS_BUILTINS, "additive")


def resolve_advantage(config: PPOActorConfig) -> ResolvedAdvantage:
    """Resolve every configured function; import errors name the stage and path."""
    adv = config.advantage
    adv.validate()
    gae_lambda, lambda_source = _resolve_gae_lambda(config)
    lambda_kwargs = dict(config.gae_lambda_kwargs) if callable(gae_lambda) else {}
    if adv.replaces_compute:
        raw = import_object(adv.compute.implementation, stage="actor.advantage.compute")
        fn, state = _bind("compute", adv.compute.implementation, raw, adv.compute.kwargs, custom=True)
        compute = ResolvedStage(
            "compute", adv.compute.implementation, fn, custom=True, kwargs=dict(adv.compute.kwargs), state=state
        )
        identity = ResolvedStage("outcome_reward_shaping", "identity", algos.identity_outcome, custom=False)
        return ResolvedAdvantage(compute, identity, None, None, gae_lambda, lambda_kwargs, lambda_source)
    outcome_spec = adv.outcome_reward_shaping or StageSpec("identity")
    outcome = _resolve_stage("outcome_reward_shaping", outcome_spec, OUTCOME_BUILTINS, "identity")
    estimator = None
    if adv.estimator is not None:
        default = f"{config.gae_timestep_unit}_gae"
        if adv.estimator.implementation == "combine":
            estimator = _resolve_combine(adv.estimator, default)
        else:
            estimator = _resolve_stage("estimator", adv.estimator, ESTIMATOR_BUILTINS, default)
    process = _resolve_process(adv.process_adv_shaping)
    norm_states = {
        name: running_state(name) for name in ("reward_norm", "adv_norm") if is_running(getattr(config, name))
    }
    return ResolvedAdvantage(None, outcome, estimator, process, gae_lambda, lambda_kwargs, lambda_source, norm_states)


def default_estimator(resolved: ResolvedAdvantage, config: PPOActorConfig) -> ResolvedStage:
    """The configured estimator, else the built-in GAE of `actor.gae_timestep_unit`."""
    if resolved.estimator is not None:
        return resolved.estimator
    name = f"{config.gae_timestep_unit}_gae"
    return ResolvedStage("estimator", name, algos.BUILTIN_ESTIMATORS[name], custom=False)


#: The call-time PRM selection the trainer passes through (deprecated name of `AdvantageShaping`).
CallOptions = AdvantageShaping


def select_process(
    resolved: ResolvedAdvantage, config: PPOActorConfig, options: AdvantageShaping
) -> tuple[ResolvedStage, dict[str, Any]]:
    """Explicit config wins over the call-time mode; explicit GVPO kwargs override legacy ones."""
    options.validate()
    stage = resolved.process
    if stage is None:
        mode = options.mode
        if mode in ("gvpo", "process_weighted") and not config.token_rewards_as_adv:
            raise ValueError(f"advantage_shaping_mode={mode!r} requires actor.token_rewards_as_adv=true (got false)")
        if mode == "process_weighted" and config.mask_no_eos_with_zero:
            raise ValueError(
                "advantage_shaping_mode='process_weighted' requires actor.mask_no_eos_with_zero=false (got true)"
            )
        stage = ResolvedStage("process_adv_shaping", mode, algos.BUILTIN_PROCESS[mode], custom=False)
        return stage, (options.gvpo_kwargs() if mode == "gvpo" else {})
    if stage.implementation == "gvpo" and not stage.custom:
        merged = options.gvpo_kwargs()
        merged.update({k: v for k, v in stage.kwargs.items() if k in GVPO_PARAMS})
        algos.check_gvpo_params(**merged, where="actor.advantage.process_adv_shaping (gvpo)")
        return stage, merged
    return stage, {}
