"""A plain-loop reference of the default advantage pipeline (advantage.md §4).

Written independently of the package: per-row / per-position / per-group Python
loops in float64, following AReaL's PPOActor._compute_advantages and
Normalization, with the spec's deliberate singleton-group change.
"""

from __future__ import annotations

import math

import torch


def ref_normalize(x, mask, cfg, group_sizes, member_counts=None):
    """AReaL Normalization with per-group loops; x [B] or [B, T]."""
    x = x.double()
    B = x.shape[0]
    m = torch.ones_like(x) if mask is None else mask.double()
    if mask is not None and m.sum() == 0:
        return x.float()
    if group_sizes is None:
        group_sizes = [cfg.group_size] * (B // cfg.group_size)
    bounds, start = [], 0
    for s in group_sizes:
        bounds.append((start, start + s))
        start += s

    def mean_of(xs, ms, loo):
        n, s = float(ms.sum()), float((xs * ms).sum())
        if loo:
            if n <= 1:
                return torch.zeros_like(xs)
            out = torch.empty_like(xs)
            for idx in range(xs.numel()):
                xi, mi = xs.view(-1)[idx], ms.view(-1)[idx]
                out.view(-1)[idx] = (s - xi * mi) / max(n - mi, 1.0) if mi > 0 else s / n
            return out
        return torch.zeros_like(xs) if n == 0 else torch.full_like(xs, s / n)

    def std_of(xs, ms, mean, unbiased):
        n = float(ms.sum())
        ss = float((((xs - mean) * ms) ** 2).sum())
        if unbiased:
            return torch.ones_like(xs) if n <= 1 else torch.full_like(xs, math.sqrt(ss / (n - 1)))
        return torch.ones_like(xs) if n == 0 else torch.full_like(xs, math.sqrt(ss / n))

    mean = torch.zeros_like(x)
    if cfg.mean_level == "batch":
        mean = mean_of(x, m, cfg.mean_leave1out)
    elif cfg.mean_level == "group":
        for i, (a, b) in enumerate(bounds):
            members = member_counts[i] if member_counts is not None else b - a
            if members == 1 and cfg.mean_leave1out:
                mean[a:b] = x[a:b]
            else:
                mean[a:b] = mean_of(x[a:b], m[a:b], cfg.mean_leave1out)
    eps = cfg.eps
    if cfg.std_level == "batch":
        std = std_of(x, m, mean, cfg.std_unbiased)
    elif cfg.std_level == "group":
        std = torch.zeros_like(x)
        for i, (a, b) in enumerate(bounds):
            members = member_counts[i] if member_counts is not None else b - a
            if members == 1 and cfg.std_unbiased:
                std[a:b] = 1.0
            else:
                std[a:b] = std_of(x[a:b], m[a:b], mean[a:b], cfg.std_unbiased)
    else:
        std, eps = torch.ones_like(x), 0.0
    return ((x - mean) * m / (std + eps)).float()


def ref_token_gae(rewards, values, mask, gamma, lam, bootstrap):
    B, T = rewards.shape
    adv = torch.zeros(B, T, dtype=torch.float64)
    for b in range(B):
        nextv, last = float(bootstrap[b]), 0.0
        for t in range(T - 2, -1, -1):
            if mask[b, t] > 0:
                delta = float(rewards[b, t]) + gamma * nextv - float(values[b, t])
                last = delta + gamma * float(lam[b]) * last
                nextv = float(values[b, t])
            adv[b, t] = last
    return adv, adv + values.double()


def ref_turn_gae(rewards, values, mask, turn_ids, gamma, lam, bootstrap):
    B, T = rewards.shape
    adv = torch.zeros(B, T, dtype=torch.float64)
    ret = values.double().clone()
    for b in range(B):
        turns = []  # (id, first position, reward sum, positions)
        for t in range(T):
            if mask[b, t] > 0:
                k = int(turn_ids[b, t])
                if not turns or turns[-1][0] != k:
                    turns.append([k, t, 0.0, []])
                turns[-1][2] += float(rewards[b, t])
                turns[-1][3].append(t)
        nextv, last = float(bootstrap[b]), 0.0
        for _k, first, r, positions in reversed(turns):
            v = float(values[b, first])
            last = r + gamma * nextv - v + gamma * float(lam[b]) * last
            nextv = v
            for t in positions:
                adv[b, t] = last
                ret[b, t] = last + v
    return adv, ret


def ref_kl(logp, ref, kind):
    r = logp.float() - ref.float()
    if kind == "k2":
        r = r**2 / 2.0
    elif kind == "k3":
        r = (-r).exp() - 1 + r
    return r.clamp(-10, 10)


def ref_pipeline(data, meta, cfg, mode="additive", gvpo=(0.2, 0.4, 1e-6)):
    """The default pipeline, row by row. `meta` None = legacy fixed group sizes."""
    B, T = data["input_ids"].shape
    rewards = data["rewards"].clone()
    raw_mask = data["loss_mask"]
    unpen = rewards.clone()
    if cfg.overlong_reward_penalty:
        rewards = rewards.double()
        for b in range(B):
            L = float(raw_mask[b].sum())
            pen = -(L - (cfg.max_new_tokens - cfg.overlong_tokens)) / cfg.overlong_tokens * cfg.overlong_penalty_factor
            rewards[b] = rewards[b] + min(pen, 0.0)
    out_rewards = rewards
    score = torch.empty(B, dtype=torch.float64)
    for b in range(B):
        s = (float(rewards[b]) + cfg.reward_bias) * cfg.reward_scaling
        score[b] = max(-cfg.reward_clip, min(cfg.reward_clip, s))
    if cfg.reward_norm is not None:
        if meta is not None and meta.rollout_groups is not None:
            score = _ref_split_norm(rewards, unpen, score, meta, cfg)
        else:
            gs = list(meta.traj_group_sizes) if meta is not None else None
            score = ref_normalize(score, None, cfg.reward_norm, gs).double()
    score = score.float()

    mask = torch.zeros(B, T)
    for b in range(B):
        for t in range(T - 1):
            mask[b, t] = float(raw_mask[b, t + 1])
        mask[b, T - 1] = float(raw_mask[b, 0])

    def roll(x):
        return torch.roll(x, -1, -1)

    if cfg.recompute_logprob and not cfg.use_decoupled_loss:
        old = data["prox_logp"] * mask
    else:
        old = roll(data["logprobs"]) * mask
    ref = data["ref_logp"] * mask if "ref_logp" in data else torch.zeros(B, T)
    seqlens = data["attention_mask"].sum(-1).long()
    trunc = data["is_truncated"].bool() if "is_truncated" in data else seqlens == T
    kl = -cfg.kl_ctl * ref_kl(old, ref, cfg.kl_estimator)
    gae_kl = kl.clone()
    outcome = torch.zeros(B, T)
    for b in range(B):
        gae_kl[b, seqlens[b] - 1] = 0
        s = 0.0 if (cfg.mask_no_eos_with_zero and trunc[b]) else float(score[b])
        outcome[b, max(int(seqlens[b]) - 2, 0)] = s
    turn_ids = None
    if "turn_ids" in data:
        turn_ids = roll(data["turn_ids"].long())
        turn_ids[:, -1] = -1
    folded = torch.zeros(B, T)
    token_adv = None
    if "token_rewards" in data:
        tr = data["token_rewards"].float().clone()
        if cfg.mask_no_eos_with_zero:
            tr[trunc] = 0
        rolled = roll(tr)
        if cfg.token_rewards_as_adv:
            token_adv = rolled * mask
        else:
            for b in range(B):
                for t in range(T):
                    if mask[b, t] == 0:
                        continue
                    nxt = (
                        t + 1 < T and mask[b, t + 1] > 0 and (turn_ids is None or turn_ids[b, t] == turn_ids[b, t + 1])
                    )
                    if not nxt:
                        folded[b, t] = rolled[b, t]
    values = data["values"] if "values" in data else torch.zeros(B, T)
    boot = torch.tensor([float(values[b, seqlens[b] - 1]) if trunc[b] else 0.0 for b in range(B)])
    lam = torch.full((B,), float(cfg.gae_lambda))
    if cfg.gae_timestep_unit == "turn":
        adv, ret = ref_turn_gae(outcome + folded, values, mask, turn_ids, cfg.discount, lam, boot)
        adv = adv + gae_kl.double()
        tot = outcome + folded + gae_kl
    else:
        tot = gae_kl + outcome + folded
        adv, ret = ref_token_gae(tot, values, mask, cfg.discount, lam, boot)
    adv = adv.float()
    if cfg.adv_norm is not None:
        gs = list(meta.traj_group_sizes) if meta is not None else None
        lg = list(meta.logical_group_sizes) if meta is not None else None
        adv = ref_normalize(adv, mask, cfg.adv_norm, gs, lg)
    if token_adv is not None:
        adv = _ref_shape(adv, token_adv, mask, mode, gvpo)
    prox = data.get("prox_logp") if cfg.use_decoupled_loss else old
    return {
        "advantages": adv,
        "returns": ret.float(),
        "loss_mask": mask,
        "logprobs": old,
        "kl_rewards": kl,
        "tot_rewards": tot,
        "prox_logp": prox,
        "is_truncated": trunc,
        "rewards": out_rewards,
    }


def _ref_split_norm(rewards, unpen, score, meta, cfg):
    refs, members = [], []
    row = 0
    groups = meta.rollout_groups
    for g, size in zip(groups, meta.traj_group_sizes):
        counts = g.row_counts if g is not None else [1] * size
        for j, c in enumerate(counts):
            idx = len(refs)
            explicit = g is not None and g.rewards is not None
            for r in range(c):
                if not explicit:
                    assert float(rewards[row + r]) == float(rewards[row]), "rows differ"
                members.append(idx)
            refs.append(float(g.rewards[j]) if explicit else float(rewards[row]))
            row += c
    ref = torch.tensor(refs, dtype=torch.float64)
    ref = ((ref + cfg.reward_bias) * cfg.reward_scaling).clamp(-cfg.reward_clip, cfg.reward_clip)
    norm = cfg.reward_norm
    if norm.mean_level is None and norm.std_level is None:
        return score
    # mean and scale per logical rollout from the reference loop normaliser
    sizes = list(meta.logical_group_sizes)
    mean = ref - ref_normalize_centered(ref, norm, sizes)
    scale = ref_scale(ref, norm, sizes, mean)
    if norm.std_level is not None:
        scale = torch.where(scale <= 2 * norm.eps, torch.ones_like(scale), scale)
    out = torch.empty_like(score)
    for b, i in enumerate(members):
        out[b] = (score[b] - mean[i]) / scale[i]
    return out


def ref_normalize_centered(x, cfg, sizes):
    """x - mean with the loop normaliser's mean (std disabled)."""
    from dataclasses import replace

    c = replace(cfg, std_level=None)
    return ref_normalize(x, None, c, sizes).double()


def ref_scale(x, cfg, sizes, mean):
    if cfg.std_level is None:
        return torch.ones_like(x)
    out = torch.empty_like(x)
    start = 0
    for s in sizes:
        xs, ms = x[start : start + s], mean[start : start + s]
        if cfg.std_level == "batch":
            xs, ms = x, mean
        n = xs.numel()
        ss = float(((xs - ms) ** 2).sum())
        singleton = cfg.std_level == "group" and s == 1
        if cfg.std_unbiased:
            std = 1.0 if (n <= 1 or singleton) else math.sqrt(ss / (n - 1))
        else:
            std = 1.0 if n == 0 else math.sqrt(ss / n)
        out[start : start + s] = std + cfg.eps
        start += s
    return out


def _ref_shape(adv, tok, mask, mode, gvpo):
    out = adv.clone()
    ns, zp, ze = gvpo
    B, T = adv.shape
    for b in range(B):
        for t in range(T):
            a, p = float(adv[b, t]), float(tok[b, t])
            if mode == "additive":
                out[b, t] = a + p
            elif mode == "gvpo":
                if mask[b, t] > 0 and p < 0:
                    out[b, t] = a * (1 + ns) if a < -ze else (-zp if abs(a) <= ze else 0.0)
            elif mode == "process_weighted" and mask[b, t] > 0:
                out[b, t] = a * p if a >= 0 else (p if p > 0 else a)
    return out
