"""Random rollout batches for pipeline tests (ragged lengths, turns, gaps, groups)."""

from __future__ import annotations

import numpy as np
import torch

from areal_adv.utils.data import RolloutGroup, concat_batch


def make_row(rng: np.random.Generator, T: int, *, n_turns: int, truncate: bool) -> dict[str, torch.Tensor]:
    """One right-padded row: prompt, then turns separated by environment tokens."""
    prompt = int(rng.integers(1, 4))
    layout: list[int] = [-1] * prompt
    for k in range(n_turns):
        layout += [k] * int(rng.integers(1, 5))
        if k < n_turns - 1:
            layout += [-1] * int(rng.integers(1, 3))
    if rng.random() < 0.2:  # environment tokens after the last turn
        layout += [-1]
    seqlen = len(layout)
    width = max(T, seqlen)
    if truncate:
        width = seqlen
    turn_ids = torch.full((width,), -1, dtype=torch.long)
    turn_ids[:seqlen] = torch.tensor(layout)
    loss_mask = (turn_ids >= 0).long()
    attn = torch.zeros(width, dtype=torch.long)
    attn[:seqlen] = 1
    g = torch.Generator().manual_seed(int(rng.integers(0, 2**31)))
    logprobs = torch.where(loss_mask.bool(), -torch.rand(width, generator=g) * 3, torch.zeros(width))
    token_rewards = torch.zeros(width)
    for k in range(n_turns):  # constant within a turn, in [0, 1]
        token_rewards[turn_ids == k] = float(rng.choice([0.0, 0.5, 1.0]))
    return {
        "input_ids": torch.randint(0, 50, (width,), generator=g) * attn,
        "attention_mask": attn,
        "loss_mask": loss_mask,
        "logprobs": logprobs,
        "ref_logp": -torch.rand(width, generator=g) * 3,
        "values": torch.randn(width, generator=g),
        "turn_ids": turn_ids,
        "token_rewards": token_rewards,
    }


def pad_rows(rows: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    T = max(r["input_ids"].numel() for r in rows)
    out = {}
    for key in rows[0]:
        fill = -1 if key == "turn_ids" else 0
        out[key] = torch.stack([torch.nn.functional.pad(r[key], (0, T - r[key].numel()), value=fill) for r in rows])
    return out


def make_groups(
    seed: int,
    *,
    n_groups: int = 3,
    max_group: int = 4,
    max_turns: int = 3,
    integer_rewards: bool = False,
    split: bool = False,
    explicit_refs: bool = False,
    with_truncation_flags: bool = True,
    T: int = 12,
) -> list[dict]:
    """Trajectory groups for `concat_batch`; with `split`, logical rollouts span several rows."""
    rng = np.random.default_rng(seed)
    groups = []
    for _ in range(n_groups):
        size = int(rng.integers(1, max_group + 1))
        rows, rewards, row_counts, refs = [], [], [], []
        for _ in range(size):
            reward = float(rng.integers(0, 2)) if integer_rewards else float(rng.normal())
            n_rows = int(rng.integers(1, 3)) if split else 1
            row_counts.append(n_rows)
            refs.append(reward + (float(rng.normal()) if explicit_refs else 0.0))
            for _ in range(n_rows):
                rows.append(make_row(rng, T, n_turns=int(rng.integers(1, max_turns + 1)), truncate=rng.random() < 0.2))
                rewards.append(reward)
        batch = pad_rows(rows)
        batch["rewards"] = torch.tensor(rewards, dtype=torch.long if integer_rewards else torch.float32)
        if with_truncation_flags:
            batch["is_truncated"] = torch.tensor(rng.random(len(rows)) < 0.3)
        if split:
            batch["rollout_group"] = RolloutGroup(
                row_counts=tuple(row_counts), rewards=torch.tensor(refs) if explicit_refs else None
            )
        groups.append(batch)
    return groups


def make_batch(seed: int, drop: tuple[str, ...] = (), **kwargs):
    """(batch, meta) through concat_batch, optionally without some fields."""
    batch, meta = concat_batch(make_groups(seed, **kwargs))
    for key in drop:
        batch.pop(key, None)
    return batch, meta
