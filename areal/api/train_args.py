"""Experiment-level configuration: the actor plus the trainer sections around it.

`ExperimentConfig` is the schema that `areal.api.cli_args.load_config` fills from
YAML and dotted overrides. Every section is a plain dataclass that OmegaConf can
type-check and that validates itself in `__post_init__`, naming the offending
field, so a bad config fails at load time rather than minutes into a run.

This module stays import-light (no torch / transformers) so that loading and
validating a config is fast and never imports user code.
"""

from __future__ import annotations

import math
import os
import warnings
from dataclasses import dataclass, field
from typing import Any

from areal.api.actor_args import AdvantageShaping, PPOActorConfig
from areal.api.config_checks import (
    ConfigError,
    check_bool,
    check_int,
    check_kwargs,
    check_number,
    is_import_path,
    is_integer,
    is_number,
)
from areal.api.task_specs import BUILTIN_TASKS, task_has_process_scorer, validate_task

_ARCHS = ("llama", "qwen2")
_ATTN = ("eager", "sdpa")
_DTYPES = ("float32", "bfloat16", "float64")
_EXPORTS = ("episode", "per_turn")
_PARALLEL = ("ddp", "fsdp")
_DATA_SUFFIXES = (".jsonl", ".json", ".parquet", ".csv")


def _check_float(name: str, value: Any, low: float, *, open_low: bool = False) -> None:
    if not is_number(value, allow_inf=True):
        raise ConfigError(f"{name}: got {value!r}, expected a number")
    if math.isinf(value):  # an infinite learning rate, clip or timeout is never meant
        raise ConfigError(f"{name}: got {value!r}, expected a finite number")
    if value < low or (open_low and value == low):
        bound = f"> {low}" if open_low else f">= {low}"
        raise ConfigError(f"{name}: got {value!r}, expected a number {bound}")


def _check_bool(name: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise ConfigError(f"{name}: got {value!r}, expected true or false")


def _check_choice(name: str, value: Any, choices: tuple) -> None:
    if value not in choices:
        raise ConfigError(f"{name}: got {value!r}, expected one of {list(choices)}")


#: Architecture of the tiny random-init policy; each applies only while `model.path` is null.
TINY_ARCHITECTURE: dict[str, Any] = {
    "arch": "llama",
    "hidden_size": 64,
    "num_layers": 2,
    "num_heads": 4,
    "intermediate_size": 128,
    "max_position_embeddings": 128,
}
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


_MIXED_PRECISION = (None, "bf16")


@dataclass
class LoraConfig:
    """LoRA adapters (through `peft`): only the adapters train; the base weights stay frozen.

    `r`: adapter rank; `alpha`: scale numerator (the update is alpha / r x B A);
    `dropout`: on the adapter's input; `target_modules`: module names to adapt
    (peft's `target_modules`; null: peft's default for the architecture).
    """

    r: int = 8
    alpha: float = 16.0
    dropout: float = 0.0
    target_modules: list[str] | None = None

    def __post_init__(self) -> None:
        check_int("model.lora.r", self.r, 1)
        check_number("model.lora.alpha", self.alpha, low=0.0, low_open=True)
        check_number("model.lora.dropout", self.dropout, low=0.0, high=1.0)
        if self.target_modules is not None and (
            isinstance(self.target_modules, str) or not all(isinstance(m, str) and m for m in self.target_modules)
        ):
            raise ConfigError(
                f"model.lora.target_modules: got {self.target_modules!r}, expected null or a list of "
                "module names such as [q_proj, v_proj]"
            )
        if self.target_modules is not None:
            self.target_modules = list(self.target_modules)


@dataclass
class ModelConfig:
    """The policy: a local Hugging Face checkpoint, or (path null) a tiny random model.

    `path` is a local checkpoint directory (a `save_pretrained` folder with its
    tokenizer, or a folder holding the GGUF file named by `gguf_file`; a GGUF
    file path alone also works). The checkpoint brings its own architecture and
    tokenizer, so the architecture fields (`arch`, `hidden_size`, `num_layers`,
    `num_heads`, `intermediate_size`, `max_position_embeddings`) are errors next
    to it; with `path: null` they size the tiny model (null: the defaults in
    `TINY_ARCHITECTURE`; `architecture()` gives the values in force) and the
    task's word vocabulary is its tokenizer. Hub ids are refused on purpose: runs never download.
    """

    path: str | None = None
    gguf_file: str | None = None
    arch: str | None = None
    hidden_size: int | None = None
    num_layers: int | None = None
    num_heads: int | None = None
    intermediate_size: int | None = None
    max_position_embeddings: int | None = None
    attn_implementation: str = "eager"
    dtype: str = "float32"
    # bf16: forward and backward under torch.autocast (bfloat16 matmuls), weights and AdamW state stay `dtype`
    mixed_precision: str | None = None
    lora: LoraConfig | None = None

    def __post_init__(self) -> None:
        _check_choice("model.attn_implementation", self.attn_implementation, _ATTN)
        _check_choice("model.dtype", self.dtype, _DTYPES)
        _check_choice("model.mixed_precision", self.mixed_precision, _MIXED_PRECISION)
        if isinstance(self.lora, dict):
            self.lora = LoraConfig(**self.lora)
        elif self.lora is not None and not isinstance(self.lora, LoraConfig):
            raise ConfigError(
                f"model.lora: got {self.lora!r}, expected null or a mapping {{r, alpha, dropout, target_modules}}"
            )
        if self.gguf_file is not None and self.path is None:
            self._split_gguf_path()
        if self.path is None:
            self._check_tiny_architecture()
        else:
            self._check_checkpoint()

    def architecture(self) -> dict[str, Any]:
        """The random-init architecture: each field, or its default when null."""
        return {
            name: default if getattr(self, name) is None else getattr(self, name)
            for name, default in TINY_ARCHITECTURE.items()
        }

    def _split_gguf_path(self) -> None:
        """`gguf_file: /dir/model.gguf` alone means `path: /dir`, `gguf_file: model.gguf`."""
        if not isinstance(self.gguf_file, str) or not os.path.isfile(self.gguf_file):
            raise ConfigError(
                f"model.gguf_file: got {self.gguf_file!r}, expected a GGUF file (or a file name inside model.path)"
            )
        self.path, self.gguf_file = os.path.split(os.path.abspath(self.gguf_file))

    def _check_tiny_architecture(self) -> None:
        arch = self.architecture()
        _check_choice("model.arch", arch["arch"], _ARCHS)
        for name in ("hidden_size", "num_layers", "num_heads", "intermediate_size", "max_position_embeddings"):
            check_int(f"model.{name}", arch[name], 1)
        if arch["hidden_size"] % arch["num_heads"]:
            raise ConfigError(
                f"model.hidden_size: got {arch['hidden_size']}, expected a multiple of "
                f"model.num_heads={arch['num_heads']}"
            )

    def _check_checkpoint(self) -> None:
        if not isinstance(self.path, str) or not self.path:
            raise ConfigError(f"model.path: got {self.path!r}, expected a directory path or null")
        given = [f"model.{name}" for name in TINY_ARCHITECTURE if getattr(self, name) is not None]
        if given:
            raise ConfigError(
                f"{', '.join(given)}: architecture fields size only the random-init model (model.path null); "
                f"the checkpoint at model.path={self.path!r} brings its own architecture, so remove them"
            )
        if not os.path.isdir(self.path):
            raise ConfigError(
                f"model.path: {self.path!r} is not a local directory; use null for a tiny randomly "
                "initialised model (hub ids are not downloaded)"
            )
        if self.gguf_file is not None:
            if not isinstance(self.gguf_file, str) or not os.path.isfile(os.path.join(self.path, self.gguf_file)):
                raise ConfigError(f"model.gguf_file: {self.gguf_file!r} is not a file inside model.path={self.path!r}")
            return  # a GGUF file carries architecture, weights and tokenizer
        if not os.path.isfile(os.path.join(self.path, "config.json")):
            raise ConfigError(
                f"model.path: {self.path!r} is not a local Hugging Face checkpoint directory (no config.json "
                "there; for a GGUF file set model.gguf_file); use null for a tiny randomly initialised model"
            )
        if not any(os.path.isfile(os.path.join(self.path, f)) for f in _TOKENIZER_FILES):
            raise ConfigError(
                f"model.path: the checkpoint {self.path!r} has no tokenizer (none of {list(_TOKENIZER_FILES)}); "
                "save it next to the weights with tokenizer.save_pretrained(path)"
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
            check_int("critic.ppo_n_minibatches", self.ppo_n_minibatches, 1)


@dataclass
class TaskConfig:
    """What the policy is trained on: a built-in task or a task plugin.

    `implementation`: `arith`, `guess`, `reasoning_gym`, `dataset` (prompts from
    `data.train`, scored only by `reward:`), or a dotted path to a factory
    `fn(**kwargs) -> task` (see docs/training.md). `name` is an alias of
    `implementation` (the older key). Null: `arith`, or `dataset` when
    `data.train` is set. Built-in kwargs are validated here; a plugin's path is
    checked for shape only and imported on every rank at trainer start-up.
    `reward_weight` weighs the task's own score among the reward components.
    """

    implementation: str | None = None
    name: str | None = None
    kwargs: dict[str, Any] = field(default_factory=dict)
    reward_weight: float = 1.0

    def __post_init__(self) -> None:
        if self.name is not None and self.implementation is not None and self.name != self.implementation:
            raise ConfigError(
                f"task.name: got {self.name!r} but task.implementation is {self.implementation!r}; "
                "task.name is an alias of task.implementation, set only one"
            )
        field_name = "task.implementation" if self.implementation is not None else "task.name"
        if self.implementation is None:
            self.implementation = self.name
        self.kwargs = check_kwargs("task.kwargs", self.kwargs)
        check_number("task.reward_weight", self.reward_weight)
        if self.implementation is not None:
            self.resolve(self.implementation, field_name)

    def resolve(self, implementation: str, field_name: str = "task.implementation") -> None:
        """Fix the implementation (and its `name` alias) and validate its kwargs."""
        validate_task(implementation, self.kwargs, field_name)
        self.implementation = self.name = implementation

    @property
    def is_plugin(self) -> bool:
        return self.implementation not in BUILTIN_TASKS

    @property
    def reward_name(self) -> str:
        """The task's own reward component: `reward/<this>` (the factory's name for a plugin)."""
        return str(self.implementation).rsplit(".", 1)[-1]


@dataclass
class RewardFunctionConfig:
    """One reward function in TRL's convention, with its weight.

    `implementation` is a dotted path to `fn(prompts, completions, **columns) ->
    list[float]` (`columns`: the row's other fields, e.g. `answer`), called with
    `kwargs` bound; the episode reward is the weighted sum of every component.
    `name` (default: the function's name) keys its metric `reward/<name>`.
    """

    implementation: str = ""
    kwargs: dict[str, Any] = field(default_factory=dict)
    weight: float = 1.0
    name: str | None = None

    def validate(self, where: str) -> None:
        if not is_import_path(self.implementation):
            raise ConfigError(
                f"{where}.implementation: got {self.implementation!r}, expected a dotted import path "
                "such as 'my_package.rewards.exact_match'"
            )
        self.kwargs = check_kwargs(f"{where}.kwargs", self.kwargs)
        check_number(f"{where}.weight", self.weight)
        if self.name is None:
            self.name = self.implementation.rsplit(".", 1)[1]
        if not isinstance(self.name, str) or not self.name or "/" in self.name:
            raise ConfigError(f"{where}.name: got {self.name!r}, expected a non-empty name without '/'")


@dataclass
class DataConfig:
    """Prompt datasets read from local files with Hugging Face `datasets`.

    `train` / `eval`: a `.jsonl`/`.json`, `.parquet` or `.csv` file, or a folder
    written by `save_to_disk` (a `DatasetDict` folder uses `train_split` /
    `eval_split`). `prompt_key` is the prompt column (text or chat messages);
    every other column reaches the reward functions. Training rows are drawn in
    epochs, shuffled with the run seed when `shuffle`.
    """

    train: str | None = None
    eval: str | None = None
    prompt_key: str = "prompt"
    train_split: str = "train"
    eval_split: str = "test"
    shuffle: bool = True

    def __post_init__(self) -> None:
        for name in ("train", "eval"):
            path = getattr(self, name)
            if path is None:
                continue
            if not isinstance(path, str) or not os.path.exists(path):
                raise ConfigError(f"data.{name}: {path!r} does not exist (expected a local file or folder)")
            if os.path.isfile(path) and not path.lower().endswith(_DATA_SUFFIXES):
                raise ConfigError(
                    f"data.{name}: {path!r} has an unknown format; expected one of "
                    f"{list(_DATA_SUFFIXES)} or a folder written by Dataset.save_to_disk"
                )
        for name in ("prompt_key", "train_split", "eval_split"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise ConfigError(f"data.{name}: got {getattr(self, name)!r}, expected a non-empty string")
        check_bool("data.shuffle", self.shuffle)


@dataclass
class EvalConfig:
    """Held-out evaluation with greedy decoding, and the per-step sample log.

    Every `every` steps (null: never) the policy decodes `n_prompts` held-out
    prompts greedily (`data.eval`, or fresh problems of a procedural task from
    a separate seed, the same set each time) before that step's update, and
    once more after the last update; `eval/accuracy` is the fraction of
    episodes whose reward is >= `success_threshold`, beside `eval/reward_mean`
    and one `eval/reward/<name>` per component. Every step rank 0 appends
    `samples_per_step` (prompt, completion, reward) rows to `samples.jsonl`.
    """

    every: int | None = None
    n_prompts: int = 32
    success_threshold: float = 1.0
    samples_per_step: int = 4

    def __post_init__(self) -> None:
        if self.every is not None:
            check_int("eval.every", self.every, 1)
        check_int("eval.n_prompts", self.n_prompts, 1)
        check_number("eval.success_threshold", self.success_threshold)
        check_int("eval.samples_per_step", self.samples_per_step, 0)


@dataclass
class AdvantageShapingConfig:
    """Legacy PRM shaping parameters, passed to `compute_advantages` at call time."""

    mode: str = AdvantageShaping.mode
    negative_scale: float = AdvantageShaping.negative_scale
    zero_penalty: float = AdvantageShaping.zero_penalty
    zero_eps: float = AdvantageShaping.zero_eps

    def __post_init__(self) -> None:
        self.shaping().validate("rollout.prm.advantage_shaping.mode", "rollout.prm.advantage_shaping.{name}")

    def shaping(self) -> AdvantageShaping:
        """The frozen call-time object `PPOActor.compute_advantages(shaping=...)` takes."""
        return AdvantageShaping(self.mode, self.negative_scale, self.zero_penalty, self.zero_eps)


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
    `filter_zero_advantage` drops the prompt groups whose advantages are 0 on every
    generated token (e.g. GRPO groups whose samples all got the same reward) before
    the update, which then averages its loss over the kept groups' tokens only; the
    step's `filtered_groups` metric counts them (DAPO's dynamic sampling without
    the re-sampling; see `areal.trainer.run.group_filter`).
    """

    batch_size: int = 16
    n_samples: int = 8
    max_new_tokens: int | None = None
    temperature: float | None = None
    export: str = "episode"
    explicit_rollout_rewards: bool = False
    greedy_baseline: bool = False
    filter_zero_advantage: bool = False
    prm: PRMConfig = field(default_factory=PRMConfig)

    def __post_init__(self) -> None:
        check_int("rollout.batch_size", self.batch_size, 1)
        check_int("rollout.n_samples", self.n_samples, 1)
        if self.max_new_tokens is not None:
            check_int("rollout.max_new_tokens", self.max_new_tokens, 1)
        if self.temperature is not None:
            _check_float("rollout.temperature", self.temperature, 0.0, open_low=True)
        _check_choice("rollout.export", self.export, _EXPORTS)
        _check_bool("rollout.explicit_rollout_rewards", self.explicit_rollout_rewards)
        _check_bool("rollout.greedy_baseline", self.greedy_baseline)
        _check_bool("rollout.filter_zero_advantage", self.filter_zero_advantage)
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
    `parallel` picks torch's data-parallel engine under torchrun: `ddp`
    (DistributedDataParallel, one full replica per rank) or `fsdp` (FSDP2
    `fully_shard`: parameters, gradients and optimiser state sharded over the
    ranks, plus a full copy of the policy for sampling); ignored in a single
    process (see docs/distributed.md). `failure_timeout_s` bounds how long, once
    a rank fails, it waits for the others to learn the cause, and how long a rank
    that learnt of a peer's failure may take to stop before it is ended.

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
    parallel: str = "ddp"
    failure_timeout_s: float = 30.0
    save_every: int = 100
    keep_last: int | None = 3
    resume: str | None = None

    def __post_init__(self) -> None:
        check_int("train.steps", self.steps, 1)
        _check_float("train.lr", self.lr, 0.0, open_low=True)
        _check_float("train.weight_decay", self.weight_decay, 0.0)
        _check_float("train.grad_clip", self.grad_clip, 0.0, open_low=True)
        if self.num_threads is not None:
            check_int("train.num_threads", self.num_threads, 1)
        check_int("train.log_every", self.log_every, 1)
        if self.dist_timeout_s is not None:
            _check_float("train.dist_timeout_s", self.dist_timeout_s, 0.0, open_low=True)
        _check_bool("train.debug_param_checksum", self.debug_param_checksum)
        _check_choice("train.parallel", self.parallel, _PARALLEL)
        _check_float("train.failure_timeout_s", self.failure_timeout_s, 0.0, open_low=True)
        check_int("train.save_every", self.save_every, 0)
        if self.keep_last is not None:
            check_int("train.keep_last", self.keep_last, 1)
        self._check_resume()

    def _check_resume(self) -> None:
        """`auto`, null, or an existing checkpoint folder (one with a manifest)."""
        value = self.resume
        if value is None or value == "auto":
            return
        if not isinstance(value, str) or not value:
            raise ConfigError(f"train.resume: got {value!r}, expected auto, null or a checkpoint folder")
        from areal.utils.checkpoint_folders import MANIFEST

        if not os.path.isdir(value):
            raise ConfigError(
                f"train.resume: {value!r} is not a directory; expected auto, null or a checkpoint "
                "folder such as runs/<experiment>/<trial>/checkpoints/step_100"
            )
        if not os.path.isfile(os.path.join(value, MANIFEST)):
            raise ConfigError(
                f"train.resume: {value!r} has no {MANIFEST}, so it is not a complete checkpoint "
                "(a save that was interrupted never gets one); pick a checkpoints/step_<N> folder"
            )


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
            raise ConfigError(
                "output.save_checkpoint: retired; checkpoints are written every train.save_every steps "
                "and after the last step to <run_dir>/checkpoints/step_<N>/ (policy/ is loadable with "
                "model.path=); remove the key"
            )
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
                raise ConfigError(
                    "output.loggers: 'wandb' needs the wandb package, which is not installed; "
                    "pip install 'areal[wandb]' (or drop wandb from output.loggers)"
                )
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
    data: DataConfig = field(default_factory=DataConfig)
    reward: list[RewardFunctionConfig] = field(default_factory=list)
    eval: EvalConfig = field(default_factory=EvalConfig)

    def __post_init__(self) -> None:
        if not is_integer(self.seed):
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
        norm = actor.reward_norm
        if rollout.n_samples == 1 and norm is not None and norm.mean_level == "group":
            warnings.warn(
                "rollout.n_samples=1 with actor.reward_norm.mean_level='group': every prompt's group has one "
                "rollout, so group centering makes every score (and every GRPO advantage) 0; sample several "
                "rollouts per prompt or use mean_level 'batch'",
                UserWarning,
                stacklevel=2,
            )
        if self.critic.enabled and self.critic.ppo_n_minibatches is None:
            self.critic.ppo_n_minibatches = actor.ppo_n_minibatches
        self._check_task_and_data()
        self._check_rewards()
        if (
            rollout.prm.enabled
            and not self.task.is_plugin
            and not task_has_process_scorer(str(self.task.implementation))
        ):
            raise ConfigError(
                f"rollout.prm.enabled: task {self.task.implementation!r} has no process-reward scorer "
                "(the guess task has one; a task plugin declares has_process_scorer = True)"
            )

    def _check_task_and_data(self) -> None:
        """Where prompts come from: the task's own generator or `data.train` (and `data.eval`)."""
        task, data = self.task, self.data
        if task.implementation is None:
            task.resolve("dataset" if data.train is not None else "arith")
        if task.implementation == "dataset" and data.train is None:
            raise ConfigError("data.train: task 'dataset' takes its prompts from data.train, which is not set")
        if self.eval.every is not None and task.implementation == "dataset" and data.eval is None:
            raise ConfigError(
                "data.eval: eval.every is set but task 'dataset' has no held-out prompts; "
                "set data.eval (a file of held-out rows) or eval.every=null"
            )

    def _check_rewards(self) -> None:
        if not isinstance(self.reward, list):
            raise ConfigError(f"reward: got {self.reward!r}, expected a list of {{implementation, kwargs, weight}}")
        names: dict[str, int] = {}
        for i, spec in enumerate(self.reward):
            spec.validate(f"reward[{i}]")
            name = str(spec.name)  # validate() has set it
            if name in names or name == self.task.reward_name:
                raise ConfigError(
                    f"reward[{i}].name: {name!r} is already used (by "
                    f"{f'reward[{names[name]}]' if name in names else 'the task'}); give each "
                    "reward component its own name"
                )
            names[name] = i

    @property
    def sampling_temperature(self) -> float:
        return self.actor.temperature

    @property
    def generation_budget(self) -> int:
        """Generated tokens allowed per episode (all turns together)."""
        return self.rollout.max_new_tokens if self.rollout.max_new_tokens is not None else self.actor.max_new_tokens
