"""Experiment-level configuration: the actor plus the trainer sections around it.

`ExperimentConfig` is the schema that `areal.api.cli_args.load_config` fills from
YAML and dotted overrides. Every section is a plain dataclass that OmegaConf can
type-check and that validates itself in `__post_init__`, naming the offending
field, so a bad config fails at load time rather than minutes into a run.

This module stays import-light (no torch / transformers) so that loading and
validating a config is fast and never imports user code.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from areal.api.cli_args import ConfigError, PPOActorConfig

_ARCHS = ("llama", "qwen2")
_ATTN = ("eager", "sdpa")
_DTYPES = ("float32", "bfloat16", "float64")
_PRM_MODES = ("additive", "gvpo", "process_weighted")
_EXPORTS = ("episode", "per_turn")


def _check_int(name: str, value: Any, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ConfigError(f"{name}: got {value!r}, expected an integer >= {low}")


def _check_float(name: str, value: Any, low: float, *, open_low: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        raise ConfigError(f"{name}: got {value!r}, expected a number")
    if value < low or (open_low and value == low):
        bound = f"> {low}" if open_low else f">= {low}"
        raise ConfigError(f"{name}: got {value!r}, expected a number {bound}")


def _check_bool(name: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise ConfigError(f"{name}: got {value!r}, expected true or false")


def _check_choice(name: str, value: Any, choices: tuple) -> None:
    if value not in choices:
        raise ConfigError(f"{name}: got {value!r}, expected one of {list(choices)}")


@dataclass
class ModelConfig:
    """The policy: a local Hugging Face checkpoint, or (path null) a tiny random model.

    The tiny architecture fields only apply to random init; a checkpoint brings its
    own architecture. Hub ids are refused on purpose: runs must never download.
    """

    path: str | None = None
    arch: str = "llama"
    hidden_size: int = 64
    num_layers: int = 2
    num_heads: int = 4
    intermediate_size: int = 128
    max_position_embeddings: int = 128
    attn_implementation: str = "eager"
    dtype: str = "float32"

    def __post_init__(self) -> None:
        if self.path is not None:
            if not isinstance(self.path, str) or not self.path:
                raise ConfigError(f"model.path: got {self.path!r}, expected a directory path or null")
            if not os.path.isdir(self.path) or not os.path.isfile(os.path.join(self.path, "config.json")):
                raise ConfigError(
                    f"model.path: {self.path!r} is not a local Hugging Face checkpoint directory "
                    "(no config.json there); use null for a tiny randomly initialised model"
                )
        _check_choice("model.arch", self.arch, _ARCHS)
        _check_choice("model.attn_implementation", self.attn_implementation, _ATTN)
        _check_choice("model.dtype", self.dtype, _DTYPES)
        for name in ("hidden_size", "num_layers", "num_heads", "intermediate_size", "max_position_embeddings"):
            _check_int(f"model.{name}", getattr(self, name), 1)
        if self.hidden_size % self.num_heads:
            raise ConfigError(
                f"model.hidden_size: got {self.hidden_size}, expected a multiple of model.num_heads={self.num_heads}"
            )


@dataclass
class CriticConfig:
    """The value model for PPO: same backbone family as the policy plus a scalar head.

    `enabled: false` is GRPO-style training (no values; advantages come from rewards).
    """

    enabled: bool = False
    lr: float = 1e-3
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    value_eps_clip: float = 0.2
    ppo_n_minibatches: int | None = None

    def __post_init__(self) -> None:
        _check_bool("critic.enabled", self.enabled)
        _check_float("critic.lr", self.lr, 0.0, open_low=True)
        _check_float("critic.weight_decay", self.weight_decay, 0.0)
        _check_float("critic.grad_clip", self.grad_clip, 0.0, open_low=True)
        _check_float("critic.value_eps_clip", self.value_eps_clip, 0.0, open_low=True)
        if self.ppo_n_minibatches is not None:
            _check_int("critic.ppo_n_minibatches", self.ppo_n_minibatches, 1)


@dataclass
class TaskConfig:
    """Which synthetic environment to train on and its parameters (`task.kwargs`)."""

    name: str = "arith"
    kwargs: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        from areal.trainer.tasks.specs import build_task_spec

        if self.kwargs is None:
            self.kwargs = {}
        build_task_spec(self.name, self.kwargs)  # raises ConfigError naming task.name / task.kwargs.*


@dataclass
class AdvantageShapingConfig:
    """Legacy PRM shaping parameters, passed to `compute_advantages` at call time."""

    mode: str = "additive"
    negative_scale: float = 0.2
    zero_penalty: float = 0.4
    zero_eps: float = 1e-6

    def __post_init__(self) -> None:
        _check_choice("rollout.prm.advantage_shaping.mode", self.mode, _PRM_MODES)
        for name in ("negative_scale", "zero_penalty", "zero_eps"):
            _check_float(f"rollout.prm.advantage_shaping.{name}", getattr(self, name), 0.0)


@dataclass
class PRMConfig:
    """Legacy process-reward section: turns the task's process scorer on."""

    enabled: bool = False
    advantage_shaping: AdvantageShapingConfig = field(default_factory=AdvantageShapingConfig)

    def __post_init__(self) -> None:
        _check_bool("rollout.prm.enabled", self.enabled)


@dataclass
class RolloutConfig:
    """How trajectories are sampled and exported each step.

    `batch_size` prompts per step, `n_samples` episodes per prompt (the group).
    `max_new_tokens` / `temperature` null take the actor's values; an explicit
    temperature must equal the actor's because behaviour log-probs and the PPO loss
    must be computed at the sampling temperature. `export: per_turn` writes one
    tensor row per generated turn with `RolloutGroup` metadata (split rollouts).
    `greedy_baseline` also runs one greedy episode per prompt and ships its reward
    as `reward_baselines` (one per row), the baseline ReMax subtracts.
    """

    batch_size: int = 16
    n_samples: int = 8
    max_new_tokens: int | None = None
    temperature: float | None = None
    export: str = "episode"
    explicit_rollout_rewards: bool = False
    greedy_baseline: bool = False
    prm: PRMConfig = field(default_factory=PRMConfig)

    def __post_init__(self) -> None:
        _check_int("rollout.batch_size", self.batch_size, 1)
        _check_int("rollout.n_samples", self.n_samples, 1)
        if self.max_new_tokens is not None:
            _check_int("rollout.max_new_tokens", self.max_new_tokens, 1)
        if self.temperature is not None:
            _check_float("rollout.temperature", self.temperature, 0.0, open_low=True)
        _check_choice("rollout.export", self.export, _EXPORTS)
        _check_bool("rollout.explicit_rollout_rewards", self.explicit_rollout_rewards)
        _check_bool("rollout.greedy_baseline", self.greedy_baseline)
        if self.explicit_rollout_rewards and self.export != "per_turn":
            raise ConfigError(
                "rollout.explicit_rollout_rewards: only meaningful with rollout.export=per_turn "
                f"(got export={self.export!r})"
            )


@dataclass
class TrainConfig:
    """Optimisation schedule of the policy, checkpoints and resume. Minibatches and KL live in `actor`.

    `num_threads` is per process (per rank under torchrun); null = the CPU cores
    this process may use divided by the ranks on this machine (torchrun's
    LOCAL_WORLD_SIZE), so ranks never oversubscribe the cores. `log_every`: the
    progress bar's postfix refresh, or (when stderr is not a terminal) one
    progress line every N steps. `dist_timeout_s`
    bounds every collective of a data-parallel run, so a dead rank makes the
    others fail instead of waiting (null: torch's default, 30 min for gloo).
    `debug_param_checksum` makes rank 0 write `param_checksums.jsonl`: after
    every step, one checksum per rank of the policy (critic, reference), to
    check that the replicas stay identical.

    Checkpoints: `save_every` N writes `<run_dir>/checkpoints/step_<N>/` every N
    steps and after the last step (0 = never); `keep_last` K keeps the newest K
    (null = all). `resume`: null starts a new run; `auto` continues from the
    newest complete checkpoint of the run directory (or starts a new run when
    there is none); a path continues from that checkpoint folder.
    """

    steps: int = 500
    lr: float = 5e-4
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    num_threads: int | None = None
    log_every: int = 10
    dist_timeout_s: float | None = None
    debug_param_checksum: bool = False
    save_every: int = 100
    keep_last: int | None = 3
    resume: str | None = None

    def __post_init__(self) -> None:
        _check_int("train.steps", self.steps, 1)
        _check_float("train.lr", self.lr, 0.0, open_low=True)
        _check_float("train.weight_decay", self.weight_decay, 0.0)
        _check_float("train.grad_clip", self.grad_clip, 0.0, open_low=True)
        if self.num_threads is not None:
            _check_int("train.num_threads", self.num_threads, 1)
        _check_int("train.log_every", self.log_every, 1)
        if self.dist_timeout_s is not None:
            _check_float("train.dist_timeout_s", self.dist_timeout_s, 0.0, open_low=True)
        _check_bool("train.debug_param_checksum", self.debug_param_checksum)
        _check_int("train.save_every", self.save_every, 0)
        if self.keep_last is not None:
            _check_int("train.keep_last", self.keep_last, 1)
        self._check_resume()

    def _check_resume(self) -> None:
        """`auto`, null, or an existing checkpoint folder (one with a manifest)."""
        value = self.resume
        if value is None or value == "auto":
            return
        if not isinstance(value, str) or not value:
            raise ConfigError(f"train.resume: got {value!r}, expected auto, null or a checkpoint folder")
        from areal.trainer.checkpoint import MANIFEST

        if not os.path.isdir(value):
            raise ConfigError(f"train.resume: {value!r} is not a directory; expected auto, null or a checkpoint "
                              "folder such as runs/<experiment>/<trial>/checkpoints/step_100")
        if not os.path.isfile(os.path.join(value, MANIFEST)):
            raise ConfigError(f"train.resume: {value!r} has no {MANIFEST}, so it is not a complete checkpoint "
                              "(a save that was interrupted never gets one); pick a checkpoints/step_<N> folder")


_LOGGERS = ("jsonl", "tensorboard", "wandb")
_WANDB_MODES = ("offline", "online")


@dataclass
class OutputConfig:
    """Where and how a run reports: the run directory `<dir>/<experiment_name>/<trial_name>/`.

    A run refuses to start where a run already is unless `train.resume` is set
    or `overwrite` is true (which deletes that run directory first).
    `loggers`: any of `jsonl` (metrics.jsonl), `tensorboard` (event files in
    `tensorboard/`, via torch.utils.tensorboard) and `wandb` (Weights & Biases,
    `pip install 'areal[wandb]'`; in `wandb_mode` offline by default, files in
    `wandb/`, project `wandb_project` or `areal`). Only rank 0 logs.
    `plot_smoothing` is the EMA weight of the smoothed curves in curves.png
    (0 = raw only). `save_checkpoint` is the retired end-of-run checkpoint
    switch: periodic checkpoints are `train.save_every`.
    """

    dir: str = "runs"
    plot: bool = True
    progress_bar: bool = True
    overwrite: bool = False
    loggers: list[str] = field(default_factory=lambda: ["jsonl", "tensorboard"])
    wandb_project: str | None = None
    wandb_mode: str = "offline"
    plot_smoothing: float = 0.9
    save_checkpoint: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.dir, str) or not self.dir:
            raise ConfigError(f"output.dir: got {self.dir!r}, expected a non-empty path")
        for name in ("plot", "progress_bar", "overwrite", "save_checkpoint"):
            _check_bool(f"output.{name}", getattr(self, name))
        if self.save_checkpoint:
            raise ConfigError("output.save_checkpoint: retired; checkpoints are written every train.save_every steps "
                              "and after the last step to <run_dir>/checkpoints/step_<N>/ (policy/ is loadable with "
                              "model.path=); remove the key")
        self._check_loggers()
        _check_choice("output.wandb_mode", self.wandb_mode, _WANDB_MODES)
        if self.wandb_project is not None and (not isinstance(self.wandb_project, str) or not self.wandb_project):
            raise ConfigError(f"output.wandb_project: got {self.wandb_project!r}, expected a name or null")
        _check_float("output.plot_smoothing", self.plot_smoothing, 0.0)
        if self.plot_smoothing >= 1.0:
            raise ConfigError(f"output.plot_smoothing: got {self.plot_smoothing!r}, expected a number in [0, 1)")

    def _check_loggers(self) -> None:
        loggers = list(self.loggers) if self.loggers is not None else []
        for i, name in enumerate(loggers):
            _check_choice(f"output.loggers[{i}]", name, _LOGGERS)
        if len(set(loggers)) != len(loggers):
            raise ConfigError(f"output.loggers: got {loggers}, expected each logger at most once")
        if "wandb" in loggers:
            import importlib.util

            if importlib.util.find_spec("wandb") is None:
                raise ConfigError("output.loggers: 'wandb' needs the wandb package, which is not installed; "
                                  "pip install 'areal[wandb]' (or drop wandb from output.loggers)")
        self.loggers = loggers


@dataclass
class ExperimentConfig:
    """A whole experiment: the `actor:` section and the trainer around it.

    A run writes into `<output.dir>/<experiment_name>/<trial_name>/` (as in
    AReaL: one experiment, several trials, e.g. seeds or ablations).
    """

    experiment_name: str = "default"
    trial_name: str = "trial0"
    seed: int = 1
    actor: PPOActorConfig = field(default_factory=PPOActorConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    critic: CriticConfig = field(default_factory=CriticConfig)
    task: TaskConfig = field(default_factory=TaskConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    output: OutputConfig = field(default_factory=OutputConfig)

    def __post_init__(self) -> None:
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise ConfigError(f"seed: got {self.seed!r}, expected an integer")
        for key in ("experiment_name", "trial_name"):
            name = getattr(self, key)
            if not isinstance(name, str) or not name or os.sep in name or name in (".", ".."):
                raise ConfigError(f"{key}: got {name!r}, expected a non-empty name without '{os.sep}'")
        self._check_cross_sections()

    def _check_cross_sections(self) -> None:
        """Constraints that span sections (each section validated itself already)."""
        rollout, actor = self.rollout, self.actor
        if rollout.temperature is not None and rollout.temperature != actor.temperature:
            raise ConfigError(
                f"rollout.temperature: got {rollout.temperature}, but actor.temperature is {actor.temperature}; "
                "the PPO loss must use the sampling temperature, so set actor.temperature (or both equally)"
            )
        if rollout.max_new_tokens is not None and rollout.max_new_tokens > actor.max_new_tokens:
            raise ConfigError(
                f"rollout.max_new_tokens: got {rollout.max_new_tokens}, expected <= actor.max_new_tokens="
                f"{actor.max_new_tokens} (the actor's length penalty assumes that budget)"
            )
        if self.critic.enabled and self.critic.ppo_n_minibatches is None:
            self.critic.ppo_n_minibatches = actor.ppo_n_minibatches
        if rollout.prm.enabled:
            from areal.trainer.tasks.specs import task_has_process_scorer

            if not task_has_process_scorer(self.task.name):
                raise ConfigError(
                    f"rollout.prm.enabled: task {self.task.name!r} has no process-reward scorer "
                    "(the guess task has one)"
                )

    @property
    def sampling_temperature(self) -> float:
        return self.actor.temperature

    @property
    def generation_budget(self) -> int:
        """Generated tokens allowed per episode (all turns together)."""
        return self.rollout.max_new_tokens if self.rollout.max_new_tokens is not None else self.actor.max_new_tokens
