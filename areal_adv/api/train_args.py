"""Experiment-level configuration: the actor plus the trainer sections around it.

`ExperimentConfig` is the schema that `areal_adv.api.cli_args.load_config` fills from
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

from areal_adv.api.actor_args import AdvantageShaping, PPOActorConfig
from areal_adv.api.config_checks import (
    ConfigError,
    check_bool,
    check_int,
    check_kwargs,
    check_number,
    is_import_path,
    is_integer,
    is_number,
    shown_path,
)
from areal_adv.api.task_specs import BUILTIN_TASKS, task_has_process_scorer, validate_task
from areal_adv.utils.suggest import did_you_mean

_ARCHS = ("llama", "qwen2")
_ATTN = ("eager", "sdpa")
_DTYPES = ("float32", "bfloat16", "float64")
_EXPORTS = ("episode", "per_turn")
_ROLLOUT_DTYPES = (None, "bfloat16")
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


_MIXED_PRECISION = (None, "bf16", "auto")


@dataclass
class LoraConfig:
    """LoRA (low-rank adaptation) adapters (Hu et al. 2021, arXiv:2106.09685) through `peft` (the `lora` extra).

    Only the adapters train; the base weights stay frozen. The KL reference is the
    policy with its adapters disabled, and checkpoints hold the adapters
    (`areal-adv export` merges them).
    """

    r: int = field(
        default=8,
        metadata={
            "help": "Adapter rank r: each adapted weight W gets a trainable update B·A of rank r; a larger r "
            "adds capacity and memory. Default 8."
        },
    )
    alpha: float = field(
        default=16.0,
        metadata={
            "help": "Scale numerator (> 0): the update is (alpha / r)·B·A, so alpha / r sets its strength "
            "(peft's `lora_alpha`). Default 16.0."
        },
    )
    dropout: float = field(
        default=0.0,
        metadata={"help": "Dropout probability in [0, 1] on the adapter's input; 0.0 (default) turns it off."},
    )
    target_modules: list[str] | None = field(
        default=None,
        metadata={
            "help": "Names of the modules to adapt, e.g. [q_proj, v_proj] (peft's `target_modules`). Null "
            "(default) takes peft's default for the architecture."
        },
    )

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

    The checkpoint brings its own architecture and tokenizer, so the architecture
    fields (`arch`, `hidden_size`, `num_layers`, `num_heads`, `intermediate_size`,
    `max_position_embeddings`) are errors next to it; with `path: null` they size
    the tiny model (null: the defaults in `TINY_ARCHITECTURE`; `architecture()`
    gives the values in force) and the task's word vocabulary is its tokenizer.
    Hub ids are refused on purpose: runs never download.
    """

    path: str | None = field(
        default=None,
        metadata={
            "help": "Local checkpoint directory: a `save_pretrained` folder with its tokenizer, or the folder of "
            "`gguf_file`. Null (default) builds a tiny randomly initialised model; hub ids are refused, since "
            "runs never download."
        },
    )
    gguf_file: str | None = field(
        default=None,
        metadata={
            "help": "A GGUF file name inside `path`, or a GGUF file path alone (its folder becomes `path`); "
            "needs the `gguf` extra, and transformers de-quantises it. Null (default): no GGUF file."
        },
    )
    arch: str | None = field(
        default=None,
        metadata={"help": "Architecture of the tiny random model, `llama` or `qwen2`; null (default) means llama."},
    )
    hidden_size: int | None = field(
        default=None,
        metadata={"help": "Hidden size of the tiny random model, a multiple of `num_heads`; null (default) means 64."},
    )
    num_layers: int | None = field(
        default=None, metadata={"help": "Transformer layers of the tiny random model; null (default) means 2."}
    )
    num_heads: int | None = field(
        default=None, metadata={"help": "Attention heads of the tiny random model; null (default) means 4."}
    )
    intermediate_size: int | None = field(
        default=None, metadata={"help": "MLP inner size of the tiny random model; null (default) means 128."}
    )
    max_position_embeddings: int | None = field(
        default=None,
        metadata={
            "help": "Longest sequence (prompt plus generated tokens) the tiny random model accepts; null "
            "(default) means 128."
        },
    )
    attn_implementation: str = field(
        default="eager",
        metadata={
            "help": "Attention implementation passed to transformers, `eager` (default) or `sdpa`; for the tiny "
            "model and a checkpoint alike."
        },
    )
    dtype: str = field(
        default="float32",
        metadata={
            "help": "Dtype of the weights: `float32` (default), `bfloat16` or `float64`; for the tiny model and "
            "a checkpoint alike."
        },
    )
    mixed_precision: str | None = field(
        default=None,
        metadata={
            "help": "`bf16`: every model forward (training rollouts' sampling, training, log-prob passes, critic) "
            "runs under torch.autocast to bfloat16, so the sampled and the trained log-probs come from the same "
            "precision, while weights, gradients and AdamW state stay `dtype`; evaluation is not autocast. "
            "`auto`: `bf16` where the device multiplies bfloat16 natively (a CUDA GPU with bf16 support, a CPU "
            "with AVX512-BF16 or AMX), else no autocast; the run's opening lines say which. "
            "Null (default): no autocast."
        },
    )
    lora: LoraConfig | None = field(
        default=None,
        metadata={"help": "LoRA adapters (the `model.lora` section); null (default) trains every weight."},
    )

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
                f"model.gguf_file: got {shown_path(self.gguf_file)}, expected a GGUF file (or a file name inside "
                "model.path)"
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
                f"model.path: {shown_path(self.path)} is not a local directory; use null for a tiny randomly "
                "initialised model (hub ids are not downloaded)"
            )
        if self.gguf_file is not None:
            if not isinstance(self.gguf_file, str) or not os.path.isfile(os.path.join(self.path, self.gguf_file)):
                raise ConfigError(
                    f"model.gguf_file: {self.gguf_file!r} is not a file inside model.path={shown_path(self.path)}"
                )
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
    """The value model for PPO: the policy's backbone (from `model.path` when given) plus a scalar head."""

    enabled: bool = field(
        default=False,
        metadata={
            "help": "Train a value model, as PPO with GAE needs. False (default) is critic-free training such "
            "as GRPO: no values, advantages come from the rewards."
        },
    )
    lr: float = field(default=1e-3, metadata={"help": "AdamW learning rate of the critic (> 0). Default 1e-3."})
    weight_decay: float = field(
        default=0.0, metadata={"help": "AdamW weight decay of the critic; 0.0 (default) turns it off."}
    )
    grad_clip: float = field(
        default=1.0, metadata={"help": "Largest gradient norm of a critic update (> 0). Default 1.0."}
    )
    value_eps_clip: float = field(
        default=0.2,
        metadata={
            "help": "Value clipping of PPO: the value loss also takes the new value clipped to within "
            "±value_eps_clip of the old one (arXiv:1707.06347). Default 0.2."
        },
    )
    ppo_n_minibatches: int | None = field(
        default=None,
        metadata={"help": "Minibatches per critic update; null (default) takes `actor.ppo_n_minibatches`."},
    )

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

    Built-in kwargs are validated here; a plugin's path is checked for shape only
    and imported on every rank at trainer start-up.
    """

    implementation: str | None = field(
        default=None,
        metadata={
            "help": "`arith`, `guess`, `reasoning_gym`, `dataset` (prompts from `data.train`, scored only by "
            "`reward`) or a dotted path to a factory `fn(**kwargs) -> task` (docs/training.md, *Writing a "
            "task*). Null (default): `arith`, or `dataset` when `data.train` is set."
        },
    )
    name: str | None = field(
        default=None, metadata={"help": "The older key for `implementation` (an alias); set only one of the two."}
    )
    kwargs: dict[str, Any] = field(
        default_factory=dict,
        metadata={"help": "Keyword arguments of the task (a built-in task's are validated at load time). Default {}."},
    )
    reward_weight: float = field(
        default=1.0,
        metadata={
            "help": "Weight of the task's own score among the reward components (metric `reward/<task>`). Default 1.0."
        },
    )

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

    The episode reward is the weighted sum of every component (the task's score included).
    """

    implementation: str = field(
        default="",
        metadata={
            "help": "Dotted path to `fn(prompts, completions, **columns) -> list[float]`, `columns` being the "
            "row's other data fields (e.g. `answer`). Required."
        },
    )
    kwargs: dict[str, Any] = field(
        default_factory=dict,
        metadata={"help": "Keyword arguments bound to the function on every call. Default {}."},
    )
    weight: float = field(
        default=1.0, metadata={"help": "Weight of this component in the episode reward. Default 1.0."}
    )
    name: str | None = field(
        default=None,
        metadata={
            "help": "Name of the component, which keys its metric `reward/<name>`; null (default) takes the "
            "function's name."
        },
    )

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
    """Prompt datasets read from local files with Hugging Face `datasets` (the `data` extra).

    Training rows are drawn in epochs; every column other than the prompt reaches
    the reward functions.
    """

    train: str | None = field(
        default=None,
        metadata={
            "help": "Training prompts: a local `.jsonl`/`.json`, `.parquet` or `.csv` file, or a folder written "
            "by `save_to_disk`. Null (default): the task generates its own prompts."
        },
    )
    eval: str | None = field(
        default=None,
        metadata={
            "help": "Held-out prompts for `eval`, in the formats of `train`. Null (default): none; a procedural "
            "task draws fresh held-out problems instead."
        },
    )
    prompt_key: str = field(
        default="prompt",
        metadata={"help": "Column that holds the prompt, as text or chat messages. Default `prompt`."},
    )
    train_split: str = field(
        default="train", metadata={"help": "Split of a `DatasetDict` folder that `train` reads. Default `train`."}
    )
    eval_split: str = field(
        default="test", metadata={"help": "Split of a `DatasetDict` folder that `eval` reads. Default `test`."}
    )
    shuffle: bool = field(
        default=True, metadata={"help": "Shuffle the training rows every epoch with the run seed; true (default)."}
    )

    def __post_init__(self) -> None:
        for name in ("train", "eval"):
            path = getattr(self, name)
            if path is None:
                continue
            if not isinstance(path, str) or not os.path.exists(path):
                raise ConfigError(f"data.{name}: {shown_path(path)} does not exist (expected a local file or folder)")
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

    The held-out prompts are `data.eval`, or fresh problems of a procedural task
    from a separate seed, the same set each time. Metrics: `eval/accuracy`,
    `eval/reward_mean` and one `eval/reward/<name>` per component.
    """

    every: int | None = field(
        default=None,
        metadata={
            "help": "Evaluate before every N-th step's update and once more after the last update; null "
            "(default) never evaluates."
        },
    )
    n_prompts: int = field(
        default=32, metadata={"help": "Held-out prompts decoded greedily per evaluation. Default 32."}
    )
    success_threshold: float = field(
        default=1.0,
        metadata={"help": "`eval/accuracy` counts the episodes whose reward is at least this value. Default 1.0."},
    )
    samples_per_step: int = field(
        default=4,
        metadata={
            "help": "(prompt, completion, reward) rows that rank 0 appends to `samples.jsonl` every step; 0 "
            "writes none. Default 4."
        },
    )

    def __post_init__(self) -> None:
        if self.every is not None:
            check_int("eval.every", self.every, 1)
        check_int("eval.n_prompts", self.n_prompts, 1)
        check_number("eval.success_threshold", self.success_threshold)
        check_int("eval.samples_per_step", self.samples_per_step, 0)


@dataclass
class AdvantageShapingConfig:
    """Legacy PRM (process reward model) shaping parameters, passed to `compute_advantages` at call time."""

    mode: str = field(
        default=AdvantageShaping.mode,
        metadata={
            "help": "How process rewards shape the advantages: `additive` (default; A + p), `gvpo` or "
            "`process_weighted` (docs: *Custom advantage computation*, *Process advantage shaping*). An explicit "
            "`actor.advantage.process_adv_shaping` wins."
        },
    )
    negative_scale: float = field(
        default=AdvantageShaping.negative_scale,
        metadata={
            "help": "`gvpo`: a negative advantage on a failed step (process reward < 0) is scaled by "
            "1 + negative_scale. Default 0.2."
        },
    )
    zero_penalty: float = field(
        default=AdvantageShaping.zero_penalty,
        metadata={"help": "`gvpo`: a near-zero advantage on a failed step becomes −zero_penalty. Default 0.4."},
    )
    zero_eps: float = field(
        default=AdvantageShaping.zero_eps,
        metadata={"help": "`gvpo`: advantages within ±zero_eps count as zero. Default 1e-6."},
    )

    def __post_init__(self) -> None:
        self.shaping().validate("rollout.prm.advantage_shaping.mode", "rollout.prm.advantage_shaping.{name}")

    def shaping(self) -> AdvantageShaping:
        """The frozen call-time object `PPOActor.compute_advantages(shaping=...)` takes."""
        return AdvantageShaping(self.mode, self.negative_scale, self.zero_penalty, self.zero_eps)


@dataclass
class PRMConfig:
    """Legacy process-reward section: turns the task's process scorer on."""

    enabled: bool = field(
        default=False,
        metadata={
            "help": "Run the task's process-reward scorer, which writes per-token `token_rewards`; the task "
            "must have one (`guess` does). False (default)."
        },
    )
    advantage_shaping: AdvantageShapingConfig = field(
        default_factory=AdvantageShapingConfig,
        metadata={
            "help": "How the process rewards shape the advantages (the `rollout.prm.advantage_shaping` section)."
        },
    )

    def __post_init__(self) -> None:
        _check_bool("rollout.prm.enabled", self.enabled)


@dataclass
class RolloutConfig:
    """How trajectories are sampled and exported each step."""

    batch_size: int = field(default=16, metadata={"help": "Prompts per step. Default 16."})
    n_samples: int = field(
        default=8,
        metadata={
            "help": "Episodes sampled per prompt: the group that group-relative estimators (GRPO, RLOO, ...) "
            "compare. Default 8; group centering needs at least 2."
        },
    )
    max_new_tokens: int | None = field(
        default=None,
        metadata={
            "help": "Generated-token budget per episode, all turns together; at most `actor.max_new_tokens`. "
            "Null (default) takes `actor.max_new_tokens`."
        },
    )
    temperature: float | None = field(
        default=None,
        metadata={
            "help": "Sampling temperature; a set value must equal `actor.temperature`, because the behaviour "
            "log-probs and the PPO loss use the sampling temperature. Null (default) takes the actor's."
        },
    )
    weights_dtype: str | None = field(
        default=None,
        metadata={
            "help": "`bfloat16`: training rollouts sample from a bfloat16 copy of the policy, refreshed after "
            "every update with one cast (one process, DDP and FSDP alike), which reads half the bytes per "
            "generated token; training, the log-prob passes and evaluation keep `model.dtype`. The training "
            "precision's log-probs of the sampled tokens are recomputed every step (by the update's own forward "
            "when `actor.ppo_n_minibatches` is 1) and the mismatch is logged "
            "(`rollout_mismatch/*`); `actor.use_decoupled_loss` with `actor.behav_imp_weight_cap` corrects it "
            "(AReaL's decoupled objective). Null (default): sample from the training weights."
        },
    )
    export: str = field(
        default="episode",
        metadata={
            "help": "`episode` (default): one tensor row per episode; `per_turn`: one row per generated turn "
            "with `RolloutGroup` metadata (split rollouts)."
        },
    )
    explicit_rollout_rewards: bool = field(
        default=False,
        metadata={
            "help": "With `export: per_turn`, ship each episode's reward as `RolloutGroup.rewards`, the "
            "reference of its logical rollout. False (default)."
        },
    )
    greedy_baseline: bool = field(
        default=False,
        metadata={
            "help": "Also run one greedy episode per prompt and ship its reward as `reward_baselines` (one per "
            "row), the baseline ReMax (arXiv:2310.10505) subtracts. False (default)."
        },
    )
    filter_zero_advantage: bool = field(
        default=False,
        metadata={
            "help": "Drop the prompt groups whose advantages are 0 on every generated token (e.g. GRPO groups "
            "whose samples all got the same reward) before the update, which then averages its loss over the "
            "kept groups' tokens; the `filtered_groups` metric counts them. DAPO's dynamic sampling "
            "(arXiv:2503.14476) without the re-sampling; see `areal_adv.trainer.run.group_filter`. False (default)."
        },
    )
    prm: PRMConfig = field(default_factory=PRMConfig, metadata={"help": "Process rewards (the `rollout.prm` section)."})

    def __post_init__(self) -> None:
        check_int("rollout.batch_size", self.batch_size, 1)
        check_int("rollout.n_samples", self.n_samples, 1)
        if self.max_new_tokens is not None:
            check_int("rollout.max_new_tokens", self.max_new_tokens, 1)
        if self.temperature is not None:
            _check_float("rollout.temperature", self.temperature, 0.0, open_low=True)
        _check_choice("rollout.export", self.export, _EXPORTS)
        _check_choice("rollout.weights_dtype", self.weights_dtype, _ROLLOUT_DTYPES)
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
    """Optimisation schedule of the policy, checkpoints and resume. Minibatches and KL live in `actor`."""

    steps: int = field(default=500, metadata={"help": "Training steps, each a rollout and an update. Default 500."})
    lr: float = field(default=5e-4, metadata={"help": "AdamW learning rate of the policy (> 0). Default 5e-4."})
    weight_decay: float = field(
        default=0.0, metadata={"help": "AdamW weight decay of the policy; 0.0 (default) turns it off."}
    )
    grad_clip: float = field(
        default=1.0, metadata={"help": "Largest gradient norm of a policy update (> 0). Default 1.0."}
    )
    num_threads: int | None = field(
        default=None,
        metadata={
            "help": "Threads per process (per rank under torchrun) for torch and numba. Null (default): the CPU "
            "cores this process may use divided by the ranks on this machine (torchrun's LOCAL_WORLD_SIZE), "
            "so ranks never oversubscribe the cores."
        },
    )
    log_every: int = field(
        default=10,
        metadata={
            "help": "Refresh of the progress bar's postfix, or, when stderr is not a terminal, one progress line "
            "every N steps. Default 10."
        },
    )
    dist_timeout_s: float | None = field(
        default=None,
        metadata={
            "help": "Data parallel: seconds every collective may take, so a dead rank makes the others fail "
            "instead of waiting. Null (default): torch's default, 30 min for gloo."
        },
    )
    debug_param_checksum: bool = field(
        default=False,
        metadata={
            "help": "Rank 0 writes `param_checksums.jsonl`: after every step one checksum per rank of the policy "
            "(critic, reference, `sampler`: the `rollout.weights_dtype` copy), to check that the replicas stay "
            "identical. False (default)."
        },
    )
    parallel: str = field(
        default="ddp",
        metadata={
            "help": "Data-parallel engine under torchrun: `ddp` (default; DistributedDataParallel, one full "
            "replica per rank) or `fsdp` (fully sharded data parallel, FSDP2 `fully_shard`: parameters, "
            "gradients and optimiser state sharded over the ranks, plus a full copy of the policy for "
            "sampling). Ignored in a single process (docs/distributed.md)."
        },
    )
    failure_timeout_s: float = field(
        default=30.0,
        metadata={
            "help": "Seconds a failed rank waits for the others to learn the cause, and that a rank which "
            "learnt of a peer's failure may take to stop before it is ended. Default 30."
        },
    )
    save_every: int = field(
        default=100,
        metadata={
            "help": "Write a checkpoint to `<run_dir>/checkpoints/step_<N>/` every N steps and after the last "
            "step; 0 never writes one. Default 100."
        },
    )
    keep_last: int | None = field(
        default=3, metadata={"help": "Keep the newest K checkpoints; null keeps all of them. Default 3."}
    )
    resume: str | None = field(
        default=None,
        metadata={
            "help": "Null (default) starts a new run; `auto` continues from the newest complete checkpoint of "
            "the run directory (or starts a new run when there is none); a path continues from that "
            "checkpoint folder."
        },
    )

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
        from areal_adv.utils.checkpoint_folders import MANIFEST

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
#: What `diagnostics.params` may name: the parameters whose gradient `grad_snr` and `cos_to_active` measure.
DIAGNOSTIC_PARAMS = ("all", "lm_head", "last_layer")
#: The name of the run's own advantages in `diagnostics/<name>/<metric>`; no shadow estimator may take it.
ACTIVE_ESTIMATOR = "active"


def diagnostic_estimator_names() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(preset names, built-in estimator names) that `diagnostics.estimators` accepts (no torch import)."""
    from areal_adv.api.presets import preset_names
    from areal_adv.api.stage_registry import SELECTORS, builtin_stage_names

    estimators = tuple(n for n in builtin_stage_names()["estimator"] if n not in SELECTORS["estimator"])
    return tuple(preset_names()), estimators


def is_config_file(name: str) -> bool:
    """Whether a `diagnostics.estimators` entry names a config file (`*.yaml` / `*.yml`) rather than a name."""
    return isinstance(name, str) and name.endswith((".yaml", ".yml"))


def shadow_label(name: str) -> str:
    """The `<name>` of `diagnostics/<name>/<metric>`: the entry itself, or a config file's stem."""
    return os.path.splitext(os.path.basename(name))[0] if is_config_file(name) else name


@dataclass
class DiagnosticsConfig:
    """Shadow estimators: other estimators' advantages on each step's batch, measured beside the run's own.

    Every listed estimator computes its advantages on the step's exact batch (the
    same rewards, masks, log-probs and values) and is measured as
    `diagnostics/<name>/<metric>`, the run's own advantages as `diagnostics/active/*`.
    Training is unchanged: the same metrics and weights with diagnostics on or
    off. docs/training.md, "Diagnostics", defines the metrics and their cost.
    """

    estimators: list[str] = field(
        default_factory=list,
        metadata={
            "help": "Shadow estimators: preset names (`rloo`, `maxrl`, `grpo`, ...; `areal-adv presets`), "
            "built-in estimator names (`token_gae`, `turn_gae`, ...) or config files (`path/to/algo.yaml`, "
            "logged under the file's stem). [] (default) turns diagnostics off."
        },
    )
    every: int = field(default=1, metadata={"help": "Measure every N-th step (steps 0, N, 2N, ...). Default 1."})
    first_steps: int | None = field(
        default=None,
        metadata={
            "help": "Measure only steps below this one: the start of a run, where the choice of an estimator is "
            "made, without the cost later. None (default): the whole run."
        },
    )
    folds: int = field(
        default=4,
        metadata={
            "help": "Parts the step's prompt groups are split into, one gradient each, for `grad_snr` (>= 2; "
            "capped by the number of groups). Default 4."
        },
    )
    params: str = field(
        default="all",
        metadata={
            "help": "Parameters whose gradient `grad_snr` and `cos_to_active` measure: `all` trainable ones "
            "(the adapters under LoRA), `lm_head` (the output projection) or `last_layer` (the last "
            "transformer block). Default `all`."
        },
    )

    def __post_init__(self) -> None:
        check_int("diagnostics.every", self.every, 1)
        if self.first_steps is not None:
            check_int("diagnostics.first_steps", self.first_steps, 1)
        check_int("diagnostics.folds", self.folds, 2)
        _check_choice("diagnostics.params", self.params, DIAGNOSTIC_PARAMS)
        if not isinstance(self.estimators, list):
            raise ConfigError(f"diagnostics.estimators: got {self.estimators!r}, expected a list of names")
        presets, estimators = diagnostic_estimator_names()
        for i, name in enumerate(self.estimators):
            if is_config_file(name):
                if not os.path.isfile(name):
                    raise ConfigError(
                        f"diagnostics.estimators[{i}]: {shown_path(name)} is not a file, expected a config YAML"
                    )
            elif not isinstance(name, str) or (name not in presets and name not in estimators):
                raise ConfigError(
                    f"diagnostics.estimators[{i}]: got {name!r}, expected a preset ({', '.join(presets)}), "
                    f"an estimator ({', '.join(estimators)}) or a config file (*.yaml)"
                    f"{did_you_mean(str(name), [*presets, *estimators])}"
                )
        labels = [shadow_label(name) for name in self.estimators]
        if len(set(labels)) != len(labels) or ACTIVE_ESTIMATOR in labels:
            raise ConfigError(
                f"diagnostics.estimators: got {self.estimators}, expected each name (a file by its stem) at most "
                f"once and none called {ACTIVE_ESTIMATOR!r}"
            )
        self.estimators = list(self.estimators)

    @property
    def enabled(self) -> bool:
        return bool(self.estimators)

    def due(self, step: int) -> bool:
        """Whether step `step` is measured."""
        early = self.first_steps is None or step < self.first_steps
        return self.enabled and early and step % self.every == 0


_WANDB_MODES = ("offline", "online")


@dataclass
class OutputConfig:
    """Where and how a run reports: the run directory `<dir>/<experiment_name>/<trial_name>/`.

    A run refuses to start where a run already is unless `train.resume` is set
    or `overwrite` is true. Only rank 0 logs.
    """

    dir: str = field(
        default="runs",
        metadata={"help": "Root of the run directories `<dir>/<experiment_name>/<trial_name>/`. Default `runs`."},
    )
    plot: bool = field(
        default=True,
        metadata={"help": "Draw the metric curves to `curves.png` in the run directory at the end; true (default)."},
    )
    progress_bar: bool = field(
        default=True, metadata={"help": "Show a progress bar of the steps on rank 0; true (default)."}
    )
    overwrite: bool = field(
        default=False,
        metadata={
            "help": "Delete an existing run directory at the same path and start afresh, instead of refusing to "
            "start. False (default)."
        },
    )
    loggers: list[str] = field(
        default_factory=lambda: ["jsonl", "tensorboard"],
        metadata={
            "help": "Metric sinks, any of `jsonl` (metrics.jsonl), `tensorboard` (event files in `tensorboard/`) "
            "and `wandb` (Weights & Biases, `pip install 'areal-adv[wandb]'`). Default [jsonl, tensorboard]."
        },
    )
    wandb_project: str | None = field(
        default=None, metadata={"help": "Weights & Biases project; null (default) means `areal-adv`."}
    )
    wandb_mode: str = field(
        default="offline",
        metadata={"help": "Weights & Biases mode: `offline` (default; files in `wandb/`) or `online`."},
    )
    plot_smoothing: float = field(
        default=0.9,
        metadata={
            "help": "Weight in [0, 1) of the exponential moving average drawn over each curve in `curves.png`; "
            "0 draws the raw curves only. Default 0.9."
        },
    )
    save_rollouts: bool = field(
        default=False,
        metadata={
            "help": "Save each step's batch (tokens, masks, log-probs, Σπ², rewards, group ids, values) to "
            "`rollouts/step_<N>.safetensors` in the run directory, for `areal-adv diagnose`. False (default)."
        },
    )
    save_checkpoint: bool = field(
        default=False,
        metadata={
            "help": "Retired end-of-run checkpoint switch: checkpoints are `train.save_every`, and true is an "
            "error that says so. Keep false (default)."
        },
    )

    def __post_init__(self) -> None:
        if not isinstance(self.dir, str) or not self.dir:
            raise ConfigError(f"output.dir: got {self.dir!r}, expected a non-empty path")
        for name in ("plot", "progress_bar", "overwrite", "save_rollouts", "save_checkpoint"):
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
        # an installed wandb is checked with the other extras (areal_adv.api.extras), in one message
        self.loggers = loggers


@dataclass
class ExperimentConfig:
    """A whole experiment: the `actor:` section and the trainer around it.

    A run writes into `<output.dir>/<experiment_name>/<trial_name>/` (as in
    AReaL: one experiment, several trials, e.g. seeds or ablations).
    """

    experiment_name: str = field(
        default="default",
        metadata={
            "help": "Experiment name, the middle level of the run directory. Default: the config file's name "
            "(`my_exp` for `my_exp.yaml`) when neither it nor a file it builds on sets one (a preset's own name "
            "belongs to the preset run as such); `default` for a config without a file."
        },
    )
    trial_name: str = field(
        default="trial0",
        metadata={
            "help": "Trial name (e.g. a seed or an ablation), the last level of the run directory. Default `trial0`."
        },
    )
    seed: int = field(
        default=1, metadata={"help": "Seed of the weights' initialisation, the problems and the sampling. Default 1."}
    )
    actor: PPOActorConfig = field(
        default_factory=PPOActorConfig,
        metadata={"help": "The PPO actor and its advantage pipeline (the `actor` section)."},
    )
    model: ModelConfig = field(default_factory=ModelConfig, metadata={"help": "The policy (the `model` section)."})
    critic: CriticConfig = field(
        default_factory=CriticConfig, metadata={"help": "The value model (the `critic` section)."}
    )
    task: TaskConfig = field(
        default_factory=TaskConfig, metadata={"help": "What the policy is trained on (the `task` section)."}
    )
    rollout: RolloutConfig = field(
        default_factory=RolloutConfig, metadata={"help": "Sampling of the episodes (the `rollout` section)."}
    )
    train: TrainConfig = field(
        default_factory=TrainConfig,
        metadata={"help": "Optimisation schedule, checkpoints and resume (the `train` section)."},
    )
    output: OutputConfig = field(
        default_factory=OutputConfig, metadata={"help": "Run directory, loggers and plots (the `output` section)."}
    )
    data: DataConfig = field(
        default_factory=DataConfig, metadata={"help": "Prompt datasets from local files (the `data` section)."}
    )
    reward: list[RewardFunctionConfig] = field(
        default_factory=list,
        metadata={
            "help": "Extra reward functions, each `{implementation, kwargs, weight, name}` (the `reward[]` "
            "entries); the episode reward is the weighted sum of the task's score and theirs. Default []."
        },
    )
    eval: EvalConfig = field(
        default_factory=EvalConfig,
        metadata={"help": "Held-out greedy evaluation and the sample log (the `eval` section)."},
    )
    diagnostics: DiagnosticsConfig = field(
        default_factory=DiagnosticsConfig,
        metadata={"help": "Shadow estimators measured on each step's batch (the `diagnostics` section)."},
    )

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
        if rollout.weights_dtype is not None and rollout.weights_dtype == self.model.dtype:
            raise ConfigError(
                f"rollout.weights_dtype: got {rollout.weights_dtype!r}, but model.dtype is {self.model.dtype!r} "
                "already; expected null (sample from the training weights) or a dtype other than model.dtype"
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
