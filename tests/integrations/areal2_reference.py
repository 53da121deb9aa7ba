"""AReaL 2's advantage computation and batch layout as plain loops, for tests that run without AReaL.

Written from AReaL's source at commit cbff54d (2026-08-22, version 2.0.0; read, not copied):
`areal/trainer/ppo/actor.py` (`PPOActor._compute_advantages`, `_compute_gae_lambda`),
`areal/trainer/ppo/gae.py` (token and turn GAE, the λ context), `areal/trainer/ppo/lambda_fn.py`
(the built-in λ functions), `areal/utils/data.py` (`concat_padded_tensors`, `concat_batch`,
`split_batch`, `Normalization`, `KLEstimator`), `areal/utils/functional/functional.py`
(`reward_overlong_penalty`) and the episode layouts of `areal/workflow/rlvr.py` and
`areal/workflow/multi_turn.py`. Every quantity is computed element by element in Python
floats; the batch helpers keep AReaL's dtypes and padding.

tests/integrations/areal_checks.py runs this reference against the real AReaL source too (the
opt-in `AREAL_SOURCE` test), so the reference is itself checked against AReaL.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

# --- configs with AReaL 2's field names and defaults ------------------------------------------------


@dataclass
class NormConfig:
    mean_level: str | None = "batch"
    mean_leave1out: bool = False
    std_level: str | None = "batch"
    std_unbiased: bool = True
    eps: float = 1e-5
    group_size: int = 1


@dataclass
class ActorConfig:
    """The fields of AReaL 2's `PPOActorConfig` that its advantage computation reads, with its defaults."""

    reward_bias: float = 0.0
    reward_scaling: float = 1.0
    reward_clip: float = 20.0
    reward_norm: NormConfig | None = None
    overlong_reward_penalty: bool = False
    overlong_tokens: int | None = None
    overlong_penalty_factor: float | None = None
    max_new_tokens: int = 1024
    mask_no_eos_with_zero: bool = False
    kl_ctl: float = 0.1
    kl_estimator: str = "k1"
    discount: float = 1.0
    gae_lambda: float | str = 1.0
    gae_lambda_kwargs: dict[str, Any] = field(default_factory=dict)
    gae_timestep_unit: str = "token"
    adv_norm: NormConfig | None = None
    use_decoupled_loss: bool = False
    recompute_logprob: bool = False
    eps_clip: float = 0.2
    eps_clip_higher: float | None = None
    c_clip: float | None = None
    ppo_n_minibatches: int = 4
    temperature: float = 1.0


#: AReaL 2's paths of its built-in λ functions (beside AReaL 2 they are AReaL's; without it, ours).
AREAL_VAPO = "areal.trainer.ppo.lambda_fn.vapo_length_adaptive_gae"
AREAL_RELATIVE = "areal.trainer.ppo.lambda_fn.relative_position_gae_lambda"
_GROUP = {"mean_level": "group", "std_level": "group"}

#: name -> (actor config fields, with norms as dicts; the per-token fields its batches carry). The AReaL
#: hook is compared on each, here against this reference and in the opt-in test against AReaL itself.
CASES: dict[str, tuple[dict[str, Any], dict[str, bool]]] = {
    "default": ({}, {}),
    "grpo": ({"kl_ctl": 0.0, "reward_norm": _GROUP, "adv_norm": {}}, {}),
    "rloo_like": (
        {"kl_ctl": 0.0, "reward_norm": {"mean_level": "group", "mean_leave1out": True, "std_level": None}},
        {},
    ),
    "group_adv_norm": ({"kl_ctl": 0.0, "adv_norm": {**_GROUP, "std_unbiased": False}}, {}),
    "ppo_critic_k3": (
        {"kl_estimator": "k3", "discount": 0.99, "gae_lambda": 0.95, "adv_norm": {}},
        {"values": True, "ref": True},
    ),
    "turn_gae_critic": (
        {"gae_timestep_unit": "turn", "discount": 0.9, "gae_lambda": 0.95, "kl_ctl": 0.05, "kl_estimator": "k2"},
        {"values": True, "ref": True},
    ),
    "token_vapo": ({"gae_lambda": AREAL_VAPO, "gae_lambda_kwargs": {"alpha": 0.3}, "discount": 0.97}, {"values": True}),
    "turn_relative_position": (
        {"gae_timestep_unit": "turn", "gae_lambda": AREAL_RELATIVE, "gae_lambda_kwargs": {"q": 0.4}},
        {"values": True, "ref": True},
    ),
    # a λ function written for AReaL (it indexes the context) in ours, and ours (two ways) in AReaL's
    "areal_style_function": (
        {"gae_lambda": "areal2_reference.vapo_length_adaptive_gae", "gae_lambda_kwargs": {"alpha": 0.2}},
        {"values": True},
    ),
    "ours_in_areal": (
        {
            "gae_lambda": "areal_adv.trainer.ppo.estimators.lambda_fn.vapo_length_adaptive",
            "gae_lambda_kwargs": {"alpha": 0.2},
        },
        {"values": True},
    ),
    "attribute_style_function": (
        {
            "gae_timestep_unit": "turn",
            "gae_lambda": "areal_check_plugins.attribute_style_lambda",
            "gae_lambda_kwargs": {"q": 0.6},
        },
        {"values": True},
    ),
    "overlong_and_no_eos": (
        {
            "overlong_reward_penalty": True,
            "overlong_tokens": 2,
            "overlong_penalty_factor": 0.5,
            "max_new_tokens": 6,
            "mask_no_eos_with_zero": True,
            "reward_norm": _GROUP,
        },
        {},
    ),
    "recompute_logprob": ({"recompute_logprob": True}, {"prox": True, "ref": True}),
    "decoupled_loss": ({"use_decoupled_loss": True, "recompute_logprob": True}, {"prox": True}),
    # AReaL ignores kwargs beside a number; ours would refuse them
    "stale_lambda_kwargs": (
        {"gae_lambda": 0.9, "gae_lambda_kwargs": {"alpha": 0.1}, "discount": 0.95},
        {"values": True},
    ),
}


def actor_config(
    config_cls: Callable[..., Any], norm_cls: Callable[..., Any], fields: dict[str, Any], **extra: Any
) -> Any:
    """`config_cls(**fields, **extra)` with the norm dicts built as `norm_cls` (the reference's or AReaL's)."""
    built = {k: norm_cls(**v) if k in ("reward_norm", "adv_norm") and v is not None else v for k, v in fields.items()}
    return config_cls(**built, **extra)


# --- the built-in λ functions (one row at a time) ---------------------------------------------------


def vapo_length_adaptive_gae(context: dict[str, torch.Tensor], *, alpha: float) -> torch.Tensor:
    """λ = max(0, 1 - 1 / (alpha·L)); 0 for a row without steps."""
    out = [0.0 if n <= 0 else max(0.0, 1.0 - 1.0 / (alpha * n)) for n in context["timestep_lengths"].tolist()]
    return torch.tensor(out, dtype=torch.float32)


def relative_position_gae_lambda(context: dict[str, torch.Tensor], *, q: float) -> torch.Tensor:
    """λ = q ** (1 / (L - 1)); 1 for one step, 0 for none."""
    out = [0.0 if n <= 0 else 1.0 if n == 1 else q ** (1.0 / (n - 1)) for n in context["timestep_lengths"].tolist()]
    return torch.tensor(out, dtype=torch.float32)


# --- batches as AReaL 2's workflows build them -------------------------------------------------------


def episode(gen: torch.Generator, turns: int, *, max_new: int = 5) -> dict[str, torch.Tensor]:
    """One rollout, batch dim 1: per turn an input segment (prompt or environment reply) then the model's reply.

    `turn_ids` is -1 on input tokens and the turn index on generated ones, `attention_mask` bool,
    ids and masks int32, one float reward (`rlvr.py` for one turn, `multi_turn.py` for more).
    """
    seq: list[int] = []
    logprobs: list[float] = []
    loss_mask: list[int] = []
    turn_ids: list[int] = []
    for turn in range(turns):
        n_in = int(torch.randint(1, 4, (1,), generator=gen))
        n_out = int(torch.randint(1, max_new + 1, (1,), generator=gen))
        seq += torch.randint(1, 100, (n_in + n_out,), generator=gen).tolist()
        logprobs += [0.0] * n_in + (-3 * torch.rand(n_out, generator=gen)).tolist()
        loss_mask += [0] * n_in + [1] * n_out
        turn_ids += [-1] * n_in + [turn] * n_out
    reward = float(torch.randint(0, 2, (1,), generator=gen)) * (0.5 + float(torch.rand(1, generator=gen)))
    res = {
        "input_ids": torch.tensor(seq, dtype=torch.int32),
        "loss_mask": torch.tensor(loss_mask, dtype=torch.int32),
        "logprobs": torch.tensor(logprobs, dtype=torch.float32),
        "versions": torch.tensor([v if m else -1 for v, m in zip([3] * len(seq), loss_mask)], dtype=torch.int32),
        "turn_ids": torch.tensor(turn_ids, dtype=torch.int32),
        "attention_mask": torch.ones(len(seq), dtype=torch.bool),
        "rewards": torch.tensor(reward, dtype=torch.float32),
    }
    return {k: v.unsqueeze(0) for k, v in res.items()}


def group(
    gen: torch.Generator,
    n: int,
    *,
    turns: int,
    values: bool = False,
    ref: bool = False,
    prox: bool = False,
    join: Callable[[list[dict[str, Any]]], dict[str, Any]] | None = None,
) -> dict[str, torch.Tensor]:
    """One prompt's `n` episodes joined by `concat_padded_tensors` (this module's, or AReaL's own as `join`), as
    AReaL's rollout engine joins them, plus the per-token fields the trainer adds before computing advantages
    (critic values, reference and recomputed log-probs: aligned, one per position of the group's width)."""
    out = (join or concat_padded_tensors)([episode(gen, turns) for _ in range(n)])
    shape = out["input_ids"].shape
    attn = out["attention_mask"].float()
    if values:
        out["values"] = torch.randn(shape, generator=gen) * attn
    if ref:
        out["ref_logp"] = -3 * torch.rand(shape, generator=gen) * attn
    if prox:
        out["prox_logp"] = -3 * torch.rand(shape, generator=gen) * attn
    return out


# --- AReaL 2's batch helpers --------------------------------------------------------------------------


@dataclass
class TrajBatchMeta:
    n_trajs: int
    traj_group_sizes: list[int]
    traj_seqlens: list[int]


def concat_padded_tensors(dicts: list[dict[str, Any]]) -> dict[str, Any]:
    """Every tensor right-padded with 0 (along every non-batch dim) to the widest, then stacked along rows."""
    if len(dicts) == 1:
        return dict(dicts[0])
    out: dict[str, Any] = {}
    for key, first in dicts[0].items():
        values = [d[key] for d in dicts]
        if isinstance(first, torch.Tensor) and first.ndim >= 2:
            width = max(v.shape[1] for v in values)
            padded = []
            for v in values:
                pad = torch.zeros((v.shape[0], width), dtype=v.dtype)
                pad[:, : v.shape[1]] = v
                padded.append(pad)
            out[key] = torch.cat(padded)
        elif isinstance(first, torch.Tensor):
            out[key] = torch.cat(values)
        elif isinstance(first, list):
            out[key] = [item for v in values for item in v]
        else:
            out[key] = first
    return out


def concat_batch(data: list[dict[str, Any]]) -> tuple[dict[str, Any], TrajBatchMeta]:
    sizes = [next(v for v in d.values() if isinstance(v, torch.Tensor)).shape[0] for d in data]
    meta = TrajBatchMeta(len(data), sizes, [d["attention_mask"].shape[-1] for d in data])
    return concat_padded_tensors(data), meta


def split_batch(result: dict[str, Any], meta: TrajBatchMeta) -> list[dict[str, Any]]:
    """Rows back to their groups, each [B, T] tensor cut back to its group's own width."""
    total = sum(meta.traj_group_sizes)
    out: list[dict[str, Any]] = [{} for _ in range(meta.n_trajs)]
    for key, value in result.items():
        if isinstance(value, torch.Tensor) and value.shape[0] == total:
            for i, part in enumerate(value.split(meta.traj_group_sizes)):
                out[i][key] = part[..., : meta.traj_seqlens[i]] if part.ndim >= 2 else part
        else:
            for i in range(meta.n_trajs):
                out[i][key] = copy.deepcopy(value)
    return out


# --- AReaL 2's Normalization ----------------------------------------------------------------------------


def _cells(x: torch.Tensor, mask: torch.Tensor | None, rows: range) -> list[tuple[int, int, float, float]]:
    """(row, column, value, weight) of every element of `rows` (weight: the mask, 1 without one)."""
    cols = range(x.shape[1]) if x.ndim == 2 else range(1)
    out = []
    for b in rows:
        for t in cols:
            value = float(x[b, t]) if x.ndim == 2 else float(x[b])
            weight = 1.0 if mask is None else float(mask[b, t])
            out.append((b, t, value, weight))
    return out


def _means(cells: list[tuple[int, int, float, float]], leave_one_out: bool) -> dict[tuple[int, int], float]:
    """`Normalization._compute_mean` per element: the weighted mean, or leave-one-out on weighted elements."""
    n = sum(w for *_, w in cells)
    total = sum(v * w for _, _, v, w in cells)
    if leave_one_out:
        if n <= 1:
            return {(b, t): 0.0 for b, t, _, _ in cells}
        return {(b, t): (total - v * w) / max(n - w, 1.0) if w > 0 else total / n for b, t, v, w in cells}
    mean = 0.0 if n == 0 else total / n
    return {(b, t): mean for b, t, _, _ in cells}


def _std(cells: list[tuple[int, int, float, float]], means: dict, unbiased: bool) -> float:
    """`Normalization._compute_std` given the (per-element) means: deviations on weighted elements only."""
    n = sum(w for *_, w in cells)
    squares = sum((v * w - means[(b, t)] * w) ** 2 for b, t, v, w in cells)
    if unbiased:
        return 1.0 if n <= 1 else math.sqrt(squares / (n - 1))
    return 1.0 if n == 0 else math.sqrt(squares / n)


def normalize(config: NormConfig, x: torch.Tensor, mask: torch.Tensor | None, group_sizes: list[int]) -> torch.Tensor:
    """AReaL 2's `Normalization.__call__` with the batch's real group sizes, element by element."""
    if mask is not None and float(mask.sum()) == 0:
        return x.float()
    starts = [sum(group_sizes[:i]) for i in range(len(group_sizes))]
    groups = [range(s, s + n) for s, n in zip(starts, group_sizes)]
    everything = range(x.shape[0])
    means: dict[tuple[int, int], float] = {}
    if config.mean_level == "batch":
        means = _means(_cells(x, mask, everything), config.mean_leave1out)
    for rows in groups if config.mean_level == "group" else ():
        cells = _cells(x, mask, rows)
        if len(rows) == 1 and config.mean_leave1out:
            means.update({(b, t): v for b, t, v, _ in cells})  # a singleton is its own baseline
        else:
            means.update(_means(cells, config.mean_leave1out))
    stds: dict[int, float] = {}
    if config.std_level == "batch":
        all_cells = _cells(x, mask, everything)
        stds = dict.fromkeys(everything, _std(all_cells, _fill(means, all_cells), config.std_unbiased))
    for rows in groups if config.std_level == "group" else ():
        cells = _cells(x, mask, rows)
        one = 1.0 if len(rows) == 1 and config.std_unbiased else _std(cells, _fill(means, cells), config.std_unbiased)
        stds.update(dict.fromkeys(rows, one))
    eps = config.eps if config.std_level is not None else 0.0
    out = torch.zeros(x.shape, dtype=torch.float64)
    for b, t, v, w in _cells(x, mask, everything):
        centred = (v - means.get((b, t), 0.0)) * (w if mask is not None else 1.0)
        value = centred / (stds.get(b, 1.0) + eps)
        if x.ndim == 2:
            out[b, t] = value
        else:
            out[b] = value
    return out.float()


def _fill(means: dict, cells: list) -> dict:
    """Means for every cell (0 where the mean level is none)."""
    return {(b, t): means.get((b, t), 0.0) for b, t, _, _ in cells}


# --- AReaL 2's KL estimators and GAE ----------------------------------------------------------------------


def kl(estimator: str, logp: float, ref: float) -> float:
    """k1, k2 or k3 of log π - log π_ref, clamped to [-10, 10] (`KLEstimator`)."""
    d = logp - ref
    value = d if estimator == "k1" else d * d / 2 if estimator == "k2" else math.exp(-d) - 1 + d
    return min(max(value, -10.0), 10.0)


def token_gae_row(r: list[float], v: list[float], m: list[float], boot: float, coef: float, g: float) -> list[float]:
    """Each generated token a step, masked positions carry the running value and advantage through."""
    n = len(r)
    adv = [0.0] * n
    next_value, last = boot, 0.0
    for t in reversed(range(n - 1)):
        new = r[t] + g * next_value - v[t] + coef * last
        if m[t]:
            next_value, last = v[t], new
        adv[t] = last
    return adv


def turn_gae_row(
    r: list[float], v: list[float], m: list[float], ids: list[int], boot: float, coef: float, g: float
) -> tuple[list[float], list[float]]:
    """Each turn (by id, over the active tokens) a step: summed rewards, the value at its first token;
    (advantages, returns) per token, the values off the active tokens."""
    turn_reward: dict[int, float] = {}
    first: dict[int, int] = {}
    for t, (rt, mt, k) in enumerate(zip(r, m, ids)):
        if mt:
            turn_reward[k] = turn_reward.get(k, 0.0) + rt
            first.setdefault(k, t)
    turn_adv: dict[int, float] = {}
    next_value, last = boot, 0.0
    for k in sorted(first, reverse=True):
        new = turn_reward[k] + g * next_value - v[first[k]] + coef * last
        turn_adv[k], next_value, last = new, v[first[k]], new
    adv = [turn_adv[k] if mt else 0.0 for mt, k in zip(m, ids)]
    ret = [turn_adv[k] + v[first[k]] if mt else vt for vt, mt, k in zip(v, m, ids)]
    return adv, ret


# --- AReaL 2's PPOActor.compute_advantages --------------------------------------------------------------


def _lambda_context(mask: torch.Tensor, turn_ids: torch.Tensor | None, unit: str) -> dict[str, torch.Tensor]:
    """`_build_gae_lambda_context`: generated tokens and distinct turn ids per row (0 without turn ids)."""
    tokens = torch.tensor([int(sum(1 for w in row if w)) for row in mask.tolist()])
    if turn_ids is None:
        turns = torch.zeros_like(tokens)
    else:
        turns = torch.tensor(
            [len({k for k, w in zip(ids, row) if w}) for ids, row in zip(turn_ids.tolist(), mask.tolist())]
        )
    return {
        "effective_token_lengths": tokens,
        "turn_counts": turns,
        "timestep_lengths": tokens if unit == "token" else turns,
    }


def _lambdas(config: ActorConfig, mask: torch.Tensor, turn_ids: torch.Tensor | None, resolve: Callable) -> list[float]:
    if isinstance(config.gae_lambda, (int, float)):
        return [float(config.gae_lambda)] * mask.shape[0]
    fn = resolve(config.gae_lambda)
    return fn(_lambda_context(mask, turn_ids, config.gae_timestep_unit), **config.gae_lambda_kwargs).tolist()


def _scores(config: ActorConfig, data: dict[str, torch.Tensor], group_sizes: list[int]) -> torch.Tensor:
    """Length penalty (on the batch's rewards, as AReaL leaves them), bias, scaling, clip, reward norm."""
    rewards = data["rewards"]
    if config.overlong_reward_penalty:
        expected = config.max_new_tokens - config.overlong_tokens
        for b, length in enumerate(data["loss_mask"].sum(-1).tolist()):
            penalty = min(-(length - expected) / config.overlong_tokens * config.overlong_penalty_factor, 0.0)
            rewards[b] = float(rewards[b]) + penalty
    score = torch.tensor(
        [
            min(max((float(r) + config.reward_bias) * config.reward_scaling, -config.reward_clip), config.reward_clip)
            for r in rewards.tolist()
        ]
    )
    return normalize(config.reward_norm, score, None, group_sizes) if config.reward_norm else score


def compute_advantages(
    config: ActorConfig, data: list[dict[str, Any]], resolve: Callable[[str], Callable] | None = None
) -> list[dict[str, Any]]:
    """AReaL 2's `PPOActor.compute_advantages(data)` on copies of `data`: one dict per group in and out.

    `resolve` imports a λ function path (AReaL's `import_from_string`)."""
    batch, meta = concat_batch(copy.deepcopy(data))
    n_rows, n_pos = batch["input_ids"].shape
    score = _scores(config, batch, meta.traj_group_sizes)
    mask = torch.roll(batch["loss_mask"].float(), -1, dims=-1)
    turn_ids = batch.get("turn_ids")
    if turn_ids is not None:
        turn_ids = torch.roll(turn_ids, -1, dims=-1)
        turn_ids[:, -1] = -1
    if config.recompute_logprob and not config.use_decoupled_loss:
        old = batch["prox_logp"]
        batch["logprobs"] = old
    else:
        old = torch.roll(batch["logprobs"], -1, dims=-1)
        if not config.use_decoupled_loss:
            batch["prox_logp"] = old
    ref = batch.get("ref_logp")
    ref = torch.zeros_like(old) if ref is None else ref
    ref *= mask  # in place, as AReaL leaves the batch's reference log-probs
    old *= mask
    seqlens = batch["attention_mask"].long().sum(-1).tolist()
    lam = _lambdas(config, mask, turn_ids, resolve or _no_resolver)
    values = batch.get("values", torch.zeros(n_rows, n_pos))
    fields = {k: torch.zeros(n_rows, n_pos) for k in ("kl_rewards", "tot_rewards", "advantages", "returns")}
    for b in range(n_rows):
        _row(config, b, fields, old, ref, mask, values, turn_ids, seqlens[b], n_pos, float(score[b]), lam[b])
    advantages = fields["advantages"]
    if config.adv_norm is not None:
        advantages = normalize(config.adv_norm, advantages, mask, meta.traj_group_sizes)
    batch.update(fields, advantages=advantages, loss_mask=mask, logprobs=old)
    return split_batch(batch, meta)


def _no_resolver(path: str) -> Callable:
    raise AssertionError(f"a λ function path ({path}) needs `resolve`")


def _row(
    config: ActorConfig, b: int, fields: dict, old, ref, mask, values, turn_ids, seqlen: int, n_pos: int, score, lam
) -> None:
    """One row: KL rewards, the outcome placed at seqlen-2, GAE, the turn KL added to the advantages."""
    kl_r = [-config.kl_ctl * kl(config.kl_estimator, float(old[b, t]), float(ref[b, t])) for t in range(n_pos)]
    gae_kl = list(kl_r)
    gae_kl[seqlen - 1] = 0.0
    truncated = seqlen == n_pos
    outcome = [0.0] * n_pos
    outcome[max(seqlen - 2, 0)] = 0.0 if config.mask_no_eos_with_zero and truncated else score
    turn = config.gae_timestep_unit == "turn"
    rewards = outcome if turn else [k + o for k, o in zip(gae_kl, outcome)]
    v, m = values[b].tolist(), mask[b].tolist()
    boot = v[-1] if truncated else 0.0
    coef, g = config.discount * lam, config.discount
    if turn:
        adv, ret = turn_gae_row(rewards, v, m, turn_ids[b].tolist(), boot, coef, g)
        adv = [a + k for a, k in zip(adv, gae_kl)]
    else:
        adv = token_gae_row(rewards, v, m, boot, coef, g)
        ret = [a + vt for a, vt in zip(adv, v)]
    fields["kl_rewards"][b] = torch.tensor(kl_r)
    fields["tot_rewards"][b] = torch.tensor([k + o for k, o in zip(gae_kl, outcome)])
    fields["advantages"][b] = torch.tensor(adv)
    fields["returns"][b] = torch.tensor(ret)
