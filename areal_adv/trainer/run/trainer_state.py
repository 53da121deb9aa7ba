"""What a checkpoint holds for a `Trainer`, and how it is restored bit for bit.

A checkpoint folder (`areal_adv.utils.checkpoint_folders` makes it atomic) contains:

| file | content |
| --- | --- |
| `state/` | policy and critic weights and AdamW states: a `torch.distributed.checkpoint` folder (each rank's shard, `.metadata`), what a resume loads, at any world size and under either engine |
| `policy/` | the policy via `save_pretrained` plus the tokenizer, written by rank 0 from the full copy it samples with (no gather): loadable with `model.path=` and by `areal-adv export` (with `model.lora`: the adapters only, peft's format; `areal-adv export` merges them into a model folder) |
| `trainer_state.pt` | step, world size, every RNG of every rank, the data position, the stages' state, checksums |
| `metrics.jsonl` | the per-step metrics rows before this step (the metrics file is rebuilt from them) |
| `config.yaml` | the config that wrote it |

RNGs, per rank: python's global `random`, numpy's global generator, torch's
CPU (and CUDA) generators, the trainer's sampling generator and its prompt
`random.Random`, and the task's own state when it keeps one (`Task.state_dict`). The data position is `trainer.prompt_source.state_dict()` when
the trainer has a prompt source (and the prompt RNG otherwise).

At the world size that wrote it, a resume restores all of it: bit for bit the
uninterrupted run. At another world size the per-rank RNGs have no counterpart
(rank r's sampling stream of N ranks is no stream of M ranks), so they stay as
the freshly built trainer seeded them; everything shared by the ranks (weights,
AdamW states, step, prompt RNG and data position, stage states, metrics) is
restored. The next step is then that of a fresh run at this size started from
the saved state.

The KL reference is not saved: it is rebuilt exactly as at the start (same
seed, same `model.path`) when the resumed trainer is built, and its sha256,
recorded in every checkpoint, is checked on resume, so a changed `model.path`
cannot silently move the reference.

`trainer_state.pt` is loaded with `torch.load(weights_only=True)` and `state/`
by `torch.distributed.checkpoint`: a checkpoint holds tensors and plain values
only, never pickled code.
"""

from __future__ import annotations

import json
import logging
import random
import shutil
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import torch

from areal_adv.api.cli_args import config_to_dict, config_to_yaml
from areal_adv.trainer.parallel.checksum import module_checksum
from areal_adv.trainer.parallel.distributed import all_gather_objects
from areal_adv.trainer.parallel.sharded_state import engine_state, load_engine_state, load_state, save_state
from areal_adv.utils.checkpoint_folders import (
    CheckpointError,
    check_resumable,
    checkpoint_root,
    publish,
    read_manifest,
    staging_folder,
)
from areal_adv.utils.file_modes import normal_mode

logger = logging.getLogger("areal_adv.checkpoint")

if TYPE_CHECKING:
    from areal_adv.api.train_args import ExperimentConfig
    from areal_adv.trainer.parallel.distributed import DistContext
    from areal_adv.trainer.parallel.engine import PolicyEngine
    from areal_adv.trainer.ppo.actor import PPOActor
    from areal_adv.trainer.ppo.training.critic import PPOCritic
    from areal_adv.trainer.rollout.tasks.runtime import TaskRuntime


class RandomStreams(Protocol):
    """The trainer's own random streams a checkpoint restores (beside the global ones)."""

    @property
    def generator(self) -> torch.Generator: ...  # this rank's sampling noise

    @property
    def rng(self) -> random.Random: ...  # the prompt list, the same on every rank


class CheckpointedTrainer(RandomStreams, Protocol):
    """Every part of a trainer that a checkpoint saves, checks or restores, by name and type.

    `Trainer` satisfies it (mypy checks the assignment at the end of this module), so renaming one of these
    attributes is a type error here instead of a resume that fails at run time.
    """

    @property
    def cfg(self) -> ExperimentConfig: ...
    @property
    def ctx(self) -> DistContext: ...
    @property
    def run_dir(self) -> Path: ...
    @property
    def engine(self) -> PolicyEngine: ...  # the policy's weights and AdamW state
    @property
    def policy(self) -> torch.nn.Module: ...  # the plain full module saved as `policy/`
    @property
    def critic(self) -> PPOCritic | None: ...
    @property
    def reference(self) -> torch.nn.Module | None: ...  # checked by checksum, never saved
    @property
    def actor(self) -> PPOActor: ...  # the stages' state
    @property
    def prompt_source(self) -> Any: ...  # `state_dict()` / `load_state_dict()`: the data position
    @property
    def tokenizer(self) -> Any: ...  # saved beside the policy
    @property
    def task(self) -> TaskRuntime: ...


STATE_FILE = "trainer_state.pt"
METRICS_FILE = "metrics.jsonl"
POLICY_DIR, CRITIC_DIR = "policy", "critic"
STATE_DIR = "state"
VALUE_HEAD_FILE = "value_head.safetensors"

#: Config keys that may change between a run and its resumption without changing the trajectory.
_FREE_KEYS = (
    "train.steps",
    "train.resume",
    "train.save_every",
    "train.keep_last",
    "train.log_every",
    "train.num_threads",
    "train.dist_timeout_s",
    "train.debug_param_checksum",
    "output.",
)

_reference_sums: weakref.WeakKeyDictionary[torch.nn.Module, str] = weakref.WeakKeyDictionary()


# -- RNG and data position ----------------------------------------------------------------


def capture_rng(trainer: RandomStreams) -> dict[str, Any]:
    """Every RNG state of this process that a step can consume (plain values and tensors)."""
    np_state = np.random.get_state(legacy=False)
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": {
            "bit_generator": np_state["bit_generator"],
            "key": np_state["state"]["key"].tolist(),
            "pos": int(np_state["state"]["pos"]),
            "has_gauss": int(np_state["has_gauss"]),
            "gauss": float(np_state["gauss"]),
        },
        "torch_cpu": torch.get_rng_state(),
        "generator": trainer.generator.get_state(),
        "prompt_rng": trainer.rng.getstate(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["torch_cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(trainer: RandomStreams, state: dict[str, Any]) -> None:
    random.setstate(_as_random_state(state["python"]))
    numpy = state["numpy"]
    np.random.set_state(
        {
            "bit_generator": numpy["bit_generator"],
            "state": {"key": np.asarray(numpy["key"], dtype=np.uint32), "pos": numpy["pos"]},
            "has_gauss": numpy["has_gauss"],
            "gauss": numpy["gauss"],
        }
    )
    torch.set_rng_state(state["torch_cpu"])
    trainer.generator.set_state(state["generator"])
    trainer.rng.setstate(_as_random_state(state["prompt_rng"]))
    if "torch_cuda" in state:
        if not torch.cuda.is_available() or torch.cuda.device_count() != len(state["torch_cuda"]):
            raise CheckpointError(
                f"the checkpoint holds CUDA RNG states of {len(state['torch_cuda'])} devices; "
                "this process sees a different number, so it cannot continue exactly"
            )
        torch.cuda.set_rng_state_all(state["torch_cuda"])


def _as_random_state(value: Any) -> tuple:
    """`random.getstate()` comes back from torch.load as nested lists/tuples; setstate needs tuples."""
    version, internal, gauss = value
    return (version, tuple(internal), gauss)


def task_state(trainer: CheckpointedTrainer) -> dict[str, Any]:
    """This rank's task state, when the task keeps one (`Task.state_dict`; `{}` otherwise)."""
    task = trainer.task.task
    return {"task": task.state_dict()} if callable(getattr(task, "state_dict", None)) else {}


def restore_task(trainer: CheckpointedTrainer, state: dict[str, Any]) -> None:
    task = trainer.task.task
    if not callable(getattr(task, "load_state_dict", None)):
        return
    if "task" not in state:
        raise CheckpointError(
            f"the checkpoint holds no state of task {type(task).__name__}, which keeps one (state_dict); "
            "it was written by a different task or task version"
        )
    task.load_state_dict(state["task"])


def data_state(trainer: CheckpointedTrainer) -> dict[str, Any]:
    """The prompt position: the prompt source's own state when the trainer has one."""
    source = getattr(trainer, "prompt_source", None)
    return {"prompt_source": source.state_dict()} if source is not None else {}


def restore_data(trainer: CheckpointedTrainer, state: dict[str, Any]) -> None:
    source = getattr(trainer, "prompt_source", None)
    if source is not None:
        if "prompt_source" not in state:
            raise CheckpointError(
                "the checkpoint has no prompt-source state, but this trainer draws prompts "
                "from a prompt source; it was written by a different configuration"
            )
        source.load_state_dict(state["prompt_source"])


# -- models and optimisers ----------------------------------------------------------------


@contextmanager
def no_hf_progress_bars() -> Iterator[None]:
    """transformers draws a bar per save ("Writing model shards") and per load ("Loading weights"); in a
    run's log or a command's output that is noise."""
    from transformers.utils import logging as hf_logging

    was_on = hf_logging.is_progress_bar_enabled()
    if was_on:
        hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_on:
            hf_logging.enable_progress_bar()


def save_module(module: torch.nn.Module, folder: Path) -> None:
    """`save_pretrained` for Hugging Face models; a value model saves its backbone that way plus its head.

    The weights files get the mode of the files beside them (safetensors writes them owner-only).
    """
    with no_hf_progress_bars():
        _save_module(module, folder)
    normal_mode(folder)


def _save_module(module: Any, folder: Path) -> None:
    """`module`: a transformers model (`save_pretrained`) or a value model (`backbone` + `value_head`)."""
    from safetensors.torch import save_file

    if hasattr(module, "save_pretrained"):
        module.save_pretrained(folder)
    elif hasattr(module, "backbone") and hasattr(module, "value_head"):
        module.backbone.save_pretrained(folder)
        save_file(
            {k: v.detach().contiguous() for k, v in module.value_head.state_dict().items()},
            str(folder / VALUE_HEAD_FILE),
        )
    else:
        raise TypeError(
            f"cannot checkpoint a {type(module).__name__}: expected a Hugging Face model or a "
            "ValueModel (backbone + value_head)"
        )


def _read_hf_weights(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    index = folder / "model.safetensors.index.json"
    if index.is_file():
        files = sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
    elif (folder / "model.safetensors").is_file():
        files = ["model.safetensors"]
    else:
        raise CheckpointError(f"{folder}: no model.safetensors (or model.safetensors.index.json)")
    state: dict[str, torch.Tensor] = {}
    for name in files:
        state.update(load_file(str(folder / name)))
    return state


def _load_exact(module: torch.nn.Module, state: dict[str, torch.Tensor], where: Path) -> None:
    """Load every tensor; a key the file lacks is only allowed when it is tied to one it has."""
    missing, unexpected = module.load_state_dict(state, strict=False)
    if unexpected:
        raise CheckpointError(f"{where}: weights {sorted(unexpected)[:5]} do not exist in the model being resumed")
    own = module.state_dict(keep_vars=True)
    loaded = {own[k].data_ptr() for k in state if k in own}
    untied = [k for k in missing if own[k].data_ptr() not in loaded]
    if untied:
        raise CheckpointError(f"{where}: the checkpoint lacks weights {untied[:5]} of the model being resumed")


def _load_adapters(module: torch.nn.Module, folder: Path) -> None:
    """A LoRA policy's checkpoint holds its adapters only (peft's `save_pretrained`); the base is `model.path`."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    path = folder / "adapter_model.safetensors"
    if not path.is_file():
        raise CheckpointError(
            f"{folder}: no adapter_model.safetensors, but model.lora is set; the checkpoint was "
            "written by a run without LoRA (resume it without model.lora)"
        )
    state = load_file(str(path))
    result: Any = set_peft_model_state_dict(module, state)  # peft's named tuple of missing/unexpected keys
    if result.unexpected_keys:
        raise CheckpointError(
            f"{folder}: adapter weights {sorted(result.unexpected_keys)[:5]} do not exist in the "
            "model being resumed (a different model.lora.target_modules?)"
        )
    adapters = [k for k in result.missing_keys if "lora_" in k]
    if adapters:
        raise CheckpointError(
            f"{folder}: the checkpoint lacks adapter weights {adapters[:5]} of the model being "
            "resumed (a different model.lora.target_modules or r?)"
        )


def load_module(module: Any, folder: Path) -> None:
    """Load what `save_module` wrote into the existing module, in place (the optimiser keeps its params).

    `module`: a transformers or peft model, or a value model (`backbone` + `value_head`)."""
    from safetensors.torch import load_file

    from areal_adv.trainer.lm.model import is_lora

    if is_lora(module):
        _load_adapters(module, folder)
    elif (folder / "adapter_model.safetensors").is_file():
        raise CheckpointError(
            f"{folder}: holds LoRA adapters only, but this run has no model.lora; resume it with "
            "the model.lora of the run that wrote it"
        )
    elif hasattr(module, "save_pretrained"):
        _load_exact(module, _read_hf_weights(folder), folder)
    else:
        _load_exact(module.backbone, _read_hf_weights(folder), folder)
        module.value_head.load_state_dict(load_file(str(folder / VALUE_HEAD_FILE)))


def _engines(trainer: CheckpointedTrainer) -> dict[str, Any]:
    """The engines whose weights and AdamW states go into `state/`, by name."""
    engines: dict[str, Any] = {"policy": trainer.engine}
    if trainer.critic is not None:
        engines["critic"] = trainer.critic.engine
    return engines


def _staging(trainer: CheckpointedTrainer, step: int) -> Path:
    """Rank 0's new temporary checkpoint folder, the same path on every rank (a collective)."""
    tmp = staging_folder(checkpoint_root(trainer.run_dir), step) if trainer.ctx.is_main else None
    return Path(all_gather_objects(None if tmp is None else str(tmp), trainer.ctx)[0])


def _reference_checksum(reference: torch.nn.Module | None) -> str | None:
    if reference is None:
        return None
    if reference not in _reference_sums:  # the reference never changes: hash it once
        _reference_sums[reference] = module_checksum(reference)
    return _reference_sums[reference]


# -- whole checkpoints --------------------------------------------------------------------


@dataclass(frozen=True)
class Restored:
    """Where a resumed run continues: the next step to run and the metrics rows before it."""

    step: int
    records: list[dict[str, Any]]
    folder: Path


def _tokenizer(trainer: CheckpointedTrainer) -> Any:
    own = getattr(trainer, "tokenizer", None)
    return own if own is not None else trainer.task.tokenizer


def _check_stage_states_agree(trainer: CheckpointedTrainer) -> None:
    """Rank 0's stage state is what the checkpoint holds for every rank, so the ranks must agree on it."""
    fingerprints = all_gather_objects(trainer.actor.state_fingerprints(), trainer.ctx)
    differing = sorted({name for fp in fingerprints for name in fp if fp.get(name) != fingerprints[0].get(name)})
    if differing:
        raise CheckpointError(
            f"the state of stage(s) {differing} differs between data-parallel ranks; a checkpoint stores rank 0's "
            "copy for all of them, so a stateful stage must reduce its updates over the ranks (see "
            "areal_adv.trainer.ppo.stage_state)"
        )


def save_trainer_checkpoint(trainer: CheckpointedTrainer, step: int, records: list[dict[str, Any]]) -> Path | None:
    """Write `<run_dir>/checkpoints/step_<step>/` after `step` completed steps.

    A collective: every rank contributes its RNG states and writes its shard of
    the weights and AdamW states (`state/`); rank 0 writes the rest and
    publishes the folder, and returns it (the other ranks None).
    """
    rngs = all_gather_objects({**capture_rng(trainer), **task_state(trainer)}, trainer.ctx)  # per rank
    _check_stage_states_agree(trainer)
    tmp = _staging(trainer, step)
    try:
        save_state({name: engine_state(e) for name, e in _engines(trainer).items()}, tmp / STATE_DIR, trainer.ctx)
        if not trainer.ctx.is_main:
            return None
        _write_rank0_files(trainer, tmp, step, rngs, records)
        return publish(tmp, step, _manifest_fields(trainer))
    except BaseException:
        if trainer.ctx.is_main:
            shutil.rmtree(tmp, ignore_errors=True)
        raise


def _write_rank0_files(
    trainer: CheckpointedTrainer, folder: Path, step: int, rngs: list[Any], records: list[dict[str, Any]]
) -> None:
    """The policy as a model folder (from the full copy rank 0 samples with), the trainer state, rows, config."""
    state = {
        "step": step,
        "world_size": trainer.ctx.world_size,
        "rng": rngs,
        "data": data_state(trainer),
        "actor": trainer.actor.state_dict(),
        "reference_sha256": _reference_checksum(trainer.reference),
    }
    save_module(trainer.policy, folder / POLICY_DIR)
    _tokenizer(trainer).save_pretrained(folder / POLICY_DIR)
    torch.save(state, folder / STATE_FILE)
    with open(folder / METRICS_FILE, "w", encoding="utf-8") as fh:
        fh.writelines(json.dumps(row) + "\n" for row in records)
    (folder / "config.yaml").write_text(config_to_yaml(trainer.cfg), encoding="utf-8")


def _manifest_fields(trainer: CheckpointedTrainer) -> dict[str, Any]:
    from areal_adv.trainer.lm.model import is_lora

    cfg = trainer.cfg
    return {
        "experiment_name": cfg.experiment_name,
        "trial_name": cfg.trial_name,
        "world_size": trainer.ctx.world_size,
        "parallel": trainer.engine.parallel,
        "critic": trainer.critic is not None,
        "lora": is_lora(trainer.policy),
    }


def _flat(data: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(data, dict):
        return {prefix[:-1]: data}
    out: dict[str, Any] = {}
    for key, value in data.items():
        out.update(_flat(value, f"{prefix}{key}."))
    return out


def _warn_config_changes(cfg: Any, folder: Path) -> list[str]:
    """Keys whose values differ from the checkpoint's config (ignoring ones that cannot change the result)."""
    from omegaconf import OmegaConf

    path = folder / "config.yaml"
    if not path.is_file():
        return []
    then = _flat(OmegaConf.to_container(OmegaConf.load(path), resolve=True))
    now = _flat(config_to_dict(cfg))
    changed = sorted(k for k in set(then) | set(now) if then.get(k) != now.get(k) and not k.startswith(_FREE_KEYS))
    if changed:
        logger.warning(
            "resuming %s with a changed config (%s): the run continues with the new values, so it "
            "is no longer the uninterrupted run",
            folder,
            ", ".join(changed),
        )
    return changed


def _check_lora(trainer: CheckpointedTrainer, folder: Path, manifest: dict[str, Any]) -> None:
    """A LoRA checkpoint holds the adapters only, a full one every weight: the run must be of the same kind."""
    from areal_adv.trainer.lm.model import is_lora

    if "lora" not in manifest or bool(manifest["lora"]) == is_lora(trainer.policy):
        return
    if manifest["lora"]:
        raise CheckpointError(
            f"{folder}: holds LoRA adapters only, but this run has no model.lora; resume it with "
            "the model.lora of the run that wrote it"
        )
    raise CheckpointError(
        f"{folder}: holds full weights, but model.lora is set; the checkpoint was written by a run without "
        "LoRA (resume it without model.lora)"
    )


def _load_models(trainer: CheckpointedTrainer, folder: Path, manifest: dict[str, Any]) -> None:
    """Every rank reads the pieces of `state/` it holds (any world size, either engine) into its engines."""
    has_critic = bool(manifest.get("critic"))
    if has_critic != (trainer.critic is not None):
        raise CheckpointError(
            f"checkpoint {folder} was written with critic.enabled={has_critic}; set "
            f"critic.enabled={str(has_critic).lower()} to resume it"
        )
    _check_lora(trainer, folder, manifest)
    engines = _engines(trainer)
    states = {name: engine_state(e) for name, e in engines.items()}
    try:
        load_state(states, folder / STATE_DIR, trainer.ctx)
    except ValueError as exc:
        raise CheckpointError(
            f"checkpoint {exc} (a different model or model.lora than the run that wrote it?)"
        ) from None
    for name, engine in engines.items():
        load_engine_state(engine, states[name])


def _read_rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def load_trainer_checkpoint(trainer: CheckpointedTrainer, folder: str | Path) -> Restored:
    """Restore a freshly built trainer to the state saved in `folder`; every rank calls it."""
    folder = Path(folder)
    manifest = read_manifest(folder)
    check_resumable(folder, manifest)
    state = torch.load(folder / STATE_FILE, weights_only=True, map_location="cpu")
    same_size = state["world_size"] == trainer.ctx.world_size
    if trainer.ctx.is_main:
        _warn_config_changes(trainer.cfg, folder)
        if not same_size:
            logger.warning(
                "resuming %s, written by %d rank(s), on %d: weights, AdamW states, prompt position and stage "
                "states are restored; each rank's sampling RNG (and task state) starts as in a fresh run at this size",
                folder,
                state["world_size"],
                trainer.ctx.world_size,
            )
    saved_ref, ref = state.get("reference_sha256"), _reference_checksum(trainer.reference)
    if saved_ref != ref:
        raise CheckpointError(
            f"checkpoint {folder}: the KL reference rebuilt for this run (sha256 {ref}) is not the "
            f"initial policy the run started from ({saved_ref}); seed, model.* and actor.kl_ctl "
            "must be those of the original run"
        )
    _load_models(trainer, folder, manifest)
    if same_size:
        restore_rng(trainer, state["rng"][trainer.ctx.rank])
        restore_task(trainer, state["rng"][trainer.ctx.rank])
    else:  # the prompt RNG is the same on every rank: rank 0's is every rank's
        trainer.rng.setstate(_as_random_state(state["rng"][0]["prompt_rng"]))
    restore_data(trainer, state["data"])
    trainer.actor.load_state_dict(state["actor"])
    records = _read_rows(folder / METRICS_FILE)
    if [r.get("step") for r in records] != list(range(state["step"])):
        logger.warning(
            "checkpoint %s: its metrics rows do not cover steps 0..%d exactly; metrics.jsonl continues "
            "from what is there",
            folder,
            state["step"] - 1,
        )
    return Restored(state["step"], records, folder)


if TYPE_CHECKING:  # the trainer satisfies the interface checkpoints use
    from areal_adv.trainer.run.loop import Trainer

    _trainer_is_checkpointable: type[CheckpointedTrainer] = Trainer
