"""Names of the built-in stage implementations, per stage (no torch import here).

The config layer checks names against this table without importing any stage
code; `areal.trainer.ppo.advantage` maps the same names to functions. Anything
not listed is treated as a dotted import path.
"""

from __future__ import annotations

#: Core built-ins (docs: *Custom advantage computation*, *Stage functions*).
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

#: Multi-reward, stateful, step-level, token-baseline, entropy and combination stages (GDPO, KRPO, SPO, RAE, GiGPO,
#: MT-GRPO, OTB, entropy shaping, `combine`).
EXTENDED_STAGE_IMPLEMENTATIONS: dict[str, tuple[str, ...]] = {
    "outcome_reward_shaping": ("gdpo", "krpo", "spo", "rae"),
    "estimator": ("gigpo", "mt_grpo", "optimal_token_baseline", "tir_optimal_token_baseline", "combine"),
    "process_adv_shaping": ("entropy_advantage",),
}

BUILTIN_STAGE_IMPLEMENTATIONS: dict[str, tuple[str, ...]] = {
    stage: names + PEER_STAGE_IMPLEMENTATIONS.get(stage, ()) + EXTENDED_STAGE_IMPLEMENTATIONS.get(stage, ())
    for stage, names in CORE_STAGE_IMPLEMENTATIONS.items()
}
