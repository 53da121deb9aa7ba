"""Names of the built-in stage implementations, per stage (no torch import here).

The config layer checks names against this table without importing any stage
code; `areal.trainer.ppo.advantage` maps the same names to functions. Anything
not listed is treated as a dotted import path.
"""

from __future__ import annotations

#: Core built-ins (advantage.md §2).
CORE_STAGE_IMPLEMENTATIONS: dict[str, tuple[str, ...]] = {
    "compute": ("default",),
    "outcome_reward_shaping": ("auto", "identity"),
    "estimator": ("auto", "token_gae", "turn_gae"),
    "process_adv_shaping": ("auto", "additive", "gvpo", "process_weighted"),
}

#: Peer-algorithm stage functions (areal.trainer.ppo.estimators.peer_algorithms), by stage.
PEER_STAGE_IMPLEMENTATIONS: dict[str, tuple[str, ...]] = {
    "outcome_reward_shaping": ("opo", "gpg", "passk", "remax", "maxrl"),
    "estimator": ("reinforce_return", "turn_reinforce_return"),
}

#: Multi-reward, stateful, step-level, token-baseline and entropy stages (GDPO, KRPO, SPO, GiGPO, MT-GRPO, OTB,
#: entropy shaping).
EXTENDED_STAGE_IMPLEMENTATIONS: dict[str, tuple[str, ...]] = {
    "outcome_reward_shaping": ("gdpo", "krpo", "spo"),
    "estimator": ("gigpo", "mt_grpo", "optimal_token_baseline", "tir_optimal_token_baseline"),
    "process_adv_shaping": ("entropy_advantage",),
}

BUILTIN_STAGE_IMPLEMENTATIONS: dict[str, tuple[str, ...]] = {
    stage: names + PEER_STAGE_IMPLEMENTATIONS.get(stage, ()) + EXTENDED_STAGE_IMPLEMENTATIONS.get(stage, ())
    for stage, names in CORE_STAGE_IMPLEMENTATIONS.items()
}
