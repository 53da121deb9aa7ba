"""AReaL's actor config and batches -> the pipeline, and back: the AReaL hook's work, without importing AReaL.

`areal_adv.integrations.areal` binds this to AReaL's own classes and functions (its
`concat_batch`, `split_batch`, `PPOActorConfig`); the code here only reads attributes and
calls what it is given, so the conversion is tested against AReaL 1.0.4 and AReaL 2 alike,
and against plain references of AReaL's code where AReaL is not installed.

The two actor configs share fields with the same names and meanings: 21 with AReaL 1.0.4,
23 with AReaL 2, which added `gae_lambda_kwargs` (the keyword arguments of a λ function named
by `gae_lambda`) and `gae_timestep_unit` (token or turn GAE). `areal_config_to_ours` copies
those the given config has.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from areal_adv.api.cli_args import NormConfig, PPOActorConfig
from areal_adv.api.config_checks import is_real
from areal_adv.utils.data import TrajBatchMeta

__all__ = [
    "AREAL2_FIELDS",
    "OURS_ONLY",
    "SHARED_1_0_4",
    "areal_config_to_ours",
    "compute_in_areal_layout",
    "layout",
    "shared_fields",
]

#: The actor fields AReaL 1.0.4 and we both have, with the same meaning.
SHARED_1_0_4: tuple[str, ...] = tuple(
    """reward_bias reward_scaling reward_clip reward_norm overlong_reward_penalty overlong_tokens
    overlong_penalty_factor max_new_tokens mask_no_eos_with_zero kl_ctl kl_estimator discount gae_lambda
    adv_norm use_decoupled_loss recompute_logprob eps_clip eps_clip_higher c_clip ppo_n_minibatches
    temperature""".split()
)
#: The fields AReaL 2 added to them: a λ function's kwargs, and token or turn GAE.
AREAL2_FIELDS: tuple[str, ...] = ("gae_lambda_kwargs", "gae_timestep_unit")
#: Our advantage fields that no AReaL release has; `AdvPPOActorConfig` declares them.
OURS_ONLY: tuple[str, ...] = ("advantage", "token_rewards_as_adv")


def shared_fields(areal_config: Any) -> tuple[str, ...]:
    """The shared fields that this AReaL actor config (class or instance) has, in our order."""
    names = {f.name for f in dataclasses.fields(areal_config)}
    return tuple(name for name in SHARED_1_0_4 + AREAL2_FIELDS if name in names)


def _norm(value: Any) -> NormConfig | None:
    """AReaL's `NormConfig` (same six fields) as ours; None stays None.

    `group_size` becomes None ("not chosen"): the hook always hands the pipeline the groups
    AReaL's `concat_batch` recorded, so the fixed size is never used (AReaL 2 does not use it
    either), and its default 1 would only raise the warning meant for a batch without groups.
    A prompt that really has one rollout is still warned about when its batch is computed.
    """
    if value is None:
        return None
    fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(NormConfig) if f.name != "group_size"}
    return NormConfig(**fields, group_size=None)


def areal_config_to_ours(config: Any) -> PPOActorConfig:
    """Our `PPOActorConfig` from AReaL's actor config (or `AdvPPOActorConfig`): shared fields by name.

    A plain AReaL config gets our defaults for `OURS_ONLY`, which reproduce AReaL's own
    computation. AReaL ignores `gae_lambda_kwargs` when `gae_lambda` is a number, where ours
    refuses them, so they are dropped then. Errors name our field (`PPOActorConfig.<field>`),
    as for our own YAML.
    """
    values: dict[str, Any] = {name: getattr(config, name) for name in shared_fields(config)}
    values["reward_norm"] = _norm(values["reward_norm"])
    values["adv_norm"] = _norm(values["adv_norm"])
    if is_real(values["gae_lambda"]):
        values.pop("gae_lambda_kwargs", None)
    elif isinstance(values.get("gae_lambda_kwargs"), Mapping):
        values["gae_lambda_kwargs"] = dict(values["gae_lambda_kwargs"])  # OmegaConf's DictConfig -> dict
    extra = ("gae_timestep_unit", *OURS_ONLY)  # on AReaL 1.0.4 `gae_timestep_unit` comes from our subclass
    values.update({name: getattr(config, name) for name in extra if name not in values and hasattr(config, name)})
    return PPOActorConfig(**values)


def layout(meta: Any) -> TrajBatchMeta:
    """Our batch metadata from AReaL's (same name and first fields): rows per input dict, their lengths."""
    return TrajBatchMeta(meta.n_trajs, tuple(meta.traj_group_sizes), tuple(meta.traj_seqlens))


def compute_in_areal_layout(
    actor: Any,
    data: list[dict[str, Any]],
    *,
    concat_batch: Callable[[list[dict[str, Any]]], tuple[dict[str, Any], Any]],
    split_batch: Callable[[dict[str, Any], Any], list[dict[str, Any]]],
    observe: Callable[[dict[str, Any], TrajBatchMeta, dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """AReaL's `compute_advantages(data)` computed by our `actor` (a `PPOActor`): one dict per group in and out.

    What AReaL's method does around its computation, with AReaL's own `concat_batch` and
    `split_batch`: concatenate the groups (its padding gives every tensor 0 past a row's end,
    `turn_ids` included, which the pipeline does not read off generated tokens), compute with
    the group layout `concat_batch` recorded, split back. `observe(batch, meta, result)` sees
    the computed batch (the shadow diagnostics).
    """
    batched, areal_meta = concat_batch(data)
    meta = layout(areal_meta)
    result = actor.compute_advantages(batched, meta)
    if observe is not None:
        observe(batched, meta, result)
    if batched.get("ref_logp") is not None:
        # AReaL's method multiplies the batch's `ref_logp` by the (shifted) loss mask in place, so AReaL code
        # after it reads masked values; the same values here, in a new tensor (the caller's stays as it was).
        result["ref_logp"] = batched["ref_logp"] * result["loss_mask"]
    return split_batch(result, areal_meta)
