"""Configuration dataclasses of the PPO actor and its advantage pipeline.

Configs hold only plain values, built-in names and import paths, so that they
serialise to YAML/JSON unchanged and can be shipped to remote workers. Every
dataclass validates itself on construction and names the offending field.
`areal.api.cli_args` re-exports everything here (the spec's import path).
"""

from __future__ import annotations

import dataclasses
import functools
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from areal.api.builtin_stages import BUILTIN_STAGE_IMPLEMENTATIONS
from areal.api.config_checks import ConfigError
from areal.api.config_checks import check_bool as _check_bool
from areal.api.config_checks import check_choice as _check_choice
from areal.api.config_checks import check_int as _check_int
from areal.api.config_checks import check_json_value as _check_json_value
from areal.api.config_checks import check_number as _check_number
from areal.api.config_checks import is_import_path as _is_import_path
from areal.api.config_checks import is_integer as _is_integer
from areal.api.config_values import plain
from areal.utils.suggest import did_you_mean

_NORM_LEVELS = ("batch", "group", "running", None)


@dataclass
class NormConfig:
    """How rewards or advantages are normalised.

    Group boundaries come from the batch metadata (`TrajBatchMeta`); the fixed
    `group_size` is only a fallback when a batch carries no metadata.
    """

    mean_level: str | None = "batch"
    std_level: str | None = "batch"
    mean_leave1out: bool = False
    std_unbiased: bool = True
    eps: float = 1e-5
    group_size: int = 1

    def __post_init__(self) -> None:
        _check_choice("NormConfig.mean_level", self.mean_level, _NORM_LEVELS)
        _check_choice("NormConfig.std_level", self.std_level, _NORM_LEVELS)
        levels = (self.mean_level, self.std_level)
        if "running" in levels and not set(levels) <= {"running", None}:
            raise ConfigError(
                f"NormConfig: mean_level={self.mean_level!r} with std_level={self.std_level!r}; running statistics "
                "(cumulative over the run, as ROLL's norm_*_type: running) combine only with running or null"
            )
        _check_bool("NormConfig.mean_leave1out", self.mean_leave1out)
        if self.mean_level == "running" and self.mean_leave1out:
            raise ConfigError(
                "NormConfig.mean_leave1out: true with mean_level='running'; the running mean spans the "
                "whole run, so there is no sample to leave out (set mean_leave1out: false)"
            )
        _check_bool("NormConfig.std_unbiased", self.std_unbiased)
        _check_number("NormConfig.eps", self.eps, low=0.0)
        _check_int("NormConfig.group_size", self.group_size, 1)


_NORM_FIELDS = tuple(f.name for f in dataclasses.fields(NormConfig))
_norm_dataclass_init = NormConfig.__init__


@functools.wraps(_norm_dataclass_init)
def _norm_init(self: NormConfig, *args: Any, **kwargs: Any) -> None:
    """The dataclass __init__, recording whether the caller chose `group_size` (for `singleton_centering`).

    Why: `group_size` is a fallback here, so its default 1 is harmless, but a caller who
    asks for 1 with group centering gets AReaL's warning. A construction that passes every
    field (OmegaConf's `to_object` of a loaded YAML, `dataclasses.replace`, a worker's copy)
    cannot tell a chosen 1 from the default and does not count as a choice.
    """
    named = set(_NORM_FIELDS[: len(args)]) | set(kwargs)
    # an attribute outside the dataclass fields (so neither compared, copied nor serialised)
    self._group_size_chosen = "group_size" in named and named != set(_NORM_FIELDS)  # type: ignore[attr-defined]
    _norm_dataclass_init(self, *args, **kwargs)


NormConfig.__init__ = _norm_init  # type: ignore[method-assign]  # the generated __init__, wrapped

#: AReaL's construction-time warning (its words are what its upstream tests match).
SINGLETON_GROUP_CENTERING = (
    "{field}: mean_level='group' with group_size=1: singleton group centering erases the task reward (a batch "
    "without group metadata is cut into groups of one, each centred on its own score); use group_size >= 2 (the "
    "rollouts per prompt) or mean_level null or 'batch'"
)


def singleton_centering(norm: NormConfig | Mapping[str, Any] | None) -> bool:
    """True for group-level centering with a chosen group_size of 1 (a mapping's key, or a NormConfig argument)."""
    if isinstance(norm, Mapping):
        return norm.get("mean_level") == "group" and norm.get("group_size") == 1
    return (
        isinstance(norm, NormConfig)
        and norm.mean_level == "group"
        and norm.group_size == 1
        and getattr(norm, "_group_size_chosen", False)
    )


def _build(field: str, cls: type, value: Mapping[str, Any]) -> Any:
    """A config section from a mapping (a DictConfig included); unknown keys name the field."""
    value = plain(value)
    if any(not isinstance(k, str) for k in value):
        raise ConfigError(f"{field}: got {value!r}, expected a mapping with string keys")
    try:
        return cls(**value)
    except TypeError as exc:
        names = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(value) - set(names))
        raise ConfigError(
            f"{field}: unknown keys {unknown}, expected a subset of {names} ({exc}){did_you_mean(unknown, names)}"
        ) from None


def _check_norm_eps(field: str, norm: NormConfig | None) -> None:
    """The pipeline divides by std + eps: with eps 0, a group of equal values gives 0 / 0."""
    if norm is not None and norm.std_level is not None and norm.eps <= 0:
        raise ConfigError(
            f"{field}.eps: got {norm.eps!r}, expected a number > 0 when std_level is set (a group or batch "
            "whose values are all equal has std 0, and (x - mean) / (std + 0) is 0/0 = NaN)"
        )


# ---------------------------------------------------------------------------
# Pluggable advantage stages
# ---------------------------------------------------------------------------

STAGE_NAMES: tuple[str, ...] = ("outcome_reward_shaping", "estimator", "process_adv_shaping")
GVPO_PARAMS: tuple[str, ...] = ("negative_scale", "zero_penalty", "zero_eps")
#: The call-time process-reward shaping modes (`AdvantageShaping.mode`).
PRM_MODES: tuple[str, ...] = ("additive", "gvpo", "process_weighted")


def check_gvpo_values(values: Mapping[str, Any], field: str) -> None:
    """Each GVPO parameter in `values` is a finite number >= 0; `field` names it, with `{name}` for the key."""
    for name, value in values.items():
        _check_number(field.format(name=name), value, low=0.0)


@dataclass(frozen=True)
class AdvantageShaping:
    """The call-time process-reward shaping: a mode and GVPO's parameters, which travel together.

    The defaults written here are the only copy: the config section
    (`rollout.prm.advantage_shaping`), `PPOActor.compute_advantages`, the built-in
    `gvpo` stage and `AdvantageInputs` all take them from this class.
    """

    mode: str = "additive"
    negative_scale: float = 0.2
    zero_penalty: float = 0.4
    zero_eps: float = 1e-6

    def validate(self, mode_field: str = "advantage_shaping_mode", field: str = "gvpo_{name}") -> None:
        """Checked on every call, whether or not the batch has process rewards to shape."""
        _check_choice(mode_field, self.mode, PRM_MODES)
        check_gvpo_values(self.gvpo_kwargs(), field)

    def gvpo_kwargs(self) -> dict[str, float]:
        """The keyword arguments of the `gvpo` stage function."""
        return {name: getattr(self, name) for name in GVPO_PARAMS}


@dataclass
class StageSpec:
    """One replaceable stage: a built-in name or a dotted import path, plus JSON kwargs.

    Loading a config never imports user code; the path is resolved by each actor
    worker when it is initialised.
    """

    implementation: str = "auto"
    kwargs: dict[str, Any] = field(default_factory=dict)

    def validate(self, stage: str) -> None:
        where = f"actor.advantage.{stage}"
        if not isinstance(self.implementation, str) or not self.implementation:
            raise ConfigError(f"{where}.implementation: got {self.implementation!r}, expected a non-empty string")
        builtins = BUILTIN_STAGE_IMPLEMENTATIONS[stage]
        if self.implementation not in builtins and not _is_import_path(self.implementation):
            raise ConfigError(
                f"{where}.implementation: got {self.implementation!r}, expected one of "
                f"{list(builtins)} or a dotted import path such as 'my_package.my_module.my_function'"
            )
        if self.kwargs is None:
            self.kwargs = {}
        if isinstance(self.kwargs, Mapping):  # a DictConfig or another mapping: stored as a plain dict
            self.kwargs = plain(self.kwargs)
        if not isinstance(self.kwargs, dict):
            raise ConfigError(
                f"{where}.kwargs: got {plain(self.kwargs)!r} ({type(self.kwargs).__name__}), expected a mapping "
                "of keyword arguments"
            )
        self.kwargs = _check_json_value(f"{where}.kwargs", self.kwargs)  # tuples become lists, as saved

    @property
    def is_builtin(self) -> bool:
        return "." not in self.implementation


@dataclass
class AdvantageConfig:
    """`actor.advantage`: a whole-computation replacement or per-stage replacements.

    `null` for a stage means "not configured" (built-in default behaviour); `auto`
    selects the stage's default implementation explicitly.
    """

    compute: StageSpec = field(default_factory=lambda: StageSpec("default"))
    outcome_reward_shaping: StageSpec | None = None
    estimator: StageSpec | None = None
    process_adv_shaping: StageSpec | None = None

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        if self.compute is None:
            self.compute = StageSpec("default")
        self.compute = _as_stage_spec(self.compute, "compute")
        self.compute.validate("compute")
        for stage in STAGE_NAMES:
            spec = getattr(self, stage)
            if spec is not None:
                spec = _as_stage_spec(spec, stage)
                setattr(self, stage, spec)
                spec.validate(stage)
        if self.compute.implementation == "default":
            if self.compute.kwargs:
                raise ConfigError(
                    "actor.advantage.compute.kwargs: the default compute takes no kwargs "
                    f"(got {sorted(self.compute.kwargs)}); configure the stages instead"
                )
        else:
            configured = [s for s in STAGE_NAMES if getattr(self, s) is not None]
            if configured:
                raise ConfigError(
                    f"actor.advantage: compute.implementation={self.compute.implementation!r} replaces the "
                    f"whole computation and cannot be combined with stage config {configured}; "
                    "set those stages to null"
                )
        process = self.process_adv_shaping
        if process is not None and process.implementation == "auto" and process.kwargs:
            raise ConfigError(
                "actor.advantage.process_adv_shaping.kwargs: 'auto' accepts no kwargs "
                f"(got {sorted(process.kwargs)}); name the implementation (e.g. gvpo) to pass kwargs"
            )
        if process is not None and process.implementation == "gvpo":
            unknown = sorted(set(process.kwargs) - set(GVPO_PARAMS))
            if unknown:
                raise ConfigError(
                    f"actor.advantage.process_adv_shaping.kwargs: unknown gvpo parameters {unknown}, "
                    f"expected a subset of {list(GVPO_PARAMS)}{did_you_mean(unknown, GVPO_PARAMS)}"
                )
            check_gvpo_values(process.kwargs, "actor.advantage.process_adv_shaping.kwargs.{name}")
        for stage, names in (
            ("process_adv_shaping", ("additive", "process_weighted")),
            ("outcome_reward_shaping", ("identity",)),
        ):
            spec = getattr(self, stage)
            if spec is not None and spec.implementation in names and spec.kwargs:
                raise ConfigError(
                    f"actor.advantage.{stage}.kwargs: built-in {spec.implementation!r} takes no kwargs "
                    f"(got {sorted(spec.kwargs)})"
                )

    @property
    def replaces_compute(self) -> bool:
        return self.compute.implementation != "default"


def _as_stage_spec(value: Any, stage: str) -> StageSpec:
    if isinstance(value, StageSpec):
        return value
    if isinstance(value, str):
        return StageSpec(implementation=value)
    if isinstance(value, Mapping):
        value = plain(value)
        unknown = sorted(set(value) - {"implementation", "kwargs"})
        if unknown:
            raise ConfigError(
                f"actor.advantage.{stage}: unknown keys {unknown}, expected 'implementation' and 'kwargs'"
                f"{did_you_mean(unknown, ('implementation', 'kwargs'))}"
            )
        kwargs = value.get("kwargs")
        return StageSpec(implementation=value.get("implementation", "auto"), kwargs={} if kwargs is None else kwargs)
    raise ConfigError(
        f"actor.advantage.{stage}: got {value!r}, expected null or {{implementation: ..., kwargs: {{...}}}}"
    )


# ---------------------------------------------------------------------------
# The PPO actor
# ---------------------------------------------------------------------------


@dataclass
class PPOActorConfig:
    """Fields of AReaL's `actor` section that the advantage pipeline and PPO update read."""

    # Reward processing
    reward_bias: float = 0.0
    reward_scaling: float = 1.0
    reward_clip: float = 20.0
    reward_norm: NormConfig | None = None
    overlong_reward_penalty: bool = False
    overlong_tokens: int | None = None
    overlong_penalty_factor: float | None = None
    max_new_tokens: int = 1024
    mask_no_eos_with_zero: bool = False
    # KL to the reference policy
    kl_ctl: float = 0.1
    kl_estimator: str = "k1"
    # Temporal credit assignment
    discount: float = 1.0
    gae_lambda: float | str = 1.0
    gae_lambda_kwargs: dict[str, Any] = field(default_factory=dict)
    gae_timestep_unit: str = "token"
    # Advantage post-processing
    adv_norm: NormConfig | None = None
    token_rewards_as_adv: bool = True
    # Log-probabilities
    use_decoupled_loss: bool = False
    recompute_logprob: bool = False
    # PPO update
    eps_clip: float = 0.2
    eps_clip_higher: float | None = None
    c_clip: float | None = None
    behav_imp_weight_cap: float | None = None
    ppo_n_minibatches: int = 1
    # rows per forward/backward on each rank (verl: ppo_micro_batch_size_per_gpu); None: a whole minibatch.
    # Gradients accumulate over the micro-batches into one optimiser step per minibatch, equal to the
    # one-pass gradient; the no-grad log-prob and reference passes are chunked alike. Bounds activation memory.
    ppo_micro_batch_size: int | None = None
    temperature: float = 1.0
    # Pluggable advantage computation
    advantage: AdvantageConfig = field(default_factory=AdvantageConfig)

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        p = "actor."
        _check_number(p + "reward_bias", self.reward_bias)
        # A negative coefficient would reward divergence from the reference policy.
        _check_number(p + "kl_ctl", self.kl_ctl, low=0.0)
        _check_number(p + "reward_scaling", self.reward_scaling)
        _check_number(p + "reward_clip", self.reward_clip, low=0.0, low_open=True, allow_inf=True)
        _check_number(p + "discount", self.discount, low=0.0, high=1.0)
        _check_choice(p + "kl_estimator", self.kl_estimator, ("k1", "k2", "k3"))
        _check_choice(p + "gae_timestep_unit", self.gae_timestep_unit, ("token", "turn"))
        for name in (
            "overlong_reward_penalty",
            "mask_no_eos_with_zero",
            "token_rewards_as_adv",
            "use_decoupled_loss",
            "recompute_logprob",
        ):
            _check_bool(p + name, getattr(self, name))
        if isinstance(self.gae_lambda_kwargs, Mapping):
            self.gae_lambda_kwargs = plain(self.gae_lambda_kwargs)
        if isinstance(self.gae_lambda, str):
            if not self.gae_lambda or ("." not in self.gae_lambda and not self.gae_lambda.isidentifier()):
                raise ConfigError(
                    f"{p}gae_lambda: got {self.gae_lambda!r}, expected a number in [0, 1], a built-in "
                    "lambda name (constant, vapo, relative_position) or a dotted import path"
                )
        else:
            _check_number(p + "gae_lambda", self.gae_lambda, low=0.0, high=1.0)
            if self.gae_lambda_kwargs:
                raise ConfigError(
                    f"{p}gae_lambda_kwargs: got {sorted(self.gae_lambda_kwargs)} but gae_lambda is a "
                    "constant; kwargs need a lambda function"
                )
        if not isinstance(self.gae_lambda_kwargs, dict):
            raise ConfigError(f"{p}gae_lambda_kwargs: got {self.gae_lambda_kwargs!r}, expected a mapping")
        self.gae_lambda_kwargs = _check_json_value(p + "gae_lambda_kwargs", self.gae_lambda_kwargs)
        _check_int(p + "max_new_tokens", self.max_new_tokens, 1)
        if self.overlong_reward_penalty:
            if not _is_integer(self.overlong_tokens, low=1, high=self.max_new_tokens):
                raise ConfigError(
                    f"{p}overlong_tokens: got {self.overlong_tokens!r}, expected an integer in "
                    f"[1, max_new_tokens={self.max_new_tokens}] when overlong_reward_penalty is true"
                )
            if self.overlong_penalty_factor is None:
                raise ConfigError(
                    f"{p}overlong_penalty_factor: got None, expected a number when overlong_reward_penalty is true"
                )
            _check_number(p + "overlong_penalty_factor", self.overlong_penalty_factor, low=0.0)
        if singleton_centering(self.reward_norm):
            warnings.warn(SINGLETON_GROUP_CENTERING.format(field=p + "reward_norm"), UserWarning, stacklevel=4)
        for name in ("reward_norm", "adv_norm"):
            value = getattr(self, name)
            if isinstance(value, Mapping):
                setattr(self, name, _build(f"{p}{name}", NormConfig, value))
            elif value is not None and not isinstance(value, NormConfig):
                raise ConfigError(f"{p}{name}: got {value!r}, expected null or a NormConfig mapping")
            _check_norm_eps(p + name, getattr(self, name))
        _check_number(p + "eps_clip", self.eps_clip, low=0.0, low_open=True)
        for name in ("eps_clip_higher", "behav_imp_weight_cap"):
            if getattr(self, name) is not None:
                _check_number(p + name, getattr(self, name), low=0.0, low_open=True)
        if self.c_clip is not None:
            _check_number(p + "c_clip", self.c_clip, low=1.0, low_open=True)
        _check_int(p + "ppo_n_minibatches", self.ppo_n_minibatches, 1)
        if self.ppo_micro_batch_size is not None and not _is_integer(self.ppo_micro_batch_size, low=1):
            raise ConfigError(
                f"{p}ppo_micro_batch_size: got {self.ppo_micro_batch_size!r}, expected null (the whole "
                "minibatch) or an integer >= 1 (rows per forward on each rank)"
            )
        _check_number(p + "temperature", self.temperature, low=0.0, low_open=True)
        if isinstance(self.advantage, Mapping):
            self.advantage = _build(f"{p}advantage", AdvantageConfig, self.advantage)
        elif not isinstance(self.advantage, AdvantageConfig):
            raise ConfigError(f"{p}advantage: got {self.advantage!r}, expected an AdvantageConfig mapping")
        else:
            self.advantage.validate()
        self._validate_process_requirements()

    def _validate_process_requirements(self) -> None:
        """gvpo / process_weighted only make sense on direct token advantages."""
        spec = self.advantage.process_adv_shaping
        if spec is None or spec.implementation not in ("gvpo", "process_weighted"):
            return
        where = "actor.advantage.process_adv_shaping"
        if not self.token_rewards_as_adv:
            raise ConfigError(f"{where}: {spec.implementation!r} requires actor.token_rewards_as_adv=true (got false)")
        if spec.implementation == "process_weighted" and self.mask_no_eos_with_zero:
            raise ConfigError(f"{where}: 'process_weighted' requires actor.mask_no_eos_with_zero=false (got true)")
