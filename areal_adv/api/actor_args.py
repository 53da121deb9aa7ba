"""Configuration dataclasses of the PPO actor and its advantage pipeline.

Configs hold only plain values, built-in names and import paths, so that they
serialise to YAML/JSON unchanged and can be shipped to remote workers. Every
dataclass validates itself on construction and names the offending field.
`areal_adv.api.cli_args` re-exports everything here (AReaL's import path).
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from areal_adv.api.builtin_stages import BUILTIN_STAGE_IMPLEMENTATIONS
from areal_adv.api.config_checks import ConfigError
from areal_adv.api.config_checks import check_bool as _check_bool
from areal_adv.api.config_checks import check_choice as _check_choice
from areal_adv.api.config_checks import check_int as _check_int
from areal_adv.api.config_checks import check_json_value as _check_json_value
from areal_adv.api.config_checks import check_number as _check_number
from areal_adv.api.config_checks import is_import_path as _is_import_path
from areal_adv.api.config_checks import is_integer as _is_integer
from areal_adv.api.config_values import plain
from areal_adv.utils.suggest import did_you_mean

_NORM_LEVELS = ("batch", "group", "running", None)


@dataclass
class NormConfig:
    """How rewards or advantages are normalised: x̂ = (x − mean) / (std + eps) (AReaL's `NormConfig`).

    Group boundaries come from the batch metadata (`TrajBatchMeta`); the fixed
    `group_size` is only a fallback when a batch carries no metadata.
    """

    mean_level: str | None = field(
        default="batch",
        metadata={
            "help": "Where the subtracted mean is taken: `batch` (default), `group` (each prompt's group of "
            "rollouts, from the batch metadata; GRPO, group relative policy optimisation, arXiv:2402.03300), "
            "`running` (cumulative over the run, as ROLL's `norm_mean_type: running`) or null (no centring)."
        },
    )
    std_level: str | None = field(
        default="batch",
        metadata={
            "help": "Where the std divided by is taken: `batch` (default), `group`, `running` or null (no "
            "scaling). GRPO uses `group`; Dr. GRPO (arXiv:2503.20783) recommends null, since dividing by a "
            "group's std favours groups of near-equal rewards."
        },
    )
    mean_leave1out: bool = field(
        default=False,
        metadata={
            "help": "Leave-one-out mean: each sample is centred on the mean of the other samples of its group "
            "(or batch), the baseline mean_{j≠i} r_j of RLOO, REINFORCE leave-one-out (arXiv:2402.14740). "
            "False (default) subtracts the plain mean, which includes the sample itself. Not allowed with "
            "`mean_level: running`."
        },
    )
    std_unbiased: bool = field(
        default=True,
        metadata={
            "help": "Divide the variance by n − 1 (true, default; as torch.std and GRPO) or by n (false, "
            "as OpenRLHF's REINFORCE++ whitening). A group of one sample uses std 1 when true."
        },
    )
    eps: float = field(
        default=1e-5,
        metadata={
            "help": "Added to the std before dividing, (x − mean) / (std + eps); must be > 0 when `std_level` "
            "is set, so a group of equal values gives 0 instead of 0/0. Default 1e-5; GRPO presets use 1e-6."
        },
    )
    group_size: int | None = field(
        default=None,
        metadata={
            "help": "Fixed group size, used only when a batch carries no group metadata (`TrajBatchMeta`): "
            "set it to the rollouts per prompt. Default null (such a batch is cut into groups of one, as "
            "AReaL's default 1); choosing 1 with `mean_level: group` warns, since groups of one centre every "
            "score to 0."
        },
    )

    @property
    def fallback_group_size(self) -> int:
        """The group size for a batch without metadata: the chosen one, else 1 (AReaL's default)."""
        return 1 if self.group_size is None else self.group_size

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
        if self.group_size is not None:
            _check_int("NormConfig.group_size", self.group_size, 1)


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
    return isinstance(norm, NormConfig) and norm.mean_level == "group" and norm.group_size == 1


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

    implementation: str = field(
        default="auto",
        metadata={
            "help": "A built-in name of the stage (docs: *Custom advantage computation*, *Stage functions*; "
            "docs/algorithms.md for the peer algorithms) or a dotted import path `pkg.module.function`. "
            "`auto` (default) selects the stage's default. Paths are imported by each actor worker, never "
            "when the config is loaded."
        },
    )
    kwargs: dict[str, Any] = field(
        default_factory=dict,
        metadata={
            "help": "JSON-serialisable keyword arguments passed to the stage function on every call. Default {}."
        },
    )

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

    compute: StageSpec = field(
        default_factory=lambda: StageSpec("default"),
        metadata={
            "help": "The whole computation: `default` runs the built-in pipeline with the three stages "
            "below; a dotted import path replaces the whole computation and excludes the stage settings "
            "(docs: *Custom advantage computation*, *Replacing the whole computation*)."
        },
    )
    outcome_reward_shaping: StageSpec | None = field(
        default=None,
        metadata={
            "help": "Stage 2: one reward per row from the task reward, e.g. `identity`, `opo`, `gpg`, "
            "`passk`, `remax`, `maxrl`, `gdpo`, `krpo`, `spo`, `rae` or a dotted path. Null (default) keeps "
            "the reward as it is (`identity`)."
        },
    )
    estimator: StageSpec | None = field(
        default=None,
        metadata={
            "help": "Stage 5: advantages and returns from the rewards and values, e.g. `token_gae`, "
            "`turn_gae`, `reinforce_return`, `gigpo`, `mt_grpo`, `combine` or a dotted path. Null (default) "
            "follows `actor.gae_timestep_unit`: token or turn GAE."
        },
    )
    process_adv_shaping: StageSpec | None = field(
        default=None,
        metadata={
            "help": "Stage 7: process rewards folded into the advantages: `additive`, `gvpo`, "
            "`process_weighted`, `entropy_advantage` or a dotted path. Null (default) takes the mode in "
            "`rollout.prm.advantage_shaping.mode` when the trainer passes one, else `additive`."
        },
    )

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
    reward_bias: float = field(
        default=0.0,
        metadata={
            "help": "Added to each outcome reward before scaling: clip((r + bias) * scaling, ±clip). Default 0.0."
        },
    )
    reward_scaling: float = field(
        default=1.0, metadata={"help": "Multiplies the biased outcome reward, r + reward_bias. Default 1.0."}
    )
    reward_clip: float = field(
        default=20.0,
        metadata={"help": "Clips the scaled outcome reward to ±reward_clip; > 0, `.inf` turns it off. Default 20.0."},
    )
    reward_norm: NormConfig | None = field(
        default=None,
        metadata={
            "help": "Normalisation of the scaled outcome rewards (the `actor.reward_norm` section). Null "
            "(default) leaves them as they are; GRPO sets `{mean_level: group, std_level: group}`."
        },
    )
    overlong_reward_penalty: bool = field(
        default=False,
        metadata={
            "help": "DAPO's soft overlong penalty (arXiv:2503.14476): a response longer than max_new_tokens − "
            "overlong_tokens loses reward linearly in the excess, up to overlong_penalty_factor at the full "
            "budget. False (default) applies none."
        },
    )
    overlong_tokens: int | None = field(
        default=None,
        metadata={
            "help": "Width of the penalty window at the end of the budget, an integer in [1, max_new_tokens]; "
            "required when `overlong_reward_penalty` is true. Null (default) otherwise."
        },
    )
    overlong_penalty_factor: float | None = field(
        default=None,
        metadata={
            "help": "Reward lost by a response that uses the whole budget (>= 0); required when "
            "`overlong_reward_penalty` is true. Null (default) otherwise."
        },
    )
    max_new_tokens: int = field(
        default=1024,
        metadata={
            "help": "Generated-token budget per episode: the length the overlong penalty measures against and "
            "the default of `rollout.max_new_tokens`. Default 1024."
        },
    )
    mask_no_eos_with_zero: bool = field(
        default=False,
        metadata={
            "help": "Zero the outcome score and process rewards of truncated responses (cut by the budget, no "
            "end-of-sequence token), so they are not rewarded for an unfinished answer. False (default) "
            "keeps their rewards."
        },
    )
    # KL to the reference policy
    kl_ctl: float = field(
        default=0.1,
        metadata={
            "help": "Coefficient β >= 0 of the KL (Kullback-Leibler) penalty −β·KL(π_old ‖ π_ref) added to "
            "every generated token's reward; 0 turns it off (GRPO presets). Default 0.1."
        },
    )
    kl_estimator: str = field(
        default="k1",
        metadata={
            "help": "Per-token KL estimator of the log-ratio r = log π_old − log π_ref: `k1` (default) r, `k2` "
            "r²/2 or `k3` exp(−r) + r − 1 (Schulman, http://joschu.net/blog/kl-approx.html)."
        },
    )
    # Temporal credit assignment
    discount: float = field(
        default=1.0,
        metadata={
            "help": "Discount γ in [0, 1] of the returns and of GAE. Default 1.0: no discounting, as is usual "
            "for LLM episodes."
        },
    )
    gae_lambda: float | str = field(
        default=1.0,
        metadata={
            "help": "λ of GAE (generalized advantage estimation, arXiv:1506.02438) in [0, 1], or a "
            "lambda-function name (`constant`, `vapo`, `relative_position`) or import path giving one λ per "
            "row. 1.0 (default) gives Monte-Carlo returns minus the value; the PPO preset uses 0.95."
        },
    )
    gae_lambda_kwargs: dict[str, Any] = field(
        default_factory=dict,
        metadata={
            "help": "Keyword arguments of the lambda function named by `gae_lambda`, e.g. `{alpha: 0.05}` for "
            "`vapo` (VAPO, arXiv:2504.05118); must be empty when `gae_lambda` is a number. Default {}."
        },
    )
    gae_timestep_unit: str = field(
        default="token",
        metadata={
            "help": "Time step of the default estimator: `token` (default; token GAE) or `turn` (turn GAE over "
            "the generated turns; needs `turn_ids`). An explicit `advantage.estimator` overrides it."
        },
    )
    # Advantage post-processing
    adv_norm: NormConfig | None = field(
        default=None,
        metadata={
            "help": "Normalisation of the advantages after the estimator (the `actor.adv_norm` section). "
            "Null (default) leaves them; PPO and REINFORCE++ whiten over the batch."
        },
    )
    token_rewards_as_adv: bool = field(
        default=True,
        metadata={
            "help": "True (default): process rewards (`token_rewards`) are direct token advantages, shaped in "
            "by `process_adv_shaping` after `adv_norm`. False: they are rewards at each turn's end that enter "
            "the estimator. `gvpo` and `process_weighted` need true."
        },
    )
    # Log-probabilities
    use_decoupled_loss: bool = field(
        default=False,
        metadata={
            "help": "Decoupled PPO loss of asynchronous AReaL: the ratio is taken against the proximal policy "
            "(`prox_logp`) and each token is weighted by exp(prox_logp − logprobs), the behaviour importance "
            "weight. False (default): the ratio is against the behaviour log-probs."
        },
    )
    recompute_logprob: bool = field(
        default=False,
        metadata={
            "help": "Use `prox_logp`, the log-probs recomputed by the policy before the update, as the old "
            "log-probs instead of the sampler's `logprobs`. False (default) trusts the sampler."
        },
    )
    # PPO update
    eps_clip: float = field(
        default=0.2,
        metadata={
            "help": "PPO clip range ε > 0: the probability ratio is clipped to [1 − ε, 1 + ε] "
            "(arXiv:1707.06347). Default 0.2."
        },
    )
    eps_clip_higher: float | None = field(
        default=None,
        metadata={
            "help": "Upper clip range: the ratio is clipped to [1 − eps_clip, 1 + eps_clip_higher] (DAPO's "
            "clip-higher, arXiv:2503.14476, recommends 0.28). Null (default) uses eps_clip on both sides."
        },
    )
    c_clip: float | None = field(
        default=None,
        metadata={
            "help": "Dual-clip constant c > 1: the loss of a negative-advantage token is capped at −c·A "
            "(dual-clip PPO, arXiv:1912.09729). Null (default) turns it off."
        },
    )
    behav_imp_weight_cap: float | None = field(
        default=None,
        metadata={
            "help": "With `use_decoupled_loss`, tokens whose behaviour importance weight exceeds this cap are "
            "dropped from the loss. Null (default) keeps every token."
        },
    )
    ppo_n_minibatches: int = field(
        default=1,
        metadata={
            "help": "Optimiser steps per PPO update: the step's batch is split into this many minibatches. "
            "Default 1, a single on-policy step (what OPO and GPG assume)."
        },
    )
    ppo_micro_batch_size: int | None = field(
        default=None,
        metadata={
            "help": "Rows per forward/backward on each rank (verl's `ppo_micro_batch_size_per_gpu`): gradients "
            "accumulate over the micro-batches into one optimiser step per minibatch, equal to the one-pass "
            "gradient, and the log-prob and reference passes are chunked alike. Bounds activation memory. "
            "Null (default): a whole minibatch at once."
        },
    )
    temperature: float = field(
        default=1.0,
        metadata={
            "help": "Sampling temperature (> 0); the log-prob passes and the PPO loss divide the logits by it "
            "too, so they see the sampling distribution. Default 1.0."
        },
    )
    # Pluggable advantage computation
    advantage: AdvantageConfig = field(
        default_factory=AdvantageConfig,
        metadata={"help": "The pluggable advantage computation (the `actor.advantage` section)."},
    )

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
