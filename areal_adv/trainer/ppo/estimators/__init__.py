"""Advantage estimators and shaping beyond the pipeline's original built-ins, each a plain stage function.

Holds the peer algorithms (`peer_algorithms`: OPO, GPG, LitePPO, pass@k, ReMax, MaxRL,
REINFORCE(++)), GDPO (`gdpo`), the stateful KRPO and SPO baselines
(`stateful_baselines`, with `prompt_table`), RAE's role baselines
(`role_baselines`), step-level credit (`step_credit`: GiGPO, MT-GRPO), the optimal
token baseline (`token_baseline`: OTB, TIR-OTB), entropy shaping (`entropy_shaping`),
the `combine` estimator (`combine`) and the built-in
GAE-lambda schedules (`lambda_fn`). It may import `areal_adv.trainer.ppo.rewards`,
`areal_adv.trainer.ppo.checks`, the stage types, stage state, GAE primitives and
built-in stages at `areal_adv.trainer.ppo`'s top level, `areal_adv.api` and `areal_adv.utils`;
only the orchestration (`stage_resolution`) imports it.
"""
