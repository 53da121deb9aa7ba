"""Advantage estimators and shaping beyond the seed's built-ins, each a plain stage function.

Holds the peer algorithms (`peer_algorithms`: OPO, GPG, pass@k, ReMax, MaxRL,
REINFORCE(++)), GDPO (`gdpo`), the stateful KRPO and SPO baselines
(`stateful_baselines`, with `prompt_table`), step-level credit (`step_credit`:
GiGPO, MT-GRPO), the optimal token baseline (`token_baseline`: OTB, TIR-OTB), entropy shaping (`entropy_shaping`) and the built-in
GAE-lambda schedules (`lambda_fn`). It may import `areal.trainer.ppo.rewards`,
`areal.trainer.ppo.checks`, the stage types, stage state, GAE primitives and
built-in stages at `areal.trainer.ppo`'s top level, `areal.api` and `areal.utils`;
only the orchestration (`stage_resolution`) imports it.
"""
