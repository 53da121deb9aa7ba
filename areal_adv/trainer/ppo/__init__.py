"""The advantage pipeline and the PPO update, as packages that import only downwards (top first):

the orchestration at this level (`advantage`, the public path: the pipeline stage
by stage; `actor.PPOActor`; `stage_resolution`: config -> stage functions;
`fused`, `placement`, `outputs`, `output_guard`, which bounds the outputs by the
resolved stages) > `training` (update, loss, critic) > `estimators` (peer
algorithms, GDPO, KRPO/SPO, GiGPO/MT-GRPO, entropy shaping, lambda schedules) >
`rewards` (components, outcome scores) > `checks` (batch checks, contracts, aux
fields) > the stage API, also at this level at the public paths (`stage_types`,
`stage_state`, `gae`, `advantage_algorithms`: the types, state and built-in
stages a plugin imports) > `kernels`. The whole package may import
`areal_adv.trainer.parallel`, `areal_adv.trainer.lm`, `areal_adv.api` and `areal_adv.utils`;
tests/test_layout.py checks the order.
"""
