"""Advantage cases shared by the 2-rank workers and the 1-process reference in the parent test.

Both sides build the same global list of trajectory groups from a seed, so only
the per-rank outputs have to travel back to the parent.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from typing import Any

_PPO_TESTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ppo")
if _PPO_TESTS not in sys.path:
    sys.path.insert(0, _PPO_TESTS)

from batch_factory import make_groups  # noqa: E402

from areal_adv.api.cli_args import AdvantageConfig, NormConfig, PPOActorConfig, StageSpec  # noqa: E402

#: Output fields compared row by row (2-D ones over the rank's own padded width).
OUT_KEYS = (
    "advantages",
    "returns",
    "loss_mask",
    "logprobs",
    "kl_rewards",
    "tot_rewards",
    "prox_logp",
    "is_truncated",
    "rewards",
)

#: Enough groups that both ranks hold several groups of different sizes.
N_GROUPS = 7


def _norm(mean: str | None, std: str | None, *, loo: bool = False, unbiased: bool = True) -> NormConfig:
    return NormConfig(mean_level=mean, std_level=std, mean_leave1out=loo, std_unbiased=unbiased, eps=1e-5)


@dataclass(frozen=True)
class Case:
    """One configuration and the batch it runs on."""

    seed: int
    config: dict[str, Any]
    groups: dict[str, Any] = field(default_factory=dict)

    def make_config(self) -> PPOActorConfig:
        return PPOActorConfig(**self.config)

    def make_groups(self) -> list[dict]:
        return make_groups(self.seed, n_groups=N_GROUPS, max_group=4, **self.groups)


_PPO = dict(discount=0.95, gae_lambda=0.9, kl_ctl=0.05)
_TURN = dict(_PPO, gae_timestep_unit="turn")

CASES: dict[str, Case] = {
    "token_batch_reward_batch_adv": Case(
        1, dict(_PPO, reward_norm=_norm("batch", "batch"), adv_norm=_norm("batch", "batch"))
    ),
    "token_group_reward_batch_adv": Case(
        2, dict(_PPO, reward_norm=_norm("group", "group"), adv_norm=_norm("batch", "batch"))
    ),
    "token_group_loo_reward_group_loo_adv": Case(
        3,
        dict(
            _PPO,
            reward_norm=_norm("group", "group", loo=True, unbiased=False),
            adv_norm=_norm("group", "group", loo=True),
        ),
    ),
    "token_batch_loo_reward_batch_loo_adv": Case(
        4, dict(_PPO, reward_norm=_norm("batch", "batch", loo=True), adv_norm=_norm("batch", "batch", loo=True))
    ),
    "turn_batch_loo_reward_batch_adv": Case(
        5, dict(_TURN, reward_norm=_norm("batch", "batch", loo=True), adv_norm=_norm("batch", "batch"))
    ),
    "turn_group_mean_batch_std": Case(
        6, dict(_TURN, reward_norm=_norm("group", "batch"), adv_norm=_norm("group", "batch", loo=True))
    ),
    "turn_vapo_lambda_batch_std_only": Case(
        7,
        dict(
            _TURN,
            gae_lambda="vapo",
            gae_lambda_kwargs={"alpha": 2.0},
            reward_norm=_norm(None, "batch"),
            adv_norm=_norm("batch", None),
        ),
    ),
    "split_token_batch_reward_group_adv": Case(
        8, dict(_PPO, reward_norm=_norm("batch", "batch"), adv_norm=_norm("group", "group")), dict(split=True)
    ),
    "split_turn_group_loo_reward_batch_adv": Case(
        9,
        dict(_TURN, reward_norm=_norm("group", "group", loo=True), adv_norm=_norm("batch", "batch")),
        dict(split=True),
    ),
    "split_refs_token_batch_loo_overlong": Case(
        10,
        dict(
            _PPO,
            reward_norm=_norm("batch", "batch", loo=True),
            adv_norm=_norm("batch", "batch"),
            overlong_reward_penalty=True,
            max_new_tokens=10,
            overlong_tokens=4,
            overlong_penalty_factor=1.0,
        ),
        dict(split=True, explicit_refs=True),
    ),
    "split_refs_turn_group_reward_group_loo_adv": Case(
        11,
        dict(_TURN, reward_norm=_norm("group", "group"), adv_norm=_norm("group", "group", loo=True)),
        dict(split=True, explicit_refs=True),
    ),
    "integer_rewards_folded_process_no_eos_masking": Case(
        12,
        dict(
            _PPO,
            reward_norm=_norm("group", "group", loo=True),
            adv_norm=_norm("batch", "batch"),
            token_rewards_as_adv=False,
            mask_no_eos_with_zero=True,
        ),
        dict(integer_rewards=True),
    ),
    "gvpo_process_shaping_batch_norms": Case(
        13,
        dict(
            _PPO,
            reward_norm=_norm("batch", "batch"),
            adv_norm=_norm("batch", "batch"),
            advantage=AdvantageConfig(process_adv_shaping=StageSpec("gvpo", {"negative_scale": 0.3})),
        ),
    ),
    # No `is_truncated`: truncation is then inferred from the padded width T (see the test's xfail).
    "no_truncation_flags_batch_norms": Case(
        14,
        dict(_PPO, reward_norm=_norm("batch", "batch"), adv_norm=_norm("batch", "batch")),
        dict(with_truncation_flags=False),
    ),
}
