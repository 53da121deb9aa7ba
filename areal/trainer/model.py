"""Policy, reference and critic models (Hugging Face causal LMs, local only).

The default is a tiny randomly initialised Llama/Qwen2 sized for a 2-core CPU;
`model.path` loads a local checkpoint instead. The critic is the same backbone
family plus a scalar value head, initialised from the checkpoint when given.
"""

from __future__ import annotations

import copy

import torch
from torch import nn
from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, LlamaConfig, PretrainedConfig, PreTrainedModel, Qwen2Config

from areal.api.cli_args import ConfigError
from areal.api.train_args import ModelConfig

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float64": torch.float64}


def tiny_config(cfg: ModelConfig, vocab_size: int, special_ids: dict[str, int]) -> PretrainedConfig:
    """A small architecture config for random init; the task's tokenizer sets the vocab."""
    common = dict(
        vocab_size=vocab_size,
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        num_key_value_heads=cfg.num_heads,
        max_position_embeddings=cfg.max_position_embeddings,
        tie_word_embeddings=False,
        **special_ids,
    )
    config_cls = {"llama": LlamaConfig, "qwen2": Qwen2Config}[cfg.arch]
    config = config_cls(**common)
    config._attn_implementation = cfg.attn_implementation
    return config


def _hf_config(cfg: ModelConfig, vocab_size: int, special_ids: dict[str, int]) -> PretrainedConfig:
    if cfg.path is None:
        return tiny_config(cfg, vocab_size, special_ids)
    config = AutoConfig.from_pretrained(cfg.path, local_files_only=True)
    if config.vocab_size < vocab_size:
        raise ConfigError(
            f"model.path: checkpoint vocab_size={config.vocab_size} is smaller than the task's vocabulary "
            f"({vocab_size} tokens)"
        )
    return config


def build_policy(cfg: ModelConfig, vocab_size: int, special_ids: dict[str, int]) -> PreTrainedModel:
    """The trainable policy (seed torch before calling for a reproducible init)."""
    dtype = _DTYPES[cfg.dtype]
    if cfg.path is None:
        model = AutoModelForCausalLM.from_config(tiny_config(cfg, vocab_size, special_ids)).to(dtype)
    else:
        _hf_config(cfg, vocab_size, special_ids)
        model = AutoModelForCausalLM.from_pretrained(
            cfg.path, local_files_only=True, attn_implementation=cfg.attn_implementation
        ).to(dtype)
    model.train()
    return model


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


def build_critic(cfg: ModelConfig, vocab_size: int, special_ids: dict[str, int]) -> ValueModel:
    """The critic: the policy's architecture (or checkpoint backbone) with a zero-initialised value head."""
    dtype = _DTYPES[cfg.dtype]
    if cfg.path is None:
        backbone = AutoModel.from_config(tiny_config(cfg, vocab_size, special_ids))
    else:
        _hf_config(cfg, vocab_size, special_ids)
        backbone = AutoModel.from_pretrained(
            cfg.path, local_files_only=True, attn_implementation=cfg.attn_implementation
        )
    critic = ValueModel(backbone).to(dtype)
    critic.train()
    return critic
