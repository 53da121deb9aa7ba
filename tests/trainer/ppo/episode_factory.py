"""Random multi-turn episodes for the step-level and multi-reward stage tests, exported both ways.

An `Episode` is what a rollout records: its turns (length, per-turn reward, the
anchor key of the state the turn acted in), the environment gaps between turns,
its outcome reward and reward components, its prompt key and per-token
entropies. `export(groups, split=...)` builds the trajectory-group dicts that
`concat_batch` takes, one row per episode or one row per turn (the trainer's
`per_turn` export: the turn's context plus the turn, only the turn trained on),
and `token_positions` says where each (episode, turn) landed, aligned, so a test
can read a stage's per-turn values back from either layout.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from areal_adv.utils.data import RolloutGroup, concat_batch


@dataclass
class Turn:
    length: int
    reward: float  # the turn's process reward (constant on its tokens)
    anchor: int  # key of the state the turn acted in
    gap: int  # environment tokens after the turn (0 after the last)


@dataclass
class Episode:
    prompt: int
    turns: list[Turn]
    outcome: float
    components: list[float] = field(default_factory=list)
    seed: int = 0


def make_episode_groups(
    seed: int,
    sizes: list[int],
    *,
    max_turns: int = 3,
    binary: bool = True,
    n_anchor_choices: int = 2,
    n_components: int = 0,
    prompt_keys: list[int] | None = None,
    max_turn_len: int = 3,
) -> list[list[Episode]]:
    """`sizes[g]` episodes for prompt g; anchors drawn from a small pool per turn so states recur."""
    rng = np.random.default_rng(seed)
    groups = []
    for g, size in enumerate(sizes):
        key = prompt_keys[g] if prompt_keys is not None else 1000 + g
        episodes = []
        for _ in range(size):
            n_turns = int(rng.integers(1, max_turns + 1))
            turns = []
            history = 0
            for k in range(n_turns):
                anchor = 7 + 31 * history if k else 7  # the first turn of every episode acts in the initial state
                history = history * n_anchor_choices + int(rng.integers(0, n_anchor_choices)) + 1
                turns.append(
                    Turn(
                        int(rng.integers(1, max_turn_len + 1)),
                        float(rng.choice([0.0, 0.5, 1.0])),
                        anchor,
                        int(rng.integers(1, 3)) if k < n_turns - 1 else 0,
                    )
                )
            outcome = float(rng.integers(0, 2)) if binary else float(rng.normal())
            components = [float(rng.integers(0, 2)) if binary else float(rng.normal()) for _ in range(n_components)]
            episodes.append(Episode(key, turns, outcome, components, int(rng.integers(0, 2**31))))
        groups.append(episodes)
    return groups


def _row(prompt_len: int, pieces: list[tuple[int, int, Turn | None]], seed: int) -> dict[str, list]:
    """Token lists of one row: prompt, then (turn id, length, turn or None for environment) pieces."""
    g = torch.Generator().manual_seed(seed)
    row = {
        "loss_mask": [0] * prompt_len,
        "turn_ids": [-1] * prompt_len,
        "token_rewards": [0.0] * prompt_len,
        "anchor_ids": [0] * prompt_len,
    }
    for turn_id, length, turn in pieces:
        trained = turn is not None and turn_id >= 0
        row["loss_mask"] += [1 if trained else 0] * length
        row["turn_ids"] += [turn_id if trained else -1] * length
        row["token_rewards"] += [turn.reward if trained else 0.0] * length
        row["anchor_ids"] += [turn.anchor if trained else 0] * length
    n = len(row["loss_mask"])
    row["logprobs"] = (-torch.rand(n, generator=g) * 2).tolist()
    row["token_entropy"] = (torch.rand(n, generator=g) * 2).tolist()
    return row


def _episode_pieces(
    ep: Episode, upto: int | None = None, trained: int | None = None
) -> list[tuple[int, int, Turn | None]]:
    """Pieces of the episode's turns 0..upto; with `trained`, only that turn keeps its id."""
    pieces = []
    last = len(ep.turns) - 1 if upto is None else upto
    for k, turn in enumerate(ep.turns[: last + 1]):
        turn_id = k if trained is None else (0 if k == trained else -1)
        pieces.append((turn_id, turn.length, turn))
        if k < last and turn.gap:
            pieces.append((-1, turn.gap, None))
    return pieces


def _pad(rows: list[dict[str, list]], key: str, fill, dtype) -> torch.Tensor:
    width = max(len(r[key]) for r in rows)
    return torch.tensor([r[key] + [fill] * (width - len(r[key])) for r in rows], dtype=dtype)


def _group_dict(
    rows: list[dict],
    outcomes: list[float],
    components: list[list[float]],
    keys: list[int],
    counts: list[int] | None,
    names: tuple[str, ...] | None,
    weights: tuple[float, ...] | None,
) -> dict:
    width = max(len(r["loss_mask"]) for r in rows)
    batch = {
        "input_ids": _pad([{**r, "ids": [3] * len(r["loss_mask"])} for r in rows], "ids", 0, torch.long),
        "attention_mask": torch.tensor([[1] * len(r["loss_mask"]) + [0] * (width - len(r["loss_mask"])) for r in rows]),
        "loss_mask": _pad(rows, "loss_mask", 0, torch.long),
        "turn_ids": _pad(rows, "turn_ids", -1, torch.long),
        "token_rewards": _pad(rows, "token_rewards", 0.0, torch.float32),
        "anchor_ids": _pad(rows, "anchor_ids", 0, torch.long),
        "logprobs": _pad(rows, "logprobs", 0.0, torch.float32),
        "token_entropy": _pad(rows, "token_entropy", 0.0, torch.float32),
        "is_truncated": torch.zeros(len(rows), dtype=torch.bool),
        "prompt_keys": torch.tensor(keys, dtype=torch.long),
    }
    if names:
        batch["rewards"] = torch.tensor(components, dtype=torch.float32)
        batch["reward_keys"] = names
        if weights is not None:
            batch["reward_weights"] = weights
    else:
        batch["rewards"] = torch.tensor(outcomes, dtype=torch.float32)
    if counts is not None:
        batch["rollout_group"] = RolloutGroup(row_counts=tuple(counts))
    return batch


def export(
    groups: list[list[Episode]],
    *,
    split: bool,
    prompt_len: int = 2,
    names: tuple[str, ...] | None = None,
    weights: tuple[float, ...] | None = None,
) -> list[dict]:
    """Trajectory-group dicts: one row per episode, or one row per turn with a RolloutGroup."""
    out = []
    for episodes in groups:
        rows, outcomes, components, keys, counts = [], [], [], [], []
        for ep in episodes:
            n_rows = len(ep.turns) if split else 1
            for k in range(n_rows):
                pieces = _episode_pieces(ep, upto=k, trained=k) if split else _episode_pieces(ep)
                rows.append(_row(prompt_len, pieces, ep.seed + 17 * k))
                outcomes.append(ep.outcome)
                components.append(ep.components)
                keys.append(ep.prompt)
            counts.append(n_rows)
        out.append(_group_dict(rows, outcomes, components, keys, counts if split else None, names, weights))
    return out


def batch_of(groups: list[list[Episode]], *, split: bool, **kwargs):
    return concat_batch(export(groups, split=split, **kwargs))


def token_positions(
    groups: list[list[Episode]], *, split: bool, prompt_len: int = 2
) -> list[list[list[tuple[int, int]]]]:
    """[group][episode][turn] -> the aligned (row, position) pairs of that turn's tokens."""
    out, row = [], 0
    for episodes in groups:
        per_group = []
        for ep in episodes:
            per_turn, start = [], prompt_len
            for k, turn in enumerate(ep.turns):
                if split:
                    context = prompt_len + sum(t.length + t.gap for t in ep.turns[:k])
                    per_turn.append([(row, p - 1) for p in range(context, context + turn.length)])
                    row += 1
                else:
                    per_turn.append([(row, p - 1) for p in range(start, start + turn.length)])
                    start += turn.length + turn.gap
            if not split:
                row += 1
            per_group.append(per_turn)
        out.append(per_group)
    return out
