"""Policy, reference and critic models (Hugging Face causal LMs, local only).

The default is a tiny randomly initialised Llama/Qwen2 sized for a 2-core CPU,
its vocabulary the tiny tokenizer's; `model.path` loads a local checkpoint
instead (`model.gguf_file`: from a GGUF file, dequantised by transformers),
used with its own tokenizer. The critic is the same backbone family plus a
scalar value head, initialised from the checkpoint when given.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn
from transformers import AutoModel, AutoModelForCausalLM, LlamaConfig, PretrainedConfig, PreTrainedModel, Qwen2Config

from areal_adv.api.config_checks import ConfigError
from areal_adv.api.extras import install_hint
from areal_adv.api.train_args import LoraConfig, ModelConfig

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float64": torch.float64}


def special_ids(tokenizer: Any) -> dict[str, int]:
    """The tokenizer's pad/bos/eos ids for a random-init model config."""
    return {
        "pad_token_id": tokenizer.pad_token_id,
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
    }


def tiny_config(cfg: ModelConfig, vocab_size: int, special: dict[str, int]) -> PretrainedConfig:
    """A small architecture config for random init; the tiny tokenizer sets the vocab."""
    arch = cfg.architecture()
    common = dict(
        vocab_size=vocab_size,
        hidden_size=arch["hidden_size"],
        intermediate_size=arch["intermediate_size"],
        num_hidden_layers=arch["num_layers"],
        num_attention_heads=arch["num_heads"],
        num_key_value_heads=arch["num_heads"],
        max_position_embeddings=arch["max_position_embeddings"],
        tie_word_embeddings=False,
        **special,
    )
    config_cls = {"llama": LlamaConfig, "qwen2": Qwen2Config}[arch["arch"]]
    config = config_cls(**common)
    config._attn_implementation = cfg.attn_implementation
    return config


def _load(auto_cls: Any, cfg: ModelConfig) -> PreTrainedModel:
    """`from_pretrained` from local files only, naming the field when it fails."""
    extra = {"gguf_file": cfg.gguf_file} if cfg.gguf_file else {}
    try:
        return auto_cls.from_pretrained(
            cfg.path,
            local_files_only=True,
            attn_implementation=cfg.attn_implementation,
            dtype=_DTYPES[cfg.dtype],
            **extra,
        )
    except (OSError, ValueError, ImportError, KeyError) as exc:
        where = f"model.gguf_file={cfg.gguf_file!r}" if cfg.gguf_file else f"model.path={cfg.path!r}"
        hint = f" (GGUF files need the gguf package: {install_hint('gguf')})" if cfg.gguf_file else ""
        raise ConfigError(f"{where}: cannot load the checkpoint ({type(exc).__name__}: {exc}){hint}") from exc


def _check_vocab(model: PreTrainedModel, vocab_size: int, cfg: ModelConfig) -> None:
    rows = model.get_input_embeddings().num_embeddings
    if vocab_size > rows:
        raise ConfigError(
            f"model.path={cfg.path!r}: the tokenizer has {vocab_size} tokens but the model's "
            f"embedding has only {rows} rows; the checkpoint and its tokenizer do not match"
        )


def build_policy(cfg: ModelConfig, vocab_size: int, special: dict[str, int]) -> PreTrainedModel:
    """The trainable policy (seed torch before calling for a reproducible init).

    `vocab_size` / `special` come from the tokenizer (`len(tok)`, `special_ids(tok)`):
    they size a random-init model and are checked against a checkpoint.
    """
    if cfg.path is None:
        model = AutoModelForCausalLM.from_config(tiny_config(cfg, vocab_size, special)).to(_DTYPES[cfg.dtype])
    else:
        model = _load(AutoModelForCausalLM, cfg)
        _check_vocab(model, vocab_size, cfg)
    if cfg.lora is not None:
        model = with_lora(model, cfg.lora)
    model.train()
    return model


def with_lora(model: PreTrainedModel, lora: LoraConfig) -> nn.Module:
    """`model` wrapped by peft with LoRA adapters: only the adapters require gradients.

    peft initialises B to zero, so the wrapped model starts as `model`; with
    `disable_adapter()` it *is* `model` again, which makes it the KL
    reference without a second copy of the weights.
    """
    try:
        from peft import LoraConfig as PeftLoraConfig
        from peft import get_peft_model
    except ImportError as exc:
        raise ConfigError(f"model.lora: needs the peft package ({exc}); {install_hint('lora')}") from exc
    config = PeftLoraConfig(
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=lora.target_modules,
        task_type="CAUSAL_LM",
    )
    try:
        return get_peft_model(model, config)
    except ValueError as exc:  # e.g. target modules the model does not have
        raise ConfigError(f"model.lora.target_modules: {exc}") from exc


def is_lora(model: nn.Module) -> bool:
    """Whether `model` is a peft model with adapters (checkpoints save and load only the adapters)."""
    return callable(getattr(model, "disable_adapter", None)) and hasattr(model, "peft_config")


def frozen_copy(model: nn.Module) -> nn.Module:
    """The reference policy: the initial policy's weights, never updated."""
    ref = copy.deepcopy(model)
    ref.eval()
    ref.requires_grad_(False)
    return ref


class ValueModel(nn.Module):
    """A transformer backbone plus a linear head giving one value per position.

    The value at position t is read from the hidden state after token t, i.e.
    the value of the state before predicting token t+1 (next-token aligned).
    """

    def __init__(self, backbone: PreTrainedModel) -> None:
        super().__init__()
        self.backbone = backbone
        self.value_head = nn.Linear(backbone.config.hidden_size, 1)
        nn.init.zeros_(self.value_head.weight)
        nn.init.zeros_(self.value_head.bias)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden = self.backbone(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        # a fresh tensor, not a view: FSDP2 warns about (and cannot hook in-place ops on) view outputs
        return self.value_head(hidden.to(self.value_head.weight.dtype)).squeeze(-1).clone()


def build_critic(cfg: ModelConfig, vocab_size: int, special: dict[str, int]) -> ValueModel:
    """The critic: the policy's architecture (or checkpoint backbone) with a zero-initialised value head."""
    if cfg.path is None:
        backbone = AutoModel.from_config(tiny_config(cfg, vocab_size, special))
    else:
        backbone = _load(AutoModel, cfg)
    critic = ValueModel(backbone).to(_DTYPES[cfg.dtype])
    critic.train()
    return critic
