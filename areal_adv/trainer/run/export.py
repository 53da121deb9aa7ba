"""`areal-adv export RUN_DIR OUT_DIR [--step N]`: a run's trained policy as a plain model folder.

The output is what `save_pretrained` writes (weights, config, generation
config) plus the run's tokenizer and its chat template, so
`AutoModelForCausalLM.from_pretrained(OUT_DIR)` and `AutoTokenizer.from_pretrained(OUT_DIR)`
(or vLLM) load it without areal-adv. A LoRA run's checkpoint holds only the
adapters: the base is rebuilt as the run built it (`model.path`, or the seeded
random model), the adapters are loaded and merged into the base weights
(peft's `merge_and_unload`), and the merged model is written.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from areal_adv.api.cli_args import ConfigError
from areal_adv.api.config_checks import shown_path
from areal_adv.api.train_args import ModelConfig
from areal_adv.trainer.lm.model import build_policy, special_ids
from areal_adv.trainer.run.trainer_state import POLICY_DIR, load_module, no_hf_progress_bars
from areal_adv.utils.checkpoint_folders import (
    CheckpointError,
    checkpoint_root,
    latest_checkpoint,
    read_manifest,
    step_folder,
)
from areal_adv.utils.file_modes import normal_mode


@dataclass(frozen=True)
class Exported:
    """Where the model went, from which checkpoint, and whether adapters were merged."""

    out_dir: Path
    checkpoint: Path
    merged_lora: bool


def find_checkpoint(run_dir: Path, step: int | None) -> Path:
    """The run's checkpoint at `step` (None: the newest); RUN_DIR may also be a checkpoint folder itself."""
    if not run_dir.exists():
        raise CheckpointError(
            f"{shown_path(str(run_dir))}: does not exist; expected a run directory or one of its checkpoint folders"
        )
    if (run_dir / POLICY_DIR).is_dir() and step is None:
        read_manifest(run_dir)  # a complete checkpoint, not a torn save
        return run_dir
    root = checkpoint_root(run_dir)
    if not root.is_dir():
        raise CheckpointError(
            f"{run_dir}: no checkpoints/ folder; expected a run directory (with "
            "train.save_every set) or a checkpoint folder"
        )
    folder = latest_checkpoint(root) if step is None else step_folder(root, step)
    if folder is None or not folder.is_dir():
        raise CheckpointError(
            f"{run_dir}: no checkpoint" + ("" if step is None else f" at step {step}") + f" in {root}"
        )
    read_manifest(folder)
    return folder


def _model_config(checkpoint: Path) -> tuple[ModelConfig, int]:
    """The `model:` section and seed of the run that wrote `checkpoint` (the rest of its config is not needed)."""
    from omegaconf import OmegaConf

    path = checkpoint / "config.yaml"
    if not path.is_file():
        raise CheckpointError(f"checkpoint {checkpoint}: no config.yaml, so its model settings are unknown")
    saved = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
    # a relative model.path resolves against the working directory, as in the run
    return ModelConfig(**dict(saved.get("model") or {})), int(saved.get("seed", 1))


def _policy(checkpoint: Path) -> tuple[torch.nn.Module, object, bool]:
    """The checkpoint's policy (LoRA: the rebuilt base with its adapters) and its tokenizer."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    policy_dir = checkpoint / POLICY_DIR
    tokenizer = AutoTokenizer.from_pretrained(policy_dir, local_files_only=True)
    model_cfg, seed = _model_config(checkpoint)
    if model_cfg.lora is None:
        model = AutoModelForCausalLM.from_pretrained(
            policy_dir, local_files_only=True, dtype=getattr(torch, model_cfg.dtype)
        )
        return model, tokenizer, False
    torch.manual_seed(seed)  # the random base of a `model.path: null` run, as the trainer seeded it
    model = build_policy(model_cfg, len(tokenizer), special_ids(tokenizer))
    load_module(model, policy_dir)
    return model.merge_and_unload(), tokenizer, True


def export_run(run_dir: str | Path, out_dir: str | Path, step: int | None = None) -> Exported:
    """Write the policy of `run_dir`'s checkpoint (`step`, or the newest) to `out_dir` as a model folder."""
    out = Path(out_dir)
    if out.exists() and any(out.iterdir()):
        raise FileExistsError(f"{out}: exists and is not empty; export writes into a new or empty folder")
    checkpoint = find_checkpoint(Path(run_dir), step)
    try:
        model, tokenizer, merged = _policy(checkpoint)
    except (OSError, ValueError) as exc:
        if isinstance(exc, ConfigError):
            raise
        raise CheckpointError(f"{checkpoint}: cannot rebuild its policy ({type(exc).__name__}: {exc})") from exc
    model.eval()
    with no_hf_progress_bars():
        model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    normal_mode(out)  # safetensors writes the weights owner-only; the folder's other files follow the umask
    return Exported(out, checkpoint, merged)
