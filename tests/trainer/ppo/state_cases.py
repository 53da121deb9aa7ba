"""Multi-step cases for the 2-rank stage-state test: configs and a seeded global batch per step.

Both the torchrun workers and the 1-process reference in the parent build the
same global list of prompt groups per step; each rank takes the round-robin
share (`rank, rank + W, ...`, as the trainer dispatches prompts).
"""

from __future__ import annotations

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

import torch  # noqa: E402
from episode_factory import export, make_episode_groups  # noqa: E402

from areal_adv.api.cli_args import NormConfig, PPOActorConfig  # noqa: E402

STEPS = 4
N_GROUPS = 6


def _base(**fields) -> dict:
    return dict(
        dict(kl_ctl=0.0, reward_clip=1e9, reward_norm=None, adv_norm=None, token_rewards_as_adv=False), **fields
    )


#: name -> (actor config fields, episode group sizes of a step, split rollouts)
CASES: dict[str, tuple[dict, list[int], bool]] = {
    "krpo": (
        _base(
            advantage={
                "outcome_reward_shaping": {"implementation": "krpo"},
                "estimator": {"implementation": "reinforce_return"},
            }
        ),
        [3, 2, 4, 3, 2, 3],
        False,
    ),
    "krpo_split": (
        _base(
            advantage={
                "outcome_reward_shaping": {"implementation": "krpo"},
                "estimator": {"implementation": "reinforce_return"},
            }
        ),
        [2, 3, 2, 2, 3, 2],
        True,
    ),
    "spo": (
        _base(
            advantage={
                "outcome_reward_shaping": {"implementation": "spo"},
                "estimator": {"implementation": "reinforce_return"},
            }
        ),
        [1] * N_GROUPS,
        False,
    ),
    "rae": (
        _base(
            advantage={
                "outcome_reward_shaping": {"implementation": "rae", "kwargs": {"decay": 0.8}},
                "estimator": {"implementation": "reinforce_return"},
            }
        ),
        [2, 2, 3, 2, 2, 4],
        False,
    ),
    "running_norm": (
        _base(
            reward_norm=NormConfig(mean_level="running", std_level="running", eps=1e-6),
            adv_norm=NormConfig(mean_level="running", std_level="running", eps=1e-6),
            advantage={"estimator": {"implementation": "reinforce_return"}},
        ),
        [3, 2, 4, 2, 3, 2],
        True,
    ),
    "lite_ppo": (  # stateless: its batch std is all-reduced, so every rank's rows equal one process's
        _base(
            advantage={
                "outcome_reward_shaping": {"implementation": "lite_ppo"},
                "estimator": {"implementation": "reinforce_return"},
            }
        ),
        [3, 2, 4, 2, 3, 2],
        True,
    ),
    "gigpo_batch_norm": (
        _base(
            adv_norm=NormConfig(mean_level="batch", std_level="batch"),
            advantage={"estimator": {"implementation": "gigpo", "kwargs": {"step_discount": 0.9}}},
        ),
        [3, 2, 4, 2, 3, 2],
        True,
    ),
}


#: Cases whose state runs through the step's samples in sequence: every rank gathers them rank 0's first, so the
#: 1-process reference takes the groups in that order (rank 0's share, then rank 1's).
RANK_ORDERED = frozenset({"rae"})
#: Cases whose state sums the step's values: the ranks merge their moments (Chan et al.), so the state equals one
#: process's on the whole batch up to float64 rounding (and is bit-identical on every rank).
MERGED_MOMENTS = frozenset({"running_norm"})


def make_config(name: str) -> PPOActorConfig:
    return PPOActorConfig(**CASES[name][0])


def step_groups(name: str, step: int) -> list[dict]:
    """The step's global trajectory groups; prompt keys repeat within and across steps."""
    _, sizes, split = CASES[name]
    keys = [(step * 5 + g * 3) % 4 for g in range(len(sizes))]
    groups = export(make_episode_groups(100 * step + len(name), sizes, prompt_keys=keys), split=split)
    if name.startswith("rae"):  # self-play seats: row k of a game plays role k % 2; games from a pool of two
        groups = [
            {
                **grp,
                "role_ids": torch.arange(grp["input_ids"].shape[0]) % 2,
                "game_ids": torch.full((grp["input_ids"].shape[0],), key % 2, dtype=torch.long),
            }
            for grp, key in zip(groups, keys)
        ]
    return groups


def reference_layout(name: str, step: int, world_size: int) -> tuple[list[dict], list[list[int]]]:
    """The 1-process reference's groups and, per rank, the positions of that rank's groups among them."""
    groups = step_groups(name, step)
    if name not in RANK_ORDERED:
        return groups, [positions(len(groups), r, world_size) for r in range(world_size)]
    shares = [rank_share(groups, r, world_size) for r in range(world_size)]
    starts = [sum(len(s) for s in shares[:r]) for r in range(world_size)]
    return [g for s in shares for g in s], [list(range(b, b + len(s))) for b, s in zip(starts, shares)]


def rank_share(groups: list, rank: int, world_size: int) -> list:
    return groups[rank::world_size]


def positions(n_groups: int, rank: int, world_size: int) -> list[int]:
    return list(range(n_groups))[rank::world_size]


def fingerprints(actor) -> dict[str, str]:
    return {name: state.fingerprint() for name, state in actor.stage_states.items()}


def to_cpu(out: dict) -> dict:
    return {k: v.detach().cpu() for k, v in out.items() if torch.is_tensor(v)}
