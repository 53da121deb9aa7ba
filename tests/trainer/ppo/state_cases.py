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

from areal.api.cli_args import NormConfig, PPOActorConfig  # noqa: E402

STEPS = 4
N_GROUPS = 6


def _base(**fields) -> dict:
    return dict(dict(kl_ctl=0.0, reward_clip=1e9, reward_norm=None, adv_norm=None, token_rewards_as_adv=False),
                **fields)


#: name -> (actor config fields, episode group sizes of a step, split rollouts)
CASES: dict[str, tuple[dict, list[int], bool]] = {
    "krpo": (_base(advantage={"outcome_reward_shaping": {"implementation": "krpo"},
                              "estimator": {"implementation": "reinforce_return"}}), [3, 2, 4, 3, 2, 3], False),
    "krpo_split": (_base(advantage={"outcome_reward_shaping": {"implementation": "krpo"},
                                    "estimator": {"implementation": "reinforce_return"}}), [2, 3, 2, 2, 3, 2], True),
    "spo": (_base(advantage={"outcome_reward_shaping": {"implementation": "spo"},
                             "estimator": {"implementation": "reinforce_return"}}), [1] * N_GROUPS, False),
    "gigpo_batch_norm": (_base(adv_norm=NormConfig(mean_level="batch", std_level="batch"),
                               advantage={"estimator": {"implementation": "gigpo", "kwargs": {"step_discount": 0.9}}}),
                         [3, 2, 4, 2, 3, 2], True),
}


def make_config(name: str) -> PPOActorConfig:
    return PPOActorConfig(**CASES[name][0])


def step_groups(name: str, step: int) -> list[dict]:
    """The step's global trajectory groups; prompt keys repeat within and across steps."""
    _, sizes, split = CASES[name]
    keys = [(step * 5 + g * 3) % 4 for g in range(len(sizes))]
    return export(make_episode_groups(100 * step + len(name), sizes, prompt_keys=keys), split=split)


def rank_share(groups: list, rank: int, world_size: int) -> list:
    return groups[rank::world_size]


def positions(n_groups: int, rank: int, world_size: int) -> list[int]:
    return list(range(n_groups))[rank::world_size]


def fingerprints(actor) -> dict[str, str]:
    return {name: state.fingerprint() for name, state in actor.stage_states.items()}


def to_cpu(out: dict) -> dict:
    return {k: v.detach().cpu() for k, v in out.items() if torch.is_tensor(v)}
