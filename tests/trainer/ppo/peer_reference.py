"""Independent plain-loop references of peer estimators, from the papers / reference code.

Nothing here imports the package's advantage code. Each function follows the
published definition (verl `core_algos.py`, OpenRLHF `experience_maker.py`, the
GPG authors' trainer, SkyRL's `ppo_utils.py`) with Python loops over groups, rows and tokens in float64,
on a "response" view of the batch: per row, the aligned positions of its
generated tokens in order (verl's response_mask / OpenRLHF's action_mask), the
per-token KL estimate there, the outcome score and the prompt index.

Singleton groups follow the references (mean 0 / std 1 in verl, mean 0 in SkyRL's
MaxRL); the equality tests use groups of 2-8, and the singleton difference is tested
separately, except for MaxRL, whose singleton rule (the raw reward) is ours too.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

import numpy as np
import torch
from batch_factory import make_row, pad_rows

from areal_adv.utils.data import RolloutGroup, concat_batch

# ---------------------------------------------------------------------------
# Batches
# ---------------------------------------------------------------------------


def make_peer_groups(
    seed: int,
    sizes: list[int],
    *,
    binary: bool = True,
    max_turns: int = 3,
    split: bool = False,
    explicit_refs: bool = False,
    baselines: bool = False,
    process: bool = False,
    trailing_env: bool = True,
    T: int = 12,
) -> list[dict]:
    """Prompt groups with the given numbers of logical rollouts (ragged rows, optional splits).

    Peer algorithms have no process rewards, so `token_rewards` are dropped unless `process`.
    `trailing_env=False` removes environment tokens after a row's last turn, so that every
    row ends with a generated token (where token GAE needs the outcome score).
    """
    rng = np.random.default_rng(seed)
    groups = []
    for size in sizes:
        rows, rewards, counts, refs, base = [], [], [], [], []
        greedy = float(rng.integers(0, 2)) if binary else float(rng.normal())
        for _ in range(size):
            reward = float(rng.integers(0, 2)) if binary else float(rng.normal())
            n_rows = int(rng.integers(1, 3)) if split else 1
            counts.append(n_rows)
            refs.append(reward + (float(rng.normal()) if explicit_refs else 0.0))
            for _ in range(n_rows):
                row = make_row(rng, T, n_turns=int(rng.integers(1, max_turns + 1)), truncate=rng.random() < 0.2)
                rows.append(row if trailing_env else _end_on_generated(row))
                rewards.append(reward)
                base.append(greedy)
        batch = pad_rows(rows)
        if not process:
            del batch["token_rewards"]
        batch["rewards"] = torch.tensor(rewards, dtype=torch.float32)
        batch["is_truncated"] = torch.tensor(rng.random(len(rows)) < 0.3)
        if baselines:
            batch["reward_baselines"] = torch.tensor(base, dtype=torch.float32)
        if split:
            batch["rollout_group"] = RolloutGroup(
                row_counts=tuple(counts), rewards=torch.tensor(refs) if explicit_refs else None
            )
        groups.append(batch)
    return groups


def _end_on_generated(row: dict) -> dict:
    """Drop the environment tokens after the last generated one (attention and ids zeroed)."""
    last = int(row["loss_mask"].nonzero().max())
    out = {k: v.clone() for k, v in row.items()}
    out["attention_mask"][last + 1 :] = 0
    out["input_ids"][last + 1 :] = 0
    return out


def make_peer_batch(seed: int, sizes: list[int], **kwargs):
    return concat_batch(make_peer_groups(seed, sizes, **kwargs))


# ---------------------------------------------------------------------------
# The response view
# ---------------------------------------------------------------------------


def kl_estimate(logp: float, ref: float, kind: str) -> float:
    """Schulman's k1/k2/k3 as in OpenRLHF `compute_approx_kl` (clamped to +-10)."""
    log_ratio = logp - ref
    if kind == "k2":
        value = log_ratio**2 / 2.0
    elif kind == "k3":
        value = math.exp(-log_ratio) - 1 + log_ratio
    else:
        value = log_ratio
    return max(-10.0, min(10.0, value))


@dataclass
class Responses:
    actions: list[list[int]]  # per row: aligned positions of its generated tokens, in order
    index: list[int]  # per row: prompt id (verl's `index`)
    scores: list[float]  # per row: outcome reward
    kl: list[list[float]]  # per row, per action: KL(policy || reference) estimate
    values: list[list[float]]  # per row, per action: critic value (aligned)


def responses(batch: dict, meta, kl_kind: str = "k1") -> Responses:
    loss_mask, logprobs = batch["loss_mask"], batch["logprobs"]
    ref = batch.get("ref_logp")
    values = batch.get("values")
    B, T = loss_mask.shape
    index = [g for g, size in enumerate(meta.traj_group_sizes) for _ in range(size)]
    actions, kls, vals = [], [], []
    for b in range(B):
        row = [p - 1 for p in range(1, T) if loss_mask[b, p] == 1]
        actions.append(row)
        kls.append(
            [kl_estimate(float(logprobs[b, t + 1]), 0.0 if ref is None else float(ref[b, t]), kl_kind) for t in row]
        )
        vals.append([0.0 if values is None else float(values[b, t]) for t in row])
    return Responses(actions, index, [float(r) for r in batch["rewards"]], kls, vals)


def broadcast(per_row: list[float], resp: Responses) -> list[list[float]]:
    """verl's `scores.unsqueeze(-1) * response_mask`: the row's value on each of its tokens."""
    return [[a] * len(act) for a, act in zip(per_row, resp.actions)]


def token_rewards(resp: Responses, scores: list[float], kl_coef: float) -> list[list[float]]:
    """OpenRLHF `compute_reward` / verl `apply_kl_penalty`: -coef*KL per token, score at the last one."""
    out = []
    for s, kl in zip(scores, resp.kl):
        row = [-kl_coef * k for k in kl]
        if row:
            row[-1] += s
        out.append(row)
    return out


def _groups(index: list[int]) -> dict[int, list[int]]:
    members = defaultdict(list)
    for i, g in enumerate(index):
        members[g].append(i)
    return members


def _std(xs: list[float]) -> float:
    """torch.std: unbiased."""
    n = len(xs)
    m = sum(xs) / n
    return math.sqrt(sum((x - m) ** 2 for x in xs) / (n - 1))


# ---------------------------------------------------------------------------
# Outcome estimators (verl core_algos.py definitions)
# ---------------------------------------------------------------------------


def grpo(scores: list[float], index: list[int], eps: float = 1e-6, norm_by_std: bool = True) -> list[float]:
    out = list(scores)
    for rows in _groups(index).values():
        xs = [scores[i] for i in rows]
        mean, std = (0.0, 1.0) if len(xs) == 1 else (sum(xs) / len(xs), _std(xs))
        for i in rows:
            out[i] = (scores[i] - mean) / (std + eps) if norm_by_std else scores[i] - mean
    return out


def rloo(scores: list[float], index: list[int]) -> list[float]:
    out = list(scores)
    for rows in _groups(index).values():
        n = len(rows)
        if n > 1:
            mean = sum(scores[i] for i in rows) / n
            for i in rows:
                out[i] = scores[i] * n / (n - 1) - mean * n / (n - 1)
    return out


def opo(scores: list[float], lengths: list[float], index: list[int]) -> list[float]:
    out = list(scores)
    for rows in _groups(index).values():
        base = 0.0
        if len(rows) > 1:
            base = sum(lengths[i] * scores[i] for i in rows) / sum(lengths[i] for i in rows)
        for i in rows:
            out[i] = scores[i] - base
    return out


def gpg_verl(scores: list[float], index: list[int], f_norm: float = 1.0) -> list[float]:
    """verl `compute_gpg_outcome_advantage`: alpha = B / max(#non-zero scores, 1)."""
    alpha = len(scores) / max(sum(1 for s in scores if s != 0), 1)
    out = list(scores)
    for rows in _groups(index).values():
        mean = 0.0 if len(rows) == 1 else sum(scores[i] for i in rows) / len(rows)
        for i in rows:
            out[i] = alpha * (scores[i] - mean) / f_norm
    return out


def gpg_paper(scores: list[float], index: list[int], f_norm: bool = False, eps: float = 1e-6) -> list[float]:
    """The GPG authors' trainer: alpha = B / (B - M), M = samples of zero-std groups; F_norm = std."""
    groups = _groups(index)
    invalid = sum(len(rows) for rows in groups.values() if len({scores[i] for i in rows}) == 1)
    valid = len(scores) - invalid
    alpha = len(scores) / valid if valid else 1.0
    out = list(scores)
    for rows in groups.values():
        xs = [scores[i] for i in rows]
        mean = sum(xs) / len(xs)
        scale = (_std(xs) + eps) if f_norm and len(xs) > 1 else 1.0
        for i in rows:
            out[i] = alpha * (scores[i] - mean) / scale
    return out


def passk(scores: list[float], index: list[int], eps: float = 1e-6, norm_by_std: bool = True) -> list[float]:
    out = [0.0] * len(scores)
    for g, rows in _groups(index).items():
        if len(rows) < 2:
            raise ValueError(f"Pass@k requires at least 2 samples per group, group {g}")
        order = sorted(rows, key=lambda i: -scores[i])
        gap = scores[order[0]] - scores[order[1]]
        if norm_by_std:
            gap = gap / (_std([scores[i] for i in rows]) + eps)
        out[order[0]] = gap
    return out


def maxrl(scores: list[float], index: list[int], eps: float = 1e-6) -> list[float]:
    """SkyRL 0.3.0 `compute_maxrl_advantage`: (r - mean) / (mean + eps); a singleton keeps r - 0."""
    out = list(scores)
    for rows in _groups(index).values():
        if len(rows) == 1:
            continue
        mean = sum(scores[i] for i in rows) / len(rows)
        for i in rows:
            out[i] = (scores[i] - mean) / (mean + eps)
    return out


def lite_ppo(scores: list[float], index: list[int], eps: float = 1e-4) -> list[float]:
    """TRL 1.16 `GRPOTrainer._generate_and_score_completions`, `scale_rewards="batch"`.

    `advantages = rewards - mean_grouped_rewards`, `std_rewards = nanstd(rewards)` (every reward of
    the batch, Bessel-corrected; 0 for a batch of one), `advantages / (std_rewards + 1e-4)`.
    """
    n = len(scores)
    std = _std(scores) if n > 1 else 0.0
    out = list(scores)
    for rows in _groups(index).values():
        mean = sum(scores[i] for i in rows) / len(rows)
        for i in rows:
            out[i] = (scores[i] - mean) / (std + eps)
    return out


def remax(tok_rewards: list[list[float]], baselines: list[float]) -> list[list[float]]:
    """verl `compute_remax_outcome_advantage`: reverse cumsum of token rewards minus the baseline."""
    out = []
    for row, b in zip(tok_rewards, baselines):
        acc, rev = 0.0, []
        for r in reversed(row):
            acc += r
            rev.append(acc - b)
        out.append(rev[::-1])
    return out


# ---------------------------------------------------------------------------
# REINFORCE++ (OpenRLHF) and GAE (verl)
# ---------------------------------------------------------------------------


def cumulative_returns(tok_rewards: list[list[float]], gamma: float) -> list[list[float]]:
    """OpenRLHF `get_cumulative_returns` over each row's generated tokens."""
    out = []
    for row in tok_rewards:
        acc, rev = 0.0, []
        for r in reversed(row):
            acc = r + gamma * acc
            rev.append(acc)
        out.append(rev[::-1])
    return out


def whiten(rows: list[list[float]], *, unbiased: bool) -> list[list[float]]:
    """Batch whitening over all generated tokens.

    unbiased=False: OpenRLHF, (x - mean) * rsqrt(max(var, 1e-8)) with the biased variance;
    unbiased=True: verl `masked_whiten`, (x - mean) * rsqrt(var + 1e-8), unbiased variance.
    """
    flat = [x for row in rows for x in row]
    n = len(flat)
    mean = sum(flat) / n
    sq = sum((x - mean) ** 2 for x in flat)
    if unbiased:
        rstd = 1.0 / math.sqrt(sq / (n - 1) + 1e-8)
    else:
        rstd = 1.0 / math.sqrt(max(sq / n, 1e-8))
    return [[(x - mean) * rstd for x in row] for row in rows]


def token_variance(rows: list[list[float]]) -> float:
    """Biased variance over all generated tokens (what whitening divides by)."""
    flat = [x for row in rows for x in row]
    mean = sum(flat) / len(flat)
    return sum((x - mean) ** 2 for x in flat) / len(flat)


def gae(tok_rewards: list[list[float]], values: list[list[float]], gamma: float, lam: float) -> list[list[float]]:
    """verl `compute_gae_advantage_return` over each row's generated tokens (0 after the last)."""
    out = []
    for rs, vs in zip(tok_rewards, values):
        nextv, last, rev = 0.0, 0.0, []
        for r, v in zip(reversed(rs), reversed(vs)):
            delta = r + gamma * nextv - v
            last = delta + gamma * lam * last
            nextv = v
            rev.append(last)
        out.append(rev[::-1])
    return out


# ---------------------------------------------------------------------------
# Logical rollouts (split batches)
# ---------------------------------------------------------------------------


@dataclass
class Rollouts:
    rows: list[list[int]]  # per logical rollout: its tensor rows
    index: list[int]  # per logical rollout: prompt id
    rewards: list[float]  # per logical rollout: explicit reference, else the rows' reward
    lengths: list[float]  # per logical rollout: generated tokens over all its rows


def rollouts(batch: dict, meta) -> Rollouts:
    rows, index, rewards, lengths = [], [], [], []
    start = 0
    groups = meta.rollout_groups or (None,) * meta.n_trajs
    for g, (group, size) in enumerate(zip(groups, meta.traj_group_sizes)):
        counts = [1] * size if group is None else list(group.row_counts)
        for k, n in enumerate(counts):
            members = list(range(start, start + n))
            start += n
            rows.append(members)
            index.append(g)
            if group is not None and group.rewards is not None:
                rewards.append(float(group.rewards[k]))
            else:
                rewards.append(float(batch["rewards"][members[0]]))
            lengths.append(float(sum(batch["loss_mask"][i].sum() for i in members)))
    return Rollouts(rows, index, rewards, lengths)
